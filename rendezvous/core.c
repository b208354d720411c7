#include "core_state.h"
#include "proto.h"
#include "rdzv_proto.h"
#include "rdzv_util.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A member's own strings; the member itself lives in its chunk. */
static void s_member_clear(rdzv_member_t *m)
{
    if (!m)
        return;
    free(m->session);
    free(m->host);
    free(m->node);
    rdzv_peer_clear(&m->peer);
}

static void s_kv_waiter_free(void **item)
{
    rdzv_kv_waiter_t *w = *item;
    if (w) {
        rdzv_peer_clear(&w->peer);
        free(w->key);
        free(w);
        *item = NULL;
    }
}

static void s_free_string(void **item)
{
    free(*item);
    *item = NULL;
}

void rdzv_group_free(void **item)
{
    rdzv_group_t *g = *item;
    if (!g)
        return;
    for (int r = 0; g->members && r < g->world; r++)
        s_member_clear(g->members[r]);
    for (int c = 0; g->member_chunks && c * RDZV_MEMBER_CHUNK < g->world; c++)
        free(g->member_chunks[c]);
    free(g->member_chunks);
    free(g->members);
    rdzv_ncclroot_destroy(&g->root);
    zhashx_destroy(&g->kv);
    zlistx_destroy(&g->kv_waiters);
    cJSON_Delete(g->nccl_ids);
    cJSON_Delete(g->rank0_ids);
    rdzv_shared_unref(&g->shared[0]);
    rdzv_shared_unref(&g->shared[1]);
    free(g->name);
    free(g);
    *item = NULL;
}

rdzv_group_t *rdzv_group_new(const char *name, int world, rdzv_nccl_mode_t mode, int count)
{
    rdzv_group_t *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->name = strdup(name);
    g->world = world;
    g->epoch = 1;
    g->nccl_mode = mode;
    g->nccl_count = count;
    g->members = calloc((size_t) world, sizeof *g->members);
    g->member_chunks = calloc((size_t) (world + RDZV_MEMBER_CHUNK - 1) / RDZV_MEMBER_CHUNK,
                              sizeof *g->member_chunks);
    g->kv = zhashx_new();
    zhashx_set_destructor(g->kv, s_free_string);
    g->kv_waiters = zlistx_new();
    zlistx_set_destructor(g->kv_waiters, s_kv_waiter_free);
    if (!g->name || !g->members || !g->member_chunks || !g->kv || !g->kv_waiters) {
        void *item = g;
        rdzv_group_free(&item);
        return NULL;
    }
    return g;
}

rdzv_member_t *rdzv_group_member(rdzv_group_t *g, int rank)
{
    if (g->members[rank])
        return g->members[rank];
    int c = rank / RDZV_MEMBER_CHUNK;
    if (!g->member_chunks[c]) {
        int n = g->world - c * RDZV_MEMBER_CHUNK;
        g->member_chunks[c] = calloc((size_t) (n < RDZV_MEMBER_CHUNK ? n : RDZV_MEMBER_CHUNK),
                                     sizeof **g->member_chunks);
        if (!g->member_chunks[c])
            return NULL;
    }
    return g->members[rank] = &g->member_chunks[c][rank % RDZV_MEMBER_CHUNK];
}

rdzv_group_t *rdzv_core_group(rdzv_core_t *self, const char *name)
{
    return zhashx_lookup(self->groups, name);
}

static int s_load(rdzv_core_t *self, char *err, size_t errlen)
{
    self->groups = zhashx_new();
    zhashx_set_destructor(self->groups, rdzv_group_free);
    self->plans = rdzv_plans_new(self->cfg.port_base, self->cfg.ports_per_rank,
                                 self->cfg.port_limit);
    if (!self->plans) {
        snprintf(err, errlen, "bad port range");
        return -1;
    }
    size_t torn = 0;
    self->replaying = true;
    long n = rdzv_journal_replay(self->journal, rdzv_core_apply, self, self->cfg.repair,
                                 &torn, err, errlen);
    self->replaying = false;
    if (n < 0)
        return -1;
    if (torn && rdzv_journal_repaired_at(self->journal) >= 0)
        rdzv_core_log("journal", "repair: cut %zu bytes from the corruption at offset %ld on",
                      torn, rdzv_journal_repaired_at(self->journal));
    else if (torn)
        rdzv_core_log("journal", "cut a torn last record of %zu bytes", torn);
    rdzv_core_log("journal", "replayed %ld records, %zu groups",
                  n, zhashx_size(self->groups));
    return 0;
}

