/* The core: its lock, its journal and the batch sequence of core.h. What a
 * request does is in handlers.c and release.c, what the state is in
 * state.c and apply.c; only this file writes and syncs the journal. */
#include "core_state.h"
#include "compact.h"
#include "documents.h"
#include "handlers.h"
#include "log.h"
#include "records.h"
#include "release.h"
#include "rdzv_proto.h"
#include "rdzv_util.h"

#include <assert.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A release of at least this many ranks is written and starts its sync
 * before its replies are queued (s_answer_release); a smaller release ends
 * its batch at once (rdzv_core_defer). */
#define S_URGENT_RANKS 64
/* So is one whose replies hold this much text (kv values, mostly). */
#define S_URGENT_REPLY_BYTES (8 << 20)

static int s_load(rdzv_core_t *self, char *err, size_t errlen)
{
    if (rdzv_state_init(&self->state, &self->cfg) < 0) {
        snprintf(err, errlen, "bad port range");
        return -1;
    }
    size_t torn = 0;
    long n = rdzv_journal_replay(self->journal, rdzv_state_apply, &self->state, self->cfg.repair,
                                 &torn, err, errlen);
    if (n < 0)
        return -1;
    if (torn && rdzv_journal_repaired_at(self->journal) >= 0)
        rdzv_core_log("journal", "repair: cut %zu bytes from the corruption at offset %ld on",
                      torn, rdzv_journal_repaired_at(self->journal));
    else if (torn)
        rdzv_core_log("journal", "cut a torn last record of %zu bytes", torn);
    rdzv_core_log("journal", "replayed %ld records, %zu groups",
                  n, zhashx_size(self->state.groups));
    return 0;
}

/* A server-made ID whose root died with an earlier rdzvd before every rank
 * reached it must never be handed out again. Nothing is recorded here: the
 * group keeps its epoch, assignments and KV, and the next rank that asks for
 * the IDs moves it on (handlers.c). Roots every rank reached are no loss. */
static void s_mark_lost_roots(rdzv_core_t *self)
{
    zhashx_t *groups = self->state.groups;
    for (rdzv_group_t *g = zhashx_first(groups); g; g = zhashx_next(groups))
        g->root_lost = g->nccl_mode == RDZV_NCCL_SERVER && g->complete && !g->root
                       && g->root_done_epoch != g->epoch;
}

static void s_compact_finish(rdzv_core_t *self, bool wait);

static void s_set_limits(rdzv_limits_t *l)
{
    if (l->max_groups <= 0)
        l->max_groups = RDZV_DEFAULT_MAX_GROUPS;
    if (l->max_ranks <= 0)
        l->max_ranks = RDZV_DEFAULT_MAX_RANKS;
    if (l->max_kv_bytes == 0)
        l->max_kv_bytes = RDZV_DEFAULT_MAX_KV_BYTES;
    if (l->max_kv_total_bytes == 0)
        l->max_kv_total_bytes = RDZV_DEFAULT_MAX_KV_TOTAL_BYTES;
    if (l->max_member_bytes == 0)
        l->max_member_bytes = RDZV_DEFAULT_MAX_MEMBER_BYTES;
    if (l->max_waits <= 0)
        l->max_waits = RDZV_DEFAULT_MAX_WAITS;
    if (l->max_rps == 0)
        l->max_rps = RDZV_DEFAULT_MAX_RPS;
}

