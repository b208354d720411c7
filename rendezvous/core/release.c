/* Completing an epoch: lay out plans, make the NCCL ID, answer every rank;
 * and moving a group on to its next epoch. */
#include "release.h"
#include "documents.h"
#include "log.h"
#include "records.h"
#include "rdzv_proto.h"
#include "trace.h"

#include <stdlib.h>
#include <string.h>

static void s_refuse_waiters(rdzv_batch_t *self, rdzv_group_t *g, const char *code,
                             const char *message)
{
    rdzv_member_t *m;
    for (int r = 0; g->waiting > 0 && (m = rdzv_group_next(g, &r)); r++) {
        if (m->waiting) {
            m->waiting = false;
            g->waiting--;
            rdzv_batch_error_to(self, &m->peer, g->name, r, code, "group %s: %s", g->name,
                                message);
        }
    }
}

typedef struct {
    int *ranks, *starts;
    int n;
} s_layout_t;

static void s_layout_undo(rdzv_batch_t *self, const rdzv_group_t *g, const s_layout_t *l)
{
    for (int i = 0; i < l->n; i++)
        rdzv_plans_forget(self->state->plans, rdzv_group_at(g, l->ranks[i])->node, g->name,
                          l->ranks[i]);
}

/* The new blocks as one "plans" record (apply.c applies it at replay). They
 * are in memory already: the next rank on a node must see the previous one's
 * block when it looks for a free one. Each block is on its rank's node as
 * of the record, which the rank's join record before it holds: escaping
 * 1024 node names again was a fifth of the release's instructions. */
static int s_layout_record(rdzv_batch_t *self, const rdzv_group_t *g, const s_layout_t *l)
{
    return rdzv_batch_record_applied(self, rdzv_record_plans(
        g->name, rdzv_plans_ports_per_rank(self->state->plans), l->ranks, l->starts, NULL, l->n));
}

/* A release walks every member in rank order, and the members, their
 * nodes' entries and those entries' blocks were written by the shard
 * threads that took the joins: on the device each was a cache miss in
 * turn, ~280 ns a rank. Fetching a few ranks ahead overlaps them. */
#define S_AHEAD 8
/* The member S_AHEAD ranks on: its first two cache lines (the peer's
 * fields and the identity's first bytes are in the second). */
static void s_prefetch_member(const rdzv_group_t *g, int r)
{
    const rdzv_member_t *ahead = r + S_AHEAD < g->world ? rdzv_group_slot(g, r + S_AHEAD) : NULL;
    if (ahead) {
        __builtin_prefetch(ahead, 1);
        __builtin_prefetch((const char *) ahead + 64, 1);
    }
}

static void s_prefetch_ahead(const rdzv_group_t *g, int r)
{
    s_prefetch_member(g, r);
    if (r + S_AHEAD / 2 < g->world && rdzv_group_at(g, r + S_AHEAD / 2))
        rdzv_plans_prefetch(rdzv_group_at(g, r + S_AHEAD / 2)->plan_node, false);
    if (r + S_AHEAD / 4 < g->world && rdzv_group_at(g, r + S_AHEAD / 4))
        rdzv_plans_prefetch(rdzv_group_at(g, r + S_AHEAD / 4)->plan_node, true);
}

/* Plans are laid out by rank, never by arrival, so they do not depend on
 * join order; a (group, rank, node) that had a block keeps it. starts[r]
 * gets rank r's first port. */
