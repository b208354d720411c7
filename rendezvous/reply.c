#include "reply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rdzv_shared_t *rdzv_shared_new(const char *text, size_t len)
{
    rdzv_shared_t *self = malloc(sizeof *self + len + 1);
    if (!self)
        return NULL;
    atomic_init(&self->refs, 1);
    self->len = len;
    memcpy(self->text, text, len);
    self->text[len] = '\0';
    return self;
}

rdzv_shared_t *rdzv_shared_ref(rdzv_shared_t *shared)
{
    if (shared)
        atomic_fetch_add_explicit(&shared->refs, 1, memory_order_relaxed);
    return shared;
}

void rdzv_shared_unref(rdzv_shared_t **shared_p)
{
    rdzv_shared_t *shared = *shared_p;
    *shared_p = NULL;
    if (shared && atomic_fetch_sub_explicit(&shared->refs, 1, memory_order_acq_rel) == 1)
        free(shared);
}

char *rdzv_put_int(char *p, int v)
{
    if (v < 0)
        *p++ = '-';
    unsigned u = v < 0 ? 0u - (unsigned) v : (unsigned) v;
    char tmp[12];
    int n = 0;
    do {
        tmp[n++] = (char) ('0' + u % 10);
        u /= 10;
    } while (u);
    while (n)
        *p++ = tmp[--n];
    return p;
}

int rdzv_reply_render(rdzv_reply_t *reply)
{
    if (reply->text || !reply->shared)
        return 0;
    size_t cap = reply->shared->len + 128 + (size_t) reply->ports * 12;
    char *text = malloc(cap);
    if (!text)
        return -1;
    int n = snprintf(text, cap, "{\"v\":1,\"id\":%lld,\"ok\":true,\"assignment\":{\"rank\":%d,"
                     "\"ports\":[", (long long) reply->peer.req, reply->rank);
    char *p = text + n;
    for (int i = 0; i < reply->ports; i++) {
        if (i)
            *p++ = ',';
        p = rdzv_put_int(p, reply->first_port + i);
    }
    *p++ = ']';
    *p++ = ',';
    memcpy(p, reply->shared->text, reply->shared->len);
    p += reply->shared->len;
    memcpy(p, "}}", 3);
    reply->text = text;
    rdzv_shared_unref(&reply->shared);
    return 0;
}

void rdzv_peer_copy(rdzv_peer_t *dst, const rdzv_peer_t *src)
{
    size_t len = src->len < sizeof dst->id ? src->len : sizeof dst->id;
    memcpy(dst->id, src->id, len);
    dst->len = len;
    dst->req = src->req;
    dst->shard = src->shard;
}

void rdzv_reply_clear(rdzv_reply_t *reply)
{
    free(reply->text);
    reply->text = NULL;
    rdzv_shared_unref(&reply->shared);
}