rdzv_core_t *rdzv_core_new(const rdzv_config_t *cfg, char *err, size_t errlen)
{
    rdzv_core_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    self->cfg = *cfg;
    s_set_limits(&self->cfg.limits);
    pthread_mutex_init(&self->lock, NULL);
    self->rate = rdzv_rate_new(self->cfg.limits.max_rps);
    if (cfg->tokens_dir && !(self->tokens = rdzv_tokens_new(cfg->tokens_dir, err, errlen))) {
        rdzv_core_destroy(&self);
        return NULL;
    }
    self->journal = rdzv_journal_open_at(cfg->journal_remote, cfg->state_dir, cfg->do_fsync,
                                         err, errlen);
    if (!self->journal || s_load(self, err, errlen) < 0) {
        rdzv_core_destroy(&self);
        return NULL;
    }
    self->batch = (rdzv_batch_t) { .state = &self->state, .cfg = &self->cfg,
                                   .journal = self->journal, .metrics = &self->metrics,
                                   .tokens = self->tokens };
    s_mark_lost_roots(self);
    rdzv_commit_t commit;
    rdzv_core_begin(self, 0);
    int rc = rdzv_core_end(self, &commit);
    char why[256] = "";
    if (rc == 0 && rdzv_journal_wait(self->journal, commit.gate, why, sizeof why) < 0)
        rc = -1;
    for (int t = 0; t < RDZV_MAX_SHARDS; t++)
        free(commit.out[t].v);        /* nobody to answer yet: empty */
    if (rc < 0) {
        snprintf(err, errlen, "cannot write the journal in %s%s%s",
                 cfg->journal_remote ? rdzv_journal_remote_name(cfg->journal_remote)
                                     : cfg->state_dir, *why ? ": " : "", why);
        rdzv_core_destroy(&self);
        return NULL;
    }
    return self;
}