/* A server-made ID whose root died with the previous rdzvd must never be
 * handed out again: such groups move on to a new epoch. */
static void s_retire_dead_roots(rdzv_core_t *self)
{
    zlistx_t *names = zhashx_keys(self->groups);
    for (const char *name = zlistx_first(names); name; name = zlistx_next(names)) {
        rdzv_group_t *g = rdzv_core_group(self, name);
        if (g->nccl_mode == RDZV_NCCL_SERVER && g->nccl_ids && !g->root)
            rdzv_group_next_epoch(self, g, "nccl root of the previous rdzvd is gone");
    }
    zlistx_destroy(&names);
}

rdzv_core_t *rdzv_core_new(const rdzv_config_t *cfg, char *err, size_t errlen)
{
    rdzv_core_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    self->cfg = *cfg;
    rdzv_limits_t *l = &self->cfg.limits;
    if (l->max_groups <= 0)
        l->max_groups = RDZV_DEFAULT_MAX_GROUPS;
    if (l->max_kv_bytes == 0)
        l->max_kv_bytes = RDZV_DEFAULT_MAX_KV_BYTES;
    if (l->max_waits <= 0)
        l->max_waits = RDZV_DEFAULT_MAX_WAITS;
    if (l->max_rps == 0)
        l->max_rps = RDZV_DEFAULT_MAX_RPS;
    pthread_mutex_init(&self->lock, NULL);
    self->rate = rdzv_rate_new(l->max_rps);
    self->journal = rdzv_journal_open(cfg->state_dir, cfg->do_fsync, err, errlen);
    if (!self->journal || s_load(self, err, errlen) < 0) {
        rdzv_core_destroy(&self);
        return NULL;
    }
    s_retire_dead_roots(self);
    if (rdzv_core_wants_compaction(self))
        rdzv_core_compact(self);
    if (rdzv_core_commit(self) < 0) {
        snprintf(err, errlen, "cannot write the journal in %s", cfg->state_dir);
        rdzv_core_destroy(&self);
        return NULL;
    }
    return self;
}

static void s_drop_outbox(rdzv_core_t *self)
{
    for (int t = 0; t < RDZV_MAX_SHARDS; t++) {
        rdzv_outbox_t *o = &self->outboxes[t];
        for (size_t i = 0; i < o->len; i++)
            rdzv_reply_clear(&o->v[i]);
        o->len = 0;
    }
}

