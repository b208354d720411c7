/* Every reply rdzvd sends is made here: the few fixed texts, and the
 * assignment from its parts. */
#include "reply.h"
#include "rdzv_proto.h"

#include <limits.h>
#include <stdbool.h>
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

char *rdzv_put_i64(char *p, int64_t v)
{
    if (v < 0)
        *p++ = '-';
    uint64_t u = v < 0 ? 0u - (uint64_t) v : (uint64_t) v;
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = (char) ('0' + u % 10);
        u /= 10;
    } while (u);
    while (n)
        *p++ = tmp[--n];
    return p;
}

char *rdzv_put_int(char *p, int v)
{
    return rdzv_put_i64(p, v);
}

static char *s_put(char *p, const char *lit, size_t len)
{
    memcpy(p, lit, len);
    return p + len;
}
#define S_PUT(p, lit) s_put((p), (lit), sizeof(lit) - 1)

void rdzv_decimal_set(rdzv_decimal_t *d, int v)
{
    d->v = v;
    d->n = (size_t) (rdzv_put_int(d->digits, v) - d->digits);
}

/* The next number is usually the last one plus one (a block's ports, a
 * release's ranks) or the same (a release's first ports): its digits are
 * then the last ones incremented in place, not divided out again. */
char *rdzv_decimal_put(rdzv_decimal_t *d, char *p, int v)
{
    if (d->v >= 0 && d->v < INT_MAX && v == d->v + 1) {
        size_t k = d->n;
        while (k > 0 && d->digits[k - 1] == '9')
            d->digits[--k] = '0';
        if (k > 0) {
            d->digits[k - 1]++;
        } else {                     /* 99 -> 100: one digit more */
            memmove(d->digits + 1, d->digits, d->n++);
            d->digits[0] = '1';
        }
        d->v = v;
    } else if (v != d->v) {
        rdzv_decimal_set(d, v);
    }
    memcpy(p, d->digits, d->n);
    return p + d->n;
}

int rdzv_reply_render(rdzv_reply_t *reply)
{
    if (reply->text || !reply->shared)
        return 0;
    size_t cap = reply->shared->len + 320 + (size_t) reply->ports * 12;
    char *text = malloc(cap);
    if (!text)
        return -1;
    char *p = S_PUT(text, "{\"v\":" RDZV_PROTO_VERSION_TEXT ",\"id\":");
    p = rdzv_put_i64(p, reply->peer.req);
    p = S_PUT(p, ",\"ok\":true,\"assignment\":{\"rank\":");
    p = rdzv_put_int(p, reply->rank);
    p = S_PUT(p, ",\"local_rank\":");
    p = rdzv_put_int(p, reply->local_rank);
    p = S_PUT(p, ",\"local_world\":");
    p = rdzv_put_int(p, reply->local_world);
    p = S_PUT(p, ",\"group_rank\":");
    p = rdzv_put_int(p, reply->group_rank);
    p = S_PUT(p, ",\"group_world\":");
    p = rdzv_put_int(p, reply->group_world);
    p = S_PUT(p, ",\"named_ports\":{\"store\":");
    p = rdzv_put_int(p, reply->role_port + RDZV_ROLE_STORE);
    p = S_PUT(p, ",\"dp_rpc\":");
    p = rdzv_put_int(p, reply->role_port + RDZV_ROLE_DP_RPC);
    p = S_PUT(p, ",\"api\":");
    p = rdzv_put_int(p, reply->first_port + RDZV_ROLE_API);
    p = S_PUT(p, ",\"probe\":[");
    p = rdzv_put_int(p, reply->first_port + rdzv_probe_offset(reply->ports));
    *p++ = ',';
    p = rdzv_put_int(p, reply->first_port + reply->ports - 1);
    p = S_PUT(p, "]},\"ports\":[");
    rdzv_decimal_t d;
    rdzv_decimal_set(&d, reply->first_port);
    for (int i = 0; i < reply->ports; i++) {
        if (i)
            *p++ = ',';
        p = rdzv_decimal_put(&d, p, reply->first_port + i);
    }
    *p++ = ']';
    *p++ = ',';
    memcpy(p, reply->shared->text, reply->shared->len);
    p += reply->shared->len;
    memcpy(p, "}}", 3);
    /* The estimate above is ~1.5x the text, and a release's texts stay
     * alive until libzmq has written them: give back the rest (glibc
     * splits the chunk in place). */
    char *fit = realloc(text, (size_t) (p + 3 - text));
    reply->text = fit ? fit : text;
    rdzv_shared_unref(&reply->shared);
    return 0;
}
int rdzv_peer_set_id(rdzv_peer_t *peer, const unsigned char *id, size_t len)
{
    if (len > RDZV_PEER_MAX)
        len = RDZV_PEER_MAX;
    peer->long_id = NULL;
    if (len > RDZV_PEER_INLINE) {
        if (!(peer->long_id = malloc(len))) {
            peer->len = 0;
            return -1;
        }
        memcpy(peer->long_id, id, len);
    } else {
        memcpy(peer->id, id, len);
    }
    peer->len = len;
    return 0;
}