void rdzv_core_destroy(rdzv_core_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_core_t *self = *self_p;
    if (self->compaction && self->journal)
        s_compact_finish(self, true);
    rdzv_state_clear(&self->state);
    rdzv_journal_destroy(&self->journal);
    rdzv_rate_destroy(&self->rate);
    rdzv_tokens_destroy(&self->tokens);
    rdzv_batch_clear(&self->batch);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

/* The request's token, NULL if it carries none. */
static const char *s_token(const cJSON *root)
{
    const cJSON *token = cJSON_GetObjectItemCaseSensitive(root, "token");
    return cJSON_IsString(token) ? token->valuestring : NULL;
}

void rdzv_core_parse(const rdzv_core_t *self, const char *frame, size_t len, rdzv_parsed_t *out)
{
    out->code = NULL;
    out->rc = rdzv_request_parse(frame, len, self->cfg.max_world, &out->req, &out->code,
                                 out->msg, sizeof out->msg);
}

void rdzv_core_begin(rdzv_core_t *self, int64_t now_ms)
{
    pthread_mutex_lock(&self->lock);
    assert(!self->in_batch);
    self->in_batch = true;
    self->batch.now_ms = now_ms;
    if (now_ms > 0 && !self->state.loaded_ms)
        self->state.loaded_ms = now_ms;
}

/* A group the request released: every one of its ranks waits for this
 * batch's sync, so for a large one the disk starts on its records now,
 * while its replies are queued and handed out; none leaves before they are
 * durable (shard.c). Small groups queue faster than the sync thread wakes:
 * their records wait for the batch's end. A failed write here is the end's
 * to report: every write fails until the state is reloaded (journal.h). */
static void s_answer_release(rdzv_core_t *self)
{
    rdzv_group_t *g = self->batch.releasing.group;
    if (!g)
        return;
    char err[256];
    if (g->world >= S_URGENT_RANKS && rdzv_journal_write(self->journal, err, sizeof err) == 0)
        rdzv_journal_sync_start(self->journal);
    rdzv_release_answer(&self->batch);
}

/* A standby's answer to every request: who leads, so that the client goes
 * there (docs/protocol.md). */
static void s_not_leader(rdzv_core_t *self, const rdzv_peer_t *from)
{
    char leader[512];
    rdzv_journal_leader(self->journal, leader, sizeof leader);
    cJSON *detail = cJSON_CreateObject();
    if (detail && *leader)
        cJSON_AddStringToObject(detail, "leader", leader);
    rdzv_batch_reply(&self->batch, from, rdzv_reply_error_detail(from->req, RDZV_E_NOT_LEADER,
                     *leader ? "this rdzvd stands by; ask the leader"
                             : "this rdzvd stands by and no leader is elected yet", detail));
    self->metrics.refusals[rdzv_error_code_index(RDZV_E_NOT_LEADER)]++;
}

void rdzv_core_handle(rdzv_core_t *self, const rdzv_peer_t *peer, rdzv_parsed_t *parsed)
{
    assert(self->in_batch);
    rdzv_batch_t *b = &self->batch;
    rdzv_request_t *req = &parsed->req;
    rdzv_peer_t from = *peer;
    /* Every reply echoes the id; a failed parse keeps it (0 if unreadable). */
    from.req = req->id;
    assert(peer->shard >= 0 && peer->shard < RDZV_MAX_SHARDS);
    self->metrics.shard_requests[peer->shard]++;
    b->asked = parsed->rc >= 0 ? req : NULL;
    b->asker = &from;
    if (!rdzv_journal_leading(self->journal))
        s_not_leader(self, &from);
    else if (self->rate && !rdzv_rate_allow(self->rate, peer->shard, rdzv_peer_id(peer), peer->len,
                                       b->now_ms))
        rdzv_batch_error(b, &from, RDZV_E_LIMIT, "over %d requests per second on this connection",
                         self->cfg.limits.max_rps);
    else if (parsed->rc < 0)
        rdzv_batch_error(b, &from, parsed->code, "%s", parsed->msg);
    else if (self->cfg.group_token
             && !(s_token(req->root) && rdzv_secret_equal(self->cfg.group_token, s_token(req->root))))
        rdzv_batch_error(b, &from, RDZV_E_FORBIDDEN, "missing or wrong group token");
    /* Per group: a status of every group is answered with the groups this
     * token opens (handlers.c); every other request names its group. */
    else if (self->tokens && req->group
             && !rdzv_tokens_allow(self->tokens, req->group, s_token(req->root)))
        rdzv_batch_error(b, &from, RDZV_E_FORBIDDEN, "missing or wrong token for group %s",
                         req->group);
    else
        rdzv_handle_request(b, &from, req);
    b->asked = NULL;
    b->asker = NULL;
    s_answer_release(self);
    if (parsed->rc >= 0)
        rdzv_request_clear(req);
    parsed->rc = -1;
}

void rdzv_core_error(rdzv_core_t *self, const rdzv_peer_t *peer, const char *code,
                     const char *fmt, ...)
{
    assert(self->in_batch);
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rdzv_batch_error(&self->batch, peer, code, "%s", msg);
}

static void s_tick_group(rdzv_batch_t *b, rdzv_group_t *g)
{
    int64_t now_ms = b->now_ms;
    rdzv_member_t *m;
    for (int r = 0; g->waiting > 0 && (m = rdzv_group_next(g, &r)); r++) {
        if (m->waiting && m->deadline_ms <= now_ms) {
            m->waiting = false;
            g->waiting--;
            rdzv_batch_reply(b, &m->peer, rdzv_group_timeout_reply(g, m->peer.req));
            b->metrics->refusals[rdzv_error_code_index(RDZV_E_TIMEOUT)]++;
        }
    }
    rdzv_kv_waiter_t *w = zlistx_first(g->kv_waiters);
    while (w) {
        void *handle = zlistx_cursor(g->kv_waiters);
        rdzv_kv_waiter_t *next = zlistx_next(g->kv_waiters);
        if (w->deadline_ms <= now_ms) {
            rdzv_batch_error_to(b, &w->peer, g->name, -1, RDZV_E_TIMEOUT,
                                "key %s was not put in time", w->key);
            zlistx_delete(g->kv_waiters, handle);
        }
        w = next;
    }
    int report = g->root ? rdzv_ncclroot_poll(g->root) : -1;
    if (report == 0 || report == 1) {
        /* Every rank arrived: reap the helper, and record that a restart
         * loses nothing of this epoch. Or they did not within
         * --nccl-root-timeout: an engine that makes its own IDs (vLLM)
         * never comes, and moving a healthy group to a new epoch under it
         * would be worse than an ID nobody used. The root is retired, the
         * epoch stands, and status says so. */
        rdzv_ncclroot_destroy(&g->root);
        g->root_retired = report == 1;
        if (report == 1)
            rdzv_core_log("nccl", "group=%s epoch=%lld: its nccl root was retired after "
                          "--nccl-root-timeout without every rank reaching it; the epoch "
                          "stands and its server-made ID no longer works", g->name,
                          (long long) g->epoch);
        rdzv_batch_record(b, rdzv_record_root_done(g->name, g->epoch, g->root_retired));
    }
    if (g->overlaps_due)
        rdzv_release_check_overlaps(b, g);
}

/* Whether g is a group abandoned while forming its first epoch: nobody
 * waits in it and nobody was heard from in it for --forming-ttl. A group
 * loaded from the journal counts from the first tick after the load. */
static bool s_abandoned(const rdzv_core_t *self, rdzv_group_t *g, int64_t now_ms)
{
    if (!self->cfg.forming_ttl_ms || g->complete || g->epoch > 1 || g->waiting
        || zlistx_size(g->kv_waiters))
        return false;
    if (!g->heard_ms)
        g->heard_ms = now_ms;
    return now_ms - g->heard_ms > self->cfg.forming_ttl_ms;
}

/* Deletes the abandoned groups, recorded, so that a replay agrees: a world
 * of 65536 announced by one rank must not be held for ever. */
static void s_expire(rdzv_core_t *self)
{
    zlistx_t *names = NULL;
    zhashx_t *groups = self->state.groups;
    for (rdzv_group_t *g = zhashx_first(groups); g; g = zhashx_next(groups))
        if (s_abandoned(self, g, self->batch.now_ms)) {
            if (!names && !(names = zlistx_new()))
                return;
            zlistx_add_end(names, g->name);
        }
    /* The names belong to the groups: delete after the walk. */
    for (char *name = names ? zlistx_first(names) : NULL; name; name = zlistx_next(names)) {
        char *copy = strdup(name);
        if (copy && rdzv_batch_record(&self->batch, rdzv_record_delete(copy)) == 0) {
            self->metrics.groups_expired++;
            rdzv_core_log("expire", "group=%s reason=\"its first epoch did not form within "
                          "--forming-ttl, and nobody waits in it\"", copy);
        }
        free(copy);
    }
    zlistx_destroy(&names);
}

void rdzv_core_tick(rdzv_core_t *self)
{
    assert(self->in_batch);
    /* A standby records nothing: expiry and NCCL roots are the leader's. */
    if (!rdzv_journal_leading(self->journal))
        return;
    rdzv_batch_t *b = &self->batch;
    b->pending_at_tick = rdzv_state_pending(&self->state);
    b->added_since_tick = 0;
    if (self->rate && b->now_ms - self->last_prune_ms > 10000) {
        rdzv_rate_prune(self->rate, b->now_ms, 10000);
        self->last_prune_ms = b->now_ms;
    }
    uint64_t appended = b->appended;
    zhashx_t *groups = self->state.groups;
    for (rdzv_group_t *g = zhashx_first(groups); g; g = zhashx_next(groups))
        s_tick_group(b, g);
    s_expire(self);
    if (b->appended != appended)
        b->sync_anyway = true;
}

rdzv_core_queued_t rdzv_core_defer(rdzv_core_t *self)
{
    assert(self->in_batch);
    rdzv_core_queued_t q = RDZV_CORE_IDLE;
    /* A release's ranks all wait on its commit: holding it open for
     * batch-mates would only add the commit window to every formation. */
    if (rdzv_journal_pending(self->journal))
        q = self->batch.released ? RDZV_CORE_URGENT : RDZV_CORE_QUEUED;
    /* Replies are made before any is sent: a batch of large values ends
     * early rather than holding thousands of them at once. */
    if (self->batch.reply_bytes >= S_URGENT_REPLY_BYTES)
        q = RDZV_CORE_URGENT;
    self->in_batch = false;
    pthread_mutex_unlock(&self->lock);
    return q;
}

static void s_reload(rdzv_core_t *self)
{
    char err[256];
    rdzv_state_clear(&self->state);
    self->state.loaded_ms = 0;
    if (s_load(self, err, sizeof err) < 0) {
        rdzv_core_log("fatal", "cannot reload state after a journal failure: %s", err);
        exit(1);
    }
    /* Freeing the groups killed their NCCL root helpers; a completion the
     * file holds must not hand out their IDs again. */
    s_mark_lost_roots(self);
}

/* Writes what is queued. On a failed write the batch's changes never
 * reached the file: every queued reply becomes an error, and memory goes
 * back to what the file holds. Clients resend their joins. 0 or -1. */
static int s_write(rdzv_core_t *self)
{
    char err[256];
    if (rdzv_journal_write(self->journal, err, sizeof err) == 0)
        return 0;
    rdzv_core_log("journal", "write failed (%s); refusing this batch and reloading state", err);
    rdzv_batch_refuse_all(&self->batch, "rdzvd could not record the change");
    /* The snapshot in flight was of the state being thrown away. */
    rdzv_journal_compact_abort(self->journal, &self->compaction);
    s_reload(self);
    return -1;
}

/* Whether the journal file has grown enough to be compacted: past
 * --compact-mib, and to twice what the last compaction left (a state
 * larger than the limit would otherwise be rewritten at every commit). The
 * file's own size: journal offsets only grow across compactions. */
static bool s_wants_compaction(const rdzv_core_t *self)
{
    uint64_t size = rdzv_journal_size(self->journal);
    return self->cfg.compact_bytes && size > self->cfg.compact_bytes
           && size > 2 * self->compacted_size;
}

/* Starts a compaction: the records of this moment's state, written by the
 * journal's thread while requests go on. */
static void s_compact_start(rdzv_core_t *self)
{
    int64_t t0 = rdzv_now_ms();
    rdzv_snapshot_t *snap = &self->snapshot;
    bool made = rdzv_compact_snapshot(&self->state, snap) == 0;
    int n = made ? cJSON_GetArraySize(snap->records) : 0;
    /* Out of memory: the old journal stays, whole. */
    self->compaction = made ? rdzv_journal_compact_start(self->journal, snap->records,
                                                         rdzv_snapshot_release, snap) : NULL;
    self->compaction_from = rdzv_journal_size(self->journal);
    rdzv_core_log("journal", "compaction %s: %d records of the state taken in %lld ms",
                  self->compaction ? "started" : "FAILED to start (kept the old journal)", n,
                  (long long) (rdzv_now_ms() - t0));
}

/* Puts a finished compaction in place; wait: until it has finished. */
static void s_compact_finish(rdzv_core_t *self, bool wait)
{
    int64_t t0 = rdzv_now_ms();
    int rc = rdzv_journal_compact_finish(self->journal, &self->compaction, wait);
    if (rc == 0)
        return;
    rdzv_core_log("journal", "compaction %s: %llu bytes -> %llu bytes, put in place in %lld ms",
                  rc == 1 ? "done" : "FAILED (kept the old journal)",
                  (unsigned long long) self->compaction_from,
                  (unsigned long long) rdzv_journal_size(self->journal),
                  (long long) (rdzv_now_ms() - t0));
    if (rc == 1) {
        self->compacted_size = rdzv_journal_size(self->journal);
        self->metrics.compactions++;
    }
}

int rdzv_core_compact(rdzv_core_t *self)
{
    if (self->compaction)
        s_compact_finish(self, true);
    uint64_t done = self->metrics.compactions;
    s_compact_start(self);
    if (self->compaction)
        s_compact_finish(self, true);
    return self->metrics.compactions > done ? 0 : -1;
}

/* Whether anything waits on this batch's records being durable: a reply
 * (every reply leaves only once all written before it is durable: shard.c),
 * or the tick's own records. A waiting join is answered only by its group's
 * release, whose sync covers every record before it; so a batch of joins
 * that answers nobody is written, not synced, and a formation whose ranks
 * are all present costs one sync, not one per join. A crash loses nothing
 * acknowledged: the unsynced joins were never answered, and their clients
 * send them again (docs/reliability.md). */
static bool s_answers(rdzv_batch_t *b)
{
    bool answers = b->sync_anyway;
    b->sync_anyway = false;
    for (int t = 0; t < RDZV_MAX_SHARDS && !answers; t++)
        answers = b->outboxes[t].len > 0;
    return answers;
}

int rdzv_core_end(rdzv_core_t *self, rdzv_commit_t *commit)
{
    assert(self->in_batch);
    rdzv_journal_t *j = self->journal;
    commit->had_records = rdzv_journal_pending(j);
    int rc = s_write(self);
    if (s_answers(&self->batch))
        rdzv_journal_sync_start(j);
    /* Rare: a snapshot of the state replaces the file. Its thread writes
     * it while requests go on; a later end puts it in place. */
    if (rc == 0 && self->compaction)
        s_compact_finish(self, false);
    else if (rc == 0 && s_wants_compaction(self))
        s_compact_start(self);
    commit->gate = rdzv_journal_written(j);
    for (int t = 0; t < RDZV_MAX_SHARDS; t++)
        rdzv_batch_take(&self->batch, t, &commit->out[t]);
    self->batch.released = 0;
    self->batch.reply_bytes = 0;
    self->in_batch = false;
    pthread_mutex_unlock(&self->lock);
    return rc;
}

int rdzv_core_wait(rdzv_core_t *self, uint64_t gate)
{
    char err[256];
    return rdzv_journal_wait(self->journal, gate, err, sizeof err) == 0 ? 0 : -1;
}

void rdzv_core_wait_or_refuse(rdzv_core_t *self, uint64_t gate, rdzv_reply_t *v, size_t n)
{
    char err[256];
    if (rdzv_journal_wait(self->journal, gate, err, sizeof err) == 0)
        return;
    for (size_t i = 0; i < n; i++)
        rdzv_reply_refuse(&v[i], RDZV_E_UNAVAILABLE, err);
}

/* The leader's records, on a standby; under the lock like any change. */
static void s_follow(void *arg, rdzv_journal_event_t event, const cJSON *records)
{
    rdzv_core_t *self = arg;
    pthread_mutex_lock(&self->lock);
    const cJSON *record;
    switch (event) {
    case RDZV_JOURNAL_RECORDS:
        cJSON_ArrayForEach(record, records) {
            if (rdzv_state_apply(&self->state, record) < 0) {
                rdzv_core_log("journal", "a record of the leader does not apply here; "
                              "replaying");
                s_reload(self);
                break;
            }
        }
        break;
    case RDZV_JOURNAL_RELOAD:
        s_reload(self);
        break;
    case RDZV_JOURNAL_PROMOTED:
        /* The last leader's NCCL roots died with it; forming groups count
         * their --forming-ttl from now. */
        s_mark_lost_roots(self);
        self->state.loaded_ms = 0;
        for (rdzv_group_t *g = zhashx_first(self->state.groups); g;
             g = zhashx_next(self->state.groups))
            g->heard_ms = 0;
        break;
    }
    pthread_mutex_unlock(&self->lock);
}

int rdzv_core_campaign(rdzv_core_t *self, const char *advertise, char *err, size_t errlen)
{
    return rdzv_journal_campaign(self->journal, advertise, s_follow, self, err, errlen);
}

bool rdzv_core_leading(rdzv_core_t *self)
{
    return rdzv_journal_leading(self->journal);
}

const char *const rdzv_drop_reason_names[RDZV_DROP_REASONS] = {
    [RDZV_DROP_SLOW_READER] = "slow_reader", [RDZV_DROP_GONE] = "gone",
    [RDZV_DROP_BUSY] = "busy",
};

void rdzv_core_count_dropped(rdzv_core_t *self, rdzv_drop_reason_t why, unsigned n)
{
    assert(why < RDZV_DROP_REASONS);
    atomic_fetch_add(&self->replies_dropped[why], n);
}

const char *const rdzv_peer_drop_names[RDZV_PEER_DROP_REASONS] = {
    [RDZV_PEER_DROP_SLOW_READER] = "slow_reader",
    [RDZV_PEER_DROP_CONNECTION_CAP] = "connection_cap",
};

void rdzv_core_count_peer_dropped(rdzv_core_t *self, rdzv_peer_drop_t why)
{
    assert(why < RDZV_PEER_DROP_REASONS);
    atomic_fetch_add(&self->peers_dropped[why], 1);
}

long rdzv_core_connections_add(rdzv_core_t *self, long delta)
{
    return atomic_fetch_add(&self->connections, delta) + delta;
}

void rdzv_core_set_connection_cap(rdzv_core_t *self, long cap)
{
    atomic_store(&self->connection_cap, cap);
}

void rdzv_core_set_fds_short(rdzv_core_t *self, bool shortage, long limit)
{
    atomic_store(&self->fds_short, shortage);
    atomic_store(&self->fds_limit, limit);
}

static int s_by_name(const void *a, const void *b)
{
    return strcmp((*(rdzv_group_t *const *) a)->name, (*(rdzv_group_t *const *) b)->name);
}

/* The first RDZV_METRICS_GROUPS groups by name (a stable set from scrape
 * to scrape), under the lock. */
static void s_group_stats(const rdzv_state_t *st, zhashx_t *groups, int64_t now_ms,
                          rdzv_core_stats_t *out)
{
    size_t n = zhashx_size(groups), i = 0;
    out->ngroup = 0;
    out->groups_omitted = 0;
    rdzv_group_t **v = n ? malloc(n * sizeof *v) : NULL;
    if (!v) {
        out->groups_omitted = n;
        return;
    }
    for (rdzv_group_t *g = zhashx_first(groups); g && i < n; g = zhashx_next(groups))
        v[i++] = g;
    qsort(v, i, sizeof *v, s_by_name);
    for (size_t k = 0; k < i && k < RDZV_METRICS_GROUPS; k++) {
        rdzv_group_stat_t *s = &out->group[out->ngroup++];
        snprintf(s->name, sizeof s->name, "%s", v[k]->name);
        s->world = v[k]->world;
        s->joined = v[k]->joined;
        s->epoch = v[k]->epoch;
        s->complete = v[k]->complete;
        rdzv_serving_t serving = rdzv_state_serving(st, v[k], now_ms);
        s->live = serving.live;
        s->serving = serving.serving;
        s->routed = v[k]->router != NULL;
        s->registered = 0;
        const rdzv_member_t *m;
        for (int r = 0; s->routed && (m = rdzv_group_next(v[k], &r)); r++)
            s->registered += m->registered;
        memcpy(s->router_errors, v[k]->router_errors, sizeof s->router_errors);
    }
    out->groups_omitted = i - out->ngroup;
    free(v);
}

void rdzv_core_stats(rdzv_core_t *self, int64_t now_ms, rdzv_core_stats_t *out)
{
    pthread_mutex_lock(&self->lock);
    out->metrics = self->metrics;
    zhashx_t *groups = self->state.groups;
    out->groups = zhashx_size(groups);
    out->ranks_joined = out->ranks_live = 0;
    const rdzv_member_t *m;
    for (rdzv_group_t *g = zhashx_first(groups); g; g = zhashx_next(groups))
        for (int r = 0; (m = rdzv_group_next(g, &r)); r++) {
            out->ranks_joined += m->epoch == g->epoch;
            out->ranks_live += now_ms - rdzv_member_seen(&self->state, m) < self->cfg.dead_after_ms;
        }
    s_group_stats(&self->state, groups, now_ms, out);
    rdzv_journal_stats(self->journal, &out->journal);
    pthread_mutex_unlock(&self->lock);
    for (int i = 0; i < RDZV_DROP_REASONS; i++)
        out->replies_dropped[i] = atomic_load(&self->replies_dropped[i]);
    out->fds_short = atomic_load(&self->fds_short);
    out->fds_limit = (unsigned long long) atomic_load(&self->fds_limit);
    long live = atomic_load(&self->connections);
    out->connections = live > 0 ? (unsigned long long) live : 0;
    out->connection_cap = (unsigned long long) atomic_load(&self->connection_cap);
    for (int i = 0; i < RDZV_PEER_DROP_REASONS; i++)
        out->peers_dropped[i] = atomic_load(&self->peers_dropped[i]);
}

cJSON *rdzv_core_status_json(rdzv_core_t *self, const char *group, int64_t now_ms)
{
    pthread_mutex_lock(&self->lock);
    cJSON *groups = rdzv_state_status(&self->state, group, now_ms);
    pthread_mutex_unlock(&self->lock);
    return groups;
}

bool rdzv_core_responsive(rdzv_core_t *self, int ms)
{
    struct timespec deadline;
    rdzv_timespec_after(CLOCK_REALTIME, ms, &deadline);
    if (pthread_mutex_timedlock(&self->lock, &deadline) != 0)
        return false;
    pthread_mutex_unlock(&self->lock);
    return true;
}

double rdzv_core_sync_busy_s(rdzv_core_t *self)
{
    return rdzv_journal_sync_busy_s(self->journal);
}