void rdzv_core_destroy(rdzv_core_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_core_t *self = *self_p;
    zhashx_destroy(&self->groups);
    rdzv_plans_destroy(&self->plans);
    rdzv_journal_destroy(&self->journal);
    rdzv_rate_destroy(&self->rate);
    s_drop_outbox(self);
    for (int t = 0; t < RDZV_MAX_SHARDS; t++)
        free(self->outboxes[t].v);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

/* The next free slot of the outbox of peer's shard, or NULL (out of memory). */
static rdzv_reply_t *s_slot(rdzv_core_t *self, const rdzv_peer_t *peer)
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

void rdzv_core_reply(rdzv_core_t *self, const rdzv_peer_t *peer, char *text)
{
    rdzv_reply_t *slot = text && !self->replaying ? s_slot(self, peer) : NULL;
    if (!slot) {
        free(text);
        return;
    }
    slot->text = text;
    slot->shared = NULL;
    rdzv_peer_copy(&slot->peer, peer);
}

void rdzv_core_reply_assignment(rdzv_core_t *self, const rdzv_peer_t *peer, rdzv_shared_t *shared,
                                int rank, int first_port, int ports)
{
    rdzv_reply_t *slot = shared && !self->replaying ? s_slot(self, peer) : NULL;
    if (!slot)
        return;
    rdzv_peer_copy(&slot->peer, peer);
    slot->text = NULL;
    slot->shared = rdzv_shared_ref(shared);
    slot->rank = rank;
    slot->first_port = first_port;
    slot->ports = ports;
}

void rdzv_core_error(rdzv_core_t *self, const rdzv_peer_t *peer, const char *code,
                     const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int code_index = rdzv_error_code_index(code);
    if (code_index >= 0)
        self->metrics.refusals[code_index]++;
    if (strcmp(code, RDZV_E_TIMEOUT) != 0)
        rdzv_core_log("refuse", "code=%s %s", code, msg);
    rdzv_core_reply(self, peer, rdzv_reply_error(peer->req, code, msg));
}

int rdzv_core_record(rdzv_core_t *self, cJSON *record)
{
    if (!record)
        return -1;               /* a builder ran out of memory */
    int rc = rdzv_journal_append(self->journal, record);
    if (rc == 0)
        rc = rdzv_core_apply(self, record);
    cJSON_Delete(record);
    return rc;
}

static void s_reload(rdzv_core_t *self)
{
    char err[256];
    zhashx_destroy(&self->groups);
    rdzv_plans_destroy(&self->plans);
    if (s_load(self, err, sizeof err) < 0) {
        rdzv_core_log("fatal", "cannot reload state after a journal failure: %s", err);
        exit(1);
    }
    /* Freeing the groups killed their NCCL root helpers; a completion the
     * file holds must not hand out their IDs again. */
    s_retire_dead_roots(self);
}

/* Writes what is queued. On a failed write (this one or an earlier one of
 * the batch) the batch's changes from that write on never reached the file
 * (a large release may have written its own before): every queued reply
 * becomes an error, and memory goes back to what the file holds. Clients
 * resend their joins. 0 or -1. */
static int s_write(rdzv_core_t *self)
{
    rdzv_journal_write(self->journal);
    int e = rdzv_journal_take_failure(self->journal);
    if (!e)
        return 0;
    rdzv_core_log("journal", "write failed (%s); refusing this batch and reloading state",
                  strerror(e));
    for (int t = 0; t < RDZV_MAX_SHARDS; t++) {
        rdzv_outbox_t *o = &self->outboxes[t];
        for (size_t i = 0; i < o->len; i++) {
            /* The same peer, another text. */
            free(o->v[i].text);
            rdzv_shared_unref(&o->v[i].shared);
            o->v[i].text = rdzv_reply_error(o->v[i].peer.req, RDZV_E_INTERNAL,
                                            "rdzvd could not record the change");
        }
    }
    s_reload(self);
    return -1;
}

int rdzv_core_commit_begin(rdzv_core_t *self, uint64_t *gate)
{
    rdzv_journal_t *j = self->journal;
    int rc = s_write(self);
    rdzv_journal_sync_start(j);
    if (rc == 0 && rdzv_core_wants_compaction(self)) {
        /* Rare: the snapshot replaces the file once what it holds is durable. */
        rdzv_journal_wait(j, rdzv_journal_written(j));
        rdzv_core_compact(self);
    }
    *gate = rdzv_journal_written(j);
    return rc;
}

void rdzv_core_commit_wait(rdzv_core_t *self, uint64_t gate)
{
    rdzv_journal_wait(self->journal, gate);
}

int rdzv_core_commit(rdzv_core_t *self)
{
    uint64_t gate;
    int rc = rdzv_core_commit_begin(self, &gate);
    rdzv_core_commit_wait(self, gate);
    return rc;
}

rdzv_reply_t *rdzv_core_take_shard_outbox(rdzv_core_t *self, int shard, size_t *count)
{
    assert(shard >= 0 && shard < RDZV_MAX_SHARDS);
    rdzv_outbox_t *o = &self->outboxes[shard];
    rdzv_reply_t *out = o->v;
    *count = o->len;
    *o = (rdzv_outbox_t) { 0 };
    return out;
}

rdzv_reply_t *rdzv_core_take_outbox_unrendered(rdzv_core_t *self, size_t *count)
{
    size_t total = 0;
    for (int t = 0; t < RDZV_MAX_SHARDS; t++)
        total += self->outboxes[t].len;
    rdzv_reply_t *out = total ? malloc(total * sizeof *out) : NULL;
    *count = 0;
    if (!out) {
        s_drop_outbox(self);
        return NULL;
    }
    for (int t = 0; t < RDZV_MAX_SHARDS; t++) {
        rdzv_outbox_t *o = &self->outboxes[t];
        if (o->len == 0)
            continue;                /* o->v may be NULL: no memcpy from it */
        memcpy(out + *count, o->v, o->len * sizeof *out);
        *count += o->len;
        o->len = 0;
    }
    return out;
}

rdzv_reply_t *rdzv_core_take_outbox(rdzv_core_t *self, size_t *count)
{
    rdzv_reply_t *out = rdzv_core_take_outbox_unrendered(self, count);
    for (size_t i = 0; i < *count; i++)
        rdzv_reply_render(&out[i]);
    return out;
}

/* Compares in constant time so the reply time does not reveal a prefix. */
static bool s_token_ok(const char *want, const cJSON *root)
{
    const cJSON *token = cJSON_GetObjectItemCaseSensitive(root, "token");
    if (!cJSON_IsString(token))
        return false;
    size_t n = strlen(want), m = strlen(token->valuestring);
    unsigned char diff = (unsigned char) (n != m);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char) (want[i] ^ token->valuestring[i < m ? i : 0]);
    return diff == 0;
}