static int s_lay_out_plans(rdzv_batch_t *self, rdzv_group_t *g, int *starts)
{
    size_t w = (size_t) g->world;
    s_layout_t l = { .ranks = malloc(w * sizeof *l.ranks), .starts = malloc(w * sizeof *l.starts) };
    const char *code = l.ranks && l.starts ? NULL : RDZV_E_INTERNAL;
    for (int r = 0; !code && r < g->world; r++) {
        s_prefetch_ahead(g, r);
        const rdzv_member_t *m = rdzv_group_at(g, r);
        bool placed = false;
        starts[r] = rdzv_plans_place(self->state->plans, m->plan_node, g->name, r, &placed);
        if (starts[r] == -1) {
            rdzv_core_log("refuse", "code=ports_exhausted group=%s rank=%d node=%s",
                          g->name, r, m->node);
            code = RDZV_E_PORTS_EXHAUSTED;
        } else if (starts[r] < 0) {
            code = RDZV_E_INTERNAL;
        } else if (placed) {
            l.ranks[l.n] = r;
            l.starts[l.n++] = starts[r];
        }
    }
    if (!code && l.n > 0 && s_layout_record(self, g, &l) < 0)
        code = RDZV_E_INTERNAL;
    if (code) {
        s_layout_undo(self, g, &l);
        bool exhausted = strcmp(code, RDZV_E_PORTS_EXHAUSTED) == 0;
        s_refuse_waiters(self, g, code, exhausted ? "no free block of ports on a rank's node"
                                                  : "cannot record a port plan");
    }
    free(l.ranks);
    free(l.starts);
    return code ? -1 : 0;
}

void rdzv_release_check_overlaps(rdzv_batch_t *self, rdzv_group_t *g)
{
    g->overlaps_due = false;
    cJSON *overlaps = rdzv_status_overlaps(self->state, g);
    const cJSON *o = cJSON_GetArrayItem(overlaps, 0);
    if (o)
        rdzv_core_log("overlap", "group=%s rank=%d node=%s shares host %s with node=%s, whose "
                      "group=%s rank=%d holds some of the same ports; %d ranks so far: ranks "
                      "on one network namespace need one node name", g->name,
                      cJSON_GetObjectItem(o, "rank")->valueint,
                      cJSON_GetObjectItem(o, "node")->valuestring,
                      cJSON_GetObjectItem(o, "host")->valuestring,
                      cJSON_GetObjectItem(o, "other_node")->valuestring,
                      cJSON_GetObjectItem(o, "other_group")->valuestring,
                      cJSON_GetObjectItem(o, "other_rank")->valueint,
                      cJSON_GetArraySize(overlaps));
    cJSON_Delete(overlaps);
}

/* The epoch's IDs: made by the helper (server mode), brought by rank 0
 * (rank0 mode; 1 = wait, rank 0 resends them after a rdzvd restart), or none. */
static int s_make_nccl_ids(rdzv_batch_t *self, rdzv_group_t *g, cJSON **ids)
{
    char err[256];
    if (g->nccl_mode == RDZV_NCCL_NONE) {
        *ids = cJSON_CreateArray();
        return 0;
    }
    if (g->nccl_mode == RDZV_NCCL_RANK0) {
        if (!g->rank0_ids)
            return 1;
        *ids = cJSON_Duplicate(g->rank0_ids, 1);
        return 0;
    }
    *ids = cJSON_CreateArray();
    g->root = rdzv_ncclroot_start(self->cfg->nccl_helper, self->cfg->nccl_root_timeout_s,
                                  g->nccl_count, *ids, err, sizeof err);
    if (g->root)
        return 0;
    cJSON_Delete(*ids);
    *ids = NULL;
    rdzv_core_log("nccl", "group=%s cannot make an NCCL unique ID: %s", g->name, err);
    s_refuse_waiters(self, g, RDZV_E_INTERNAL, "cannot make an NCCL unique ID");
    return -1;
}

/* Queues rank's assignment by its parts; the shard that sends it formats
 * it (reply.c). Per rank only the rank and its ports differ. */
static void s_reply_assignment(rdzv_batch_t *self, rdzv_group_t *g, int rank,
                               const int *starts, const rdzv_local_t *local,
                               const rdzv_peer_t *peer, bool with_members)
{
    rdzv_reply_t parts = rdzv_assignment_parts(self->state, g, rank, starts[rank], starts[0],
                                               &local[rank], with_members);
    if (!parts.shared) {
        rdzv_batch_error(self, peer, RDZV_E_INTERNAL, "out of memory");
        return;
    }
    rdzv_batch_reply_assignment(self, peer, &parts);
}