void rdzv_peer_clear(rdzv_peer_t *peer)
{
    if (peer->len > RDZV_PEER_INLINE)
        free(peer->long_id);
    peer->long_id = NULL;
    peer->len = 0;
}

int rdzv_peer_copy(rdzv_peer_t *dst, const rdzv_peer_t *src)
{
    dst->req = src->req;
    dst->shard = src->shard;
    dst->fd = src->fd;
    return rdzv_peer_set_id(dst, rdzv_peer_id(src), src->len);
}

void rdzv_reply_refuse(rdzv_reply_t *reply, const char *code, const char *message)
{
    free(reply->text);
    rdzv_shared_unref(&reply->shared);
    reply->text = rdzv_reply_error(reply->peer.req, code, message);
}

void rdzv_reply_clear(rdzv_reply_t *reply)
{
    free(reply->text);
    reply->text = NULL;
    rdzv_shared_unref(&reply->shared);
    rdzv_peer_clear(&reply->peer);
}

/* A reply object with the fields every reply starts with. */
static cJSON *s_reply_object(int64_t id, bool ok)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "v", RDZV_PROTO_VERSION);
    char id_text[24];
    snprintf(id_text, sizeof id_text, "%lld", (long long) id);
    cJSON_AddRawToObject(root, "id", id_text);     /* cJSON prints large doubles rounded */
    if (ok)
        cJSON_AddBoolToObject(root, "ok", 1);
    return root;
}

static char *s_print(cJSON *root)
{
    char *text = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

char *rdzv_reply_error(int64_t id, const char *code, const char *message)
{
    return rdzv_reply_error_detail(id, code, message, NULL);
}

char *rdzv_reply_error_detail(int64_t id, const char *code, const char *message, cJSON *detail)
{
    cJSON *root = s_reply_object(id, false);
    cJSON *error = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(error, "code", code);
    cJSON_AddStringToObject(error, "message", message);
    for (cJSON *item = detail ? detail->child : NULL; item;) {
        cJSON *next = item->next;
        cJSON_AddItemToObject(error, item->string, cJSON_DetachItemViaPointer(detail, item));
        item = next;
    }
    cJSON_Delete(detail);
    return s_print(root);
}

/* ok and epoch are formatted directly: heartbeats are the steady traffic
 * of every rank. */
char *rdzv_reply_ok(int64_t id)
{
    char *text = malloc(64);
    if (text)
        snprintf(text, 64, "{\"v\":" RDZV_PROTO_VERSION_TEXT ",\"id\":%lld,\"ok\":true}",
                 (long long) id);
    return text;
}

char *rdzv_reply_epoch(int64_t id, int64_t epoch)
{
    char *text = malloc(96);
    if (text)
        snprintf(text, 96, "{\"v\":" RDZV_PROTO_VERSION_TEXT ",\"id\":%lld,\"ok\":true,\"epoch\":%lld}",
                 (long long) id, (long long) epoch);
    return text;
}

char *rdzv_reply_value(int64_t id, const char *value)
{
    cJSON *root = s_reply_object(id, true);
    cJSON_AddStringToObject(root, "value", value);
    return s_print(root);
}

char *rdzv_reply_groups(int64_t id, cJSON *groups)
{
    cJSON *root = s_reply_object(id, true);
    if (!root) {
        cJSON_Delete(groups);
        return NULL;
    }
    cJSON_AddItemToObject(root, "groups", groups);
    return s_print(root);
}