void rdzv_core_parse(const rdzv_core_t *self, const char *frame, size_t len, rdzv_parsed_t *out)
{
    out->code = NULL;
    out->rc = rdzv_request_parse(frame, len, self->cfg.max_world, &out->req, &out->code,
                                 out->msg, sizeof out->msg);
}

void rdzv_core_handle_parsed(rdzv_core_t *self, const rdzv_peer_t *peer, rdzv_parsed_t *parsed,
                             int64_t now_ms)
{
    self->now_ms = now_ms;
    rdzv_request_t *req = &parsed->req;
    rdzv_peer_t from = *peer;
    /* Every reply echoes the id; a failed parse keeps it (0 if unreadable). */
    from.req = req->id;
    if (peer->shard >= 0 && peer->shard < RDZV_MAX_SHARDS)
        self->metrics.shard_requests[peer->shard]++;
    if (self->rate && !rdzv_rate_allow(self->rate, peer->shard, rdzv_peer_id(peer), peer->len,
                                       now_ms))
        rdzv_core_error(self, &from, RDZV_E_LIMIT, "over %d requests per second on this connection",
                        self->cfg.limits.max_rps);
    else if (parsed->rc < 0)
        rdzv_core_error(self, &from, parsed->code, "%s", parsed->msg);
    else if (self->cfg.group_token && !s_token_ok(self->cfg.group_token, req->root))
        rdzv_core_error(self, &from, RDZV_E_FORBIDDEN, "missing or wrong group token");
    else
        rdzv_handle_request(self, &from, req);
    if (parsed->rc >= 0)
        rdzv_request_clear(req);
    parsed->rc = -1;
}

void rdzv_core_handle(rdzv_core_t *self, const rdzv_peer_t *peer,
                      const char *frame, size_t len, int64_t now_ms)
{
    rdzv_parsed_t parsed;
    rdzv_core_parse(self, frame, len, &parsed);
    rdzv_core_handle_parsed(self, peer, &parsed, now_ms);
}

