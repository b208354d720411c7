/* A batch's records and replies (batch.h). */
#include "batch.h"
#include "log.h"
#include "rdzv_proto.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rdzv_batch_record(rdzv_batch_t *self, cJSON *record)
{
    if (!record)
        return -1;
    int rc = rdzv_journal_append(self->journal, record) == 0 ? 0 : -1;
    self->appended++;
    if (rc == 0)
        rc = rdzv_state_apply(self->state, record);
    cJSON_Delete(record);
    return rc;
}

int rdzv_batch_record_applied(rdzv_batch_t *self, cJSON *record)
{
    int rc = record && rdzv_journal_append(self->journal, record) == 0 ? 0 : -1;
    self->appended++;
    cJSON_Delete(record);
    return rc;
}

/* The next free slot of the outbox of peer's shard, or NULL (out of memory). */
static rdzv_reply_t *s_slot(rdzv_batch_t *self, const rdzv_peer_t *peer)
{
    /* Shards number their own peers: anything else is a bug, not input. */
    assert(peer->shard >= 0 && peer->shard < RDZV_MAX_SHARDS);
    rdzv_outbox_t *o = &self->outboxes[peer->shard];
    if (o->len == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        rdzv_reply_t *grown = realloc(o->v, cap * sizeof *grown);
        if (!grown)
            return NULL;
        o->v = grown;
        o->cap = cap;
    }
    return &o->v[o->len++];
}

void rdzv_batch_reply(rdzv_batch_t *self, const rdzv_peer_t *peer, char *text)
{
    rdzv_reply_t *slot = text ? s_slot(self, peer) : NULL;
    if (!slot) {
        free(text);
        return;
    }
    slot->text = text;
    slot->shared = NULL;
    rdzv_peer_copy(&slot->peer, peer);
    self->reply_bytes += strlen(text);
}

void rdzv_batch_reply_assignment(rdzv_batch_t *self, const rdzv_peer_t *peer,
                                 const rdzv_reply_t *parts)
{
    rdzv_reply_t *slot = parts->shared ? s_slot(self, peer) : NULL;
    if (!slot)
        return;
    *slot = *parts;
    slot->peer = (rdzv_peer_t) { 0 };
    rdzv_peer_copy(&slot->peer, peer);
    slot->text = NULL;
    slot->shared = rdzv_shared_ref(parts->shared);
}

static void s_error(rdzv_batch_t *self, const rdzv_peer_t *peer, const char *group, int rank,
                    const char *code, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    int code_index = rdzv_error_code_index(code);
    if (code_index >= 0)
        self->metrics->refusals[code_index]++;
    /* Timeouts are the normal end of a wait; busy errors come by the
     * thousand from one peer that does not read: counted, not logged. */
    if (strcmp(code, RDZV_E_TIMEOUT) != 0 && strcmp(code, RDZV_E_BUSY) != 0)
        rdzv_log_refuse(code, group, rank, msg);
    rdzv_batch_reply(self, peer, rdzv_reply_error(peer->req, code, msg));
}

/* Only joins and heartbeats name a rank. */
static int s_rank(const rdzv_request_t *req)
{
    return req->op == RDZV_OP_JOIN || req->op == RDZV_OP_HEARTBEAT ? req->rank : -1;
}

void rdzv_batch_error(rdzv_batch_t *self, const rdzv_peer_t *peer, const char *code,
                      const char *fmt, ...)
{
    const rdzv_request_t *req = self->asked && peer == self->asker ? self->asked : NULL;
    va_list ap;
    va_start(ap, fmt);
    s_error(self, peer, req ? req->group : NULL, req ? s_rank(req) : -1, code, fmt, ap);
    va_end(ap);
}

void rdzv_batch_error_to(rdzv_batch_t *self, const rdzv_peer_t *peer, const char *group, int rank,
                         const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    s_error(self, peer, group, rank, code, fmt, ap);
    va_end(ap);
}

bool rdzv_batch_wait_ok(rdzv_batch_t *self, const rdzv_peer_t *peer)
{
    int max = self->cfg->limits.max_waits;
    if (self->pending_at_tick + self->added_since_tick >= max) {
        /* The bound only grows between ticks: count exactly near the limit. */
        self->pending_at_tick = rdzv_state_pending(self->state);
        self->added_since_tick = 0;
    }
    if (self->pending_at_tick + self->added_since_tick < max) {
        self->added_since_tick++;
        return true;
    }
    rdzv_batch_error(self, peer, RDZV_E_LIMIT, "%d requests are waiting, the limit", max);
    return false;
}

void rdzv_batch_refuse_all(rdzv_batch_t *self, const char *message)
{
    for (int t = 0; t < RDZV_MAX_SHARDS; t++) {
        rdzv_outbox_t *o = &self->outboxes[t];
        for (size_t i = 0; i < o->len; i++)
            rdzv_reply_refuse(&o->v[i], RDZV_E_INTERNAL, message);
    }
}

void rdzv_batch_take(rdzv_batch_t *self, int shard, rdzv_outbox_t *out)
{
    assert(shard >= 0 && shard < RDZV_MAX_SHARDS);
    *out = self->outboxes[shard];
    self->outboxes[shard] = (rdzv_outbox_t) { 0 };
}

void rdzv_batch_clear(rdzv_batch_t *self)
{
    for (int t = 0; t < RDZV_MAX_SHARDS; t++) {
        rdzv_outbox_t *o = &self->outboxes[t];
        for (size_t i = 0; i < o->len; i++)
            rdzv_reply_clear(&o->v[i]);
        free(o->v);
        *o = (rdzv_outbox_t) { 0 };
    }
}