void rdzv_release_group(rdzv_batch_t *self, rdzv_group_t *g)
{
    int64_t t_start = rdzv_trace_ns();
    cJSON *ids = NULL;
    int *starts = malloc((size_t) g->world * sizeof *starts);
    if (!starts) {
        s_refuse_waiters(self, g, RDZV_E_INTERNAL, "out of memory");
        return;
    }
    if (s_lay_out_plans(self, g, starts) < 0 || s_make_nccl_ids(self, g, &ids) != 0) {
        free(starts);
        return;
    }
    /* The next tick looks for overlaps: not on the path every rank waits on. */
    g->overlaps_due = self->state->shared_hosts > 0;
    int64_t t_laid = rdzv_trace_ns();
    if (rdzv_batch_record(self, rdzv_record_complete(g->name, g->epoch, ids)) < 0) {
        rdzv_ncclroot_destroy(&g->root);
        s_refuse_waiters(self, g, RDZV_E_INTERNAL, "cannot record the assignment");
        free(starts);
        return;
    }
    int64_t t_recorded = rdzv_trace_ns();
    rdzv_core_log("assign", "group=%s epoch=%lld world=%d master=%s",
                  g->name, (long long) g->epoch, g->world, rdzv_group_at(g, 0)->host);
    /* The replies wait for the core (rdzv_release_answer), which may start
     * the journal on the records first. */
    self->releasing = (rdzv_release_t) { .group = g, .starts = starts, .t_start = t_start,
                                         .t_laid = t_laid, .t_recorded = t_recorded };
}

void rdzv_release_answer(rdzv_batch_t *self)
{
    rdzv_group_t *g = self->releasing.group;
    int *starts = self->releasing.starts;
    if (!g)
        return;
    rdzv_local_t *local = rdzv_group_local_ranks(g);
    for (int r = 0; r < g->world; r++) {
        s_prefetch_member(g, r);
        rdzv_member_t *m = rdzv_group_at(g, r);
        if (!m->waiting)
            continue;
        m->waiting = false;
        if (!local) {
            rdzv_batch_error_to(self, &m->peer, g->name, r, RDZV_E_INTERNAL, "out of memory");
            continue;
        }
        s_reply_assignment(self, g, r, starts, local, &m->peer, m->want_members);
        self->metrics->assignments++;
        rdzv_histogram_observe(&self->metrics->join_latency,
                               (double) (self->now_ms - m->joined_at_ms) / 1000.0);
    }
    g->waiting = 0;
    self->released += g->world;
    free(starts);
    free(local);
    if (g->world >= RDZV_TRACE_MIN) {
        RDZV_TRACE("release_start", -1, self->releasing.t_start, g->world);
        RDZV_TRACE("laid_out", -1, self->releasing.t_laid, g->world);
        RDZV_TRACE("recorded", -1, self->releasing.t_recorded, g->world);
        RDZV_TRACE("replies_queued", -1, rdzv_trace_ns(), g->world);
    }
    self->releasing = (rdzv_release_t) { 0 };
}

int rdzv_release_next_epoch(rdzv_batch_t *self, rdzv_group_t *g, const char *why)
{
    for (rdzv_kv_waiter_t *w = zlistx_first(g->kv_waiters); w; w = zlistx_next(g->kv_waiters))
        rdzv_batch_error_to(self, &w->peer, g->name, -1, RDZV_E_STALE_EPOCH,
                            "group %s moved past epoch %lld", g->name, (long long) g->epoch);
    zlistx_purge(g->kv_waiters);
    if (rdzv_batch_record(self, rdzv_record_epoch(g->name, g->epoch + 1)) < 0)
        return -1;
    self->metrics->epoch_changes++;
    rdzv_core_log("epoch", "group=%s epoch=%lld reason=\"%s\"", g->name,
                  (long long) g->epoch, why);
    return 0;
}