static void s_tick_group(rdzv_core_t *self, rdzv_group_t *g, int64_t now_ms)
{
    for (int r = 0; g->waiting > 0 && r < g->world; r++) {
        rdzv_member_t *m = g->members[r];
        if (m && m->waiting && m->deadline_ms <= now_ms) {
            m->waiting = false;
            g->waiting--;
            rdzv_core_error(self, &m->peer, RDZV_E_TIMEOUT,
                            "group %s: %d of %d ranks joined epoch %lld before the deadline",
                            g->name, g->joined, g->world, (long long) g->epoch);
        }
    }
    rdzv_kv_waiter_t *w = zlistx_first(g->kv_waiters);
    while (w) {
        void *handle = zlistx_cursor(g->kv_waiters);
        rdzv_kv_waiter_t *next = zlistx_next(g->kv_waiters);
        if (w->deadline_ms <= now_ms) {
            rdzv_core_error(self, &w->peer, RDZV_E_TIMEOUT, "key %s was not put in time", w->key);
            zlistx_delete(g->kv_waiters, handle);
        }
        w = next;
    }
    int report = g->root ? rdzv_ncclroot_poll(g->root) : -1;
    if (report == 1)
        rdzv_group_next_epoch(self, g, "nccl root timed out before every rank arrived");
    else if (report == 0)
        rdzv_ncclroot_destroy(&g->root);     /* every rank arrived; reap the helper */
}

int rdzv_core_pending(rdzv_core_t *self)
{
    size_t n = 0;
    for (rdzv_group_t *g = zhashx_first(self->groups); g; g = zhashx_next(self->groups))
        n += (size_t) g->waiting + zlistx_size(g->kv_waiters);
    return (int) n;
}

void rdzv_core_tick(rdzv_core_t *self, int64_t now_ms)
{
    self->now_ms = now_ms;
    self->pending_at_tick = rdzv_core_pending(self);
    self->added_since_tick = 0;
    if (self->rate && now_ms - self->last_prune_ms > 10000) {
        rdzv_rate_prune(self->rate, now_ms, 10000);
        self->last_prune_ms = now_ms;
    }
    for (rdzv_group_t *g = zhashx_first(self->groups); g; g = zhashx_next(self->groups))
        s_tick_group(self, g, now_ms);
}

void rdzv_core_lock(rdzv_core_t *self)
{
    pthread_mutex_lock(&self->lock);
}

bool rdzv_core_timedlock(rdzv_core_t *self, int ms)
{
    struct timespec deadline;
    rdzv_timespec_after(CLOCK_REALTIME, ms, &deadline);
    return pthread_mutex_timedlock(&self->lock, &deadline) == 0;
}

void rdzv_core_unlock(rdzv_core_t *self)
{
    pthread_mutex_unlock(&self->lock);
}

bool rdzv_core_journal_pending(rdzv_core_t *self)
{
    return rdzv_journal_pending(self->journal);
}

double rdzv_core_sync_busy_s(rdzv_core_t *self)
{
    return rdzv_journal_sync_busy_s(self->journal);
}

void rdzv_core_stats(rdzv_core_t *self, int64_t now_ms, rdzv_core_stats_t *out)
{
    out->metrics = self->metrics;
    out->groups = zhashx_size(self->groups);
    out->ranks_joined = out->ranks_live = 0;
    for (rdzv_group_t *g = zhashx_first(self->groups); g; g = zhashx_next(self->groups))
        for (int r = 0; r < g->world; r++) {
            const rdzv_member_t *m = g->members[r];
            if (!m)
                continue;
            out->ranks_joined += m->epoch == g->epoch;
            out->ranks_live += now_ms - m->last_seen_ms < self->cfg.dead_after_ms;
        }
    out->journal_bytes = rdzv_journal_size(self->journal);
    rdzv_journal_sync_latency(self->journal, &out->fsync);
}

cJSON *rdzv_core_status_json(rdzv_core_t *self, const char *group)
{
    cJSON *groups = cJSON_CreateArray();
    if (group) {
        rdzv_group_t *g = rdzv_core_group(self, group);
        if (g)
            cJSON_AddItemToArray(groups, rdzv_group_status(self, g));
    } else {
        for (rdzv_group_t *g = zhashx_first(self->groups); g; g = zhashx_next(self->groups))
            cJSON_AddItemToArray(groups, rdzv_group_status(self, g));
    }
    return groups;
}
