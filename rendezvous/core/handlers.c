/* One handler per protocol operation (docs/protocol.md). A handler checks
 * everything first and records a change only when the request is valid, so
 * a refused request leaves the state as it was. */
#include "handlers.h"
#include "documents.h"
#include "log.h"
#include "reclaim.h"
#include "records.h"
#include "release.h"
#include "rdzv_proto.h"

#include <stdlib.h>
#include <string.h>

static void s_set_waiter(rdzv_batch_t *self, rdzv_group_t *g, rdzv_member_t *m,
                         const rdzv_peer_t *peer, const rdzv_request_t *req)
{
    /* A copy of the waiting request itself (same connection, same id: the
     * client resends until answered) keeps the deadline; moved with every
     * copy, the deadline would pass only after the client gave up, and the
     * timeout reply that says who is missing would never be read. */
    bool resend = m->waiting && m->peer.req == peer->req && m->peer.len == peer->len
                  && memcmp(rdzv_peer_id(&m->peer), rdzv_peer_id(peer), peer->len) == 0;
    if (!m->waiting)
        g->waiting++;
    m->waiting = true;
    rdzv_peer_clear(&m->peer);
    rdzv_peer_copy(&m->peer, peer);
    if (!resend)
        m->deadline_ms = self->now_ms + req->timeout_ms;
    m->want_members = req->members;
}

static int s_record_join(rdzv_batch_t *self, rdzv_group_t *g, const rdzv_request_t *req)
{
    cJSON *rec = rdzv_record_join(g->name, req->rank, req->host, req->node, req->session,
                                  g->epoch);
    self->metrics->joins++;
    rdzv_core_log("join", "group=%s rank=%d world=%d epoch=%lld host=%s node=%s",
                  g->name, req->rank, g->world, (long long) g->epoch, req->host, req->node);
    return rdzv_batch_record(self, rec);
}

/* A join naming a router the group does not have yet records it, unless
 * it resumes a session the rank already had: the router of the latest new
 * process is the group's (a rolling update that moves the ranks to another
 * router moves the group with its first new rank), and an old agent that
 * rejoins after stale_epoch does not move it back. */
static int s_record_router(rdzv_batch_t *self, rdzv_group_t *g, const rdzv_request_t *req,
                           bool resumed)
{
    if (!req->router || resumed || (g->router && strcmp(g->router, req->router) == 0))
        return 0;
    rdzv_core_log("router", "group=%s router=%s (was %s)", g->name, req->router,
                  g->router ? g->router : "none");
    return rdzv_batch_record(self, rdzv_record_router(g->name, req->router));
}

static rdzv_nccl_mode_t s_requested_mode(rdzv_batch_t *self, const rdzv_request_t *req)
{
    rdzv_nccl_mode_t mode = self->cfg->nccl_default ? RDZV_NCCL_SERVER : RDZV_NCCL_NONE;
    if (req->nccl_id)
        rdzv_nccl_mode_parse(req->nccl_id, &mode);
    /* Without NCCL in rdzvd a server-made ID is impossible: null, as documented. */
    return mode == RDZV_NCCL_SERVER && !self->cfg->nccl_helper ? RDZV_NCCL_NONE : mode;
}

/* In rank0 mode rank 0 must bring exactly the group's number of IDs and
 * nobody else may bring any; checked before anything is recorded. */
static bool s_rank0_ids_ok(rdzv_batch_t *self, const rdzv_peer_t *peer, const rdzv_request_t *req)
{
    rdzv_group_t *g = rdzv_state_group(self->state, req->group);
    rdzv_nccl_mode_t mode = g ? g->nccl_mode : s_requested_mode(self, req);
    int count = g ? g->nccl_count : (req->nccl_ids ? req->nccl_ids : 1);
    int brought = req->rank0_ids ? cJSON_GetArraySize(req->rank0_ids) : 0;
    if (mode == RDZV_NCCL_RANK0 && req->rank == 0 && brought != count) {
        rdzv_batch_error(self, peer, RDZV_E_BAD_REQUEST,
                        "rank 0 of rank0-mode group %s must send %d IDs in "
                        "nccl_unique_ids_from_rank0, not %d", req->group, count, brought);
        return false;
    }
    if (brought && (mode != RDZV_NCCL_RANK0 || req->rank != 0)) {
        rdzv_batch_error(self, peer, RDZV_E_BAD_REQUEST,
                        "only rank 0 of a rank0-mode group sends nccl_unique_ids_from_rank0");
        return false;
    }
    return true;
}

/* Members of g heard from within --dead-after, or waiting in a join. */
static int s_alive(const rdzv_batch_t *self, const rdzv_group_t *g)
{
    int alive = 0;
    const rdzv_member_t *m;
    for (int r = 0; (m = rdzv_group_next(g, &r)); r++)
        alive += m->waiting
                 || self->now_ms - rdzv_member_seen(self->state, m) < self->cfg->dead_after_ms;
    return alive;
}

/* A join with another world for a group none of whose ranks is alive
 * (scaling DP 4 -> 8 after the old ranks stopped): the group is laid out
 * afresh for the new world at its next epoch, recorded as a delete, the
 * group and the epoch, so that a resize needs nothing only agents hold.
 * Returns the new group, or NULL with the reply queued. */
static rdzv_group_t *s_resize(rdzv_batch_t *self, const rdzv_peer_t *peer, rdzv_group_t *g,
                              const rdzv_request_t *req)
{
    if (!rdzv_reclaim_room(self, (rdzv_reclaim_need_t) { .ranks = req->world - g->world }, g,
                           peer)) {
        rdzv_batch_error(self, peer, RDZV_E_LIMIT, "a world of %d for group %s would pass "
                         "rdzvd's limit of %lld ranks (--max-ranks)", req->world, g->name,
                         (long long) self->cfg->limits.max_ranks);
        return NULL;
    }
    int64_t next = g->epoch + 1;
    int old_world = g->world;
    for (rdzv_kv_waiter_t *w = zlistx_first(g->kv_waiters); w; w = zlistx_next(g->kv_waiters))
        rdzv_batch_error_to(self, &w->peer, g->name, -1, RDZV_E_STALE_EPOCH,
                            "group %s was resized", g->name);
    char name[RDZV_MAX_NAME + 1];
    snprintf(name, sizeof name, "%s", g->name);
    if (rdzv_batch_record(self, rdzv_record_delete(name)) < 0
        || rdzv_batch_record(self, rdzv_record_group(name, req->world, s_requested_mode(self, req),
                                                     req->nccl_ids ? req->nccl_ids : 1)) < 0
        || rdzv_batch_record(self, rdzv_record_epoch(name, next)) < 0) {
        rdzv_batch_error(self, peer, RDZV_E_INTERNAL, "cannot record the resize of %s", name);
        return NULL;
    }
    self->metrics->epoch_changes++;
    rdzv_core_log("resize", "group=%s world=%d->%d epoch=%lld reason=\"no rank of the old "
                  "world is alive\"", name, old_world, req->world, (long long) next);
    return rdzv_state_group(self->state, name);
}

/* Rule 1's refusal: another world while some rank of the group is alive. */
static void s_refuse_world(rdzv_batch_t *self, const rdzv_peer_t *peer, const rdzv_group_t *g,
                           const rdzv_request_t *req)
{
    rdzv_batch_error(self, peer, RDZV_E_WORLD_MISMATCH,
                     "group %s has world %d, not %d, and %d of its ranks are alive; to "
                     "resize, stop them (a join with the new world is taken once none has "
                     "been heard from for --dead-after, %lld s) or delete the group "
                     "(rdzv group delete --group %s)", g->name, g->world, req->world,
                     s_alive(self, g), (long long) (self->cfg->dead_after_ms / 1000),
                     g->name);
}

/* Whether rdzvd has room for the group a join would make, once abandoned
 * groups are reclaimed; the refusal queued if not. */
static bool s_group_room(rdzv_batch_t *self, const rdzv_peer_t *peer, const rdzv_request_t *req)
{
    if (rdzv_reclaim_room(self, (rdzv_reclaim_need_t) { .ranks = req->world, .group = true },
                          NULL, peer))
        return true;
    if ((int) zhashx_size(self->state->groups) >= self->cfg->limits.max_groups) {
        rdzv_batch_error(self, peer, RDZV_E_LIMIT, "rdzvd holds %d groups, its limit, and "
                         "none is forming without a waiter", self->cfg->limits.max_groups);
        return false;
    }
    if (self->state->ranks + req->world > self->cfg->limits.max_ranks) {
        rdzv_batch_error(self, peer, RDZV_E_LIMIT, "rdzvd holds groups of %lld ranks in all; "
                         "a world of %d would pass its limit of %lld (--max-ranks)",
                         (long long) self->state->ranks, req->world,
                         (long long) self->cfg->limits.max_ranks);
        return false;
    }
    return true;
}

/* Records the group a join names; only once the join can no longer be refused. */
static rdzv_group_t *s_make_group(rdzv_batch_t *self, const rdzv_peer_t *peer,
                                  const rdzv_request_t *req)
{
    cJSON *rec = rdzv_record_group(req->group, req->world, s_requested_mode(self, req),
                                   req->nccl_ids ? req->nccl_ids : 1);
    if (rdzv_batch_record(self, rec) < 0) {
        rdzv_batch_error(self, peer, RDZV_E_INTERNAL, "cannot record group %s", req->group);
        return NULL;
    }
    rdzv_core_log("group", "created group=%s world=%d", req->group, req->world);
    return rdzv_state_group(self->state, req->group);
}

/* Whether the rank's strings fit --max-member-mib: a count of ranks alone
 * would let 255-byte hosts, nodes and sessions cost a kilobyte each. */
static bool s_member_bytes_ok(rdzv_batch_t *self, const rdzv_peer_t *peer,
                              const rdzv_group_t *g, const rdzv_member_t *m,
                              const rdzv_request_t *req)
{
    uint64_t now = m ? rdzv_member_text_bytes(m->host, m->node, m->session) : 0;
    uint64_t want = rdzv_member_text_bytes(req->host, req->node, req->session);
    uint64_t max = self->cfg->limits.max_member_bytes;
    if (want <= now
        || rdzv_reclaim_room(self, (rdzv_reclaim_need_t) { .member_bytes = want - now }, g,
                             peer))
        return true;
    rdzv_batch_error(self, peer, RDZV_E_LIMIT, "the host, node and session strings of every "
                     "rank held would pass rdzvd's limit of %llu MiB (--max-member-mib)",
                     (unsigned long long) (max >> 20));
    return false;
}

/* What a join means, one value per rule of docs/protocol.md ("join",
 * "Rules, in the order rdzvd applies them"). */
typedef enum {
    S_JOIN_CREATES_GROUP,        /* rule 1: the group's first valid join makes it */
    S_JOIN_WORLD_MISMATCH,       /* rule 1: another world, a rank alive: world_mismatch */
    S_JOIN_RESIZES_GROUP,        /* rule 1: another world, no rank alive: laid out afresh */
    S_JOIN_RESUMES_ASSIGNED,     /* rule 2: same session, complete epoch: the assignment */
    S_JOIN_RESUMES_LOST_ROOT,    /* rule 2's exception: the epoch's NCCL root died with an
                                  * earlier rdzvd, its IDs are worthless: epoch + 1 */
    S_JOIN_RESUMES_WAITING,      /* rule 2: same session, epoch forming: waits again */
    S_JOIN_RESTARTS_RANK,        /* rule 3: new session for an assigned rank: epoch + 1 */
    S_JOIN_CLAIMS_LIVE_RANK,     /* rule 3's exception: holder alive on another node,
                                  * no replace: rank_taken */
    S_JOIN_RANK_WAITING,         /* rule 4: the old session waits in the forming epoch:
                                  * rank_taken */
    S_JOIN_TAKES_RANK,           /* rule 4: the old session waits no more: the new one
                                  * takes the rank */
    S_JOIN_COUNTS_TOWARD_EPOCH,  /* rule 5: the rank's first join of the forming epoch */
} s_join_rule_t;

/* Rule 3 for a new session on a rank of the complete epoch. Two live
 * processes claiming one rank (two Pods started with one RDZV_RANK): the
 * holder answers heartbeats, from another node. A new session from the
 * holder's own node is that process restarted, and one whose holder went
 * quiet for --dead-after took its place; either moves the group on, as
 * does a join that says it replaces the holder. */
static s_join_rule_t s_restart_rule(const rdzv_batch_t *self, const rdzv_member_t *m,
                                    const rdzv_request_t *req)
{
    bool holder_alive = self->now_ms - rdzv_member_seen(self->state, m)
                        < self->cfg->dead_after_ms;
    return !req->replace && holder_alive && strcmp(m->node, req->node) != 0
           ? S_JOIN_CLAIMS_LIVE_RANK : S_JOIN_RESTARTS_RANK;
}

/* The rule a join of g (NULL: no such group) falls under, from the state
 * alone: nothing is queued or recorded. */
static s_join_rule_t s_join_rule(const rdzv_batch_t *self, const rdzv_group_t *g,
                                 const rdzv_request_t *req)
{
    if (!g)
        return S_JOIN_CREATES_GROUP;
    const rdzv_member_t *m = req->rank < g->world ? rdzv_group_at(g, req->rank) : NULL;
    /* A rank's own process rejoining after a resize (rdzv group resize)
     * still says the world it was started with: the group's is the one
     * that counts, and the assignment tells it. */
    bool resumes = m && strcmp(m->session, req->session) == 0;
    /* ... while the group forms, before the rank joined its epoch, or in
     * the epoch a resize made (its waiting join may have been lost with a
     * restarted rdzvd while the epoch formed): a process started with
     * another world that resumes its session in a formed group it was
     * never resized in is refused. */
    if (g->world != req->world
        && !(resumes && (m->epoch < g->epoch || !g->complete || g->resized_at == g->epoch)))
        return s_alive(self, g) ? S_JOIN_WORLD_MISMATCH : S_JOIN_RESIZES_GROUP;
    bool in_epoch = m && m->epoch == g->epoch;
    if (resumes) {
        if (!in_epoch || !g->complete)
            return S_JOIN_RESUMES_WAITING;
        return g->root_lost ? S_JOIN_RESUMES_LOST_ROOT : S_JOIN_RESUMES_ASSIGNED;
    }
    if (!in_epoch)
        return S_JOIN_COUNTS_TOWARD_EPOCH;
    if (g->complete)
        return s_restart_rule(self, m, req);
    return m->waiting && m->deadline_ms > self->now_ms ? S_JOIN_RANK_WAITING
                                                       : S_JOIN_TAKES_RANK;
}

/* Rule 4's refusal: the rank's old session waits in the forming epoch.
 * Named as rule 3 names a live holder, so that an operator finds the
 * other process; its wait ends at its deadline, and then the rank is free. */
static void s_refuse_waiting_holder(rdzv_batch_t *self, const rdzv_peer_t *peer,
                                    const rdzv_group_t *g, const rdzv_request_t *req)
{
    const rdzv_member_t *m = rdzv_group_at(g, req->rank);
    rdzv_batch_error(self, peer, RDZV_E_RANK_TAKEN,
                     "group %s rank %d is held by a live session from host %s node %s, "
                     "waiting in forming epoch %lld (its wait ends in %lld ms); this join "
                     "comes from node %s: check the ranks' RDZV_RANK",
                     g->name, req->rank, m->host, m->node, (long long) g->epoch,
                     (long long) (m->deadline_ms - self->now_ms), req->node);
}

/* Rule 3's exception: the holder of the complete epoch's rank answers from
 * another node. */
static void s_refuse_live_holder(rdzv_batch_t *self, const rdzv_peer_t *peer,
                                 const rdzv_group_t *g, const rdzv_request_t *req)
{
    const rdzv_member_t *m = rdzv_group_at(g, req->rank);
    rdzv_batch_error(self, peer, RDZV_E_RANK_TAKEN,
                     "group %s rank %d is held by a live session from host %s node %s "
                     "(heard %lld ms ago); this join comes from node %s: check the ranks' "
                     "RDZV_RANK, or join with replace (rdzv join --replace) to take it",
                     g->name, req->rank, m->host, m->node,
                     (long long) (self->now_ms - rdzv_member_seen(self->state, m)),
                     req->node);
}

/* Rule 2: the assignment of the complete epoch, again. */
static void s_resume(rdzv_batch_t *self, const rdzv_peer_t *peer, rdzv_group_t *g,
                     const rdzv_request_t *req)
{
    rdzv_member_t *m = rdzv_group_at(g, req->rank);
    m->last_seen_ms = g->heard_ms = self->now_ms;
    rdzv_batch_reply(self, peer, rdzv_assignment_text(self->state, g, req->rank, req->id,
                                                      req->members));
}

/* Records what a join changes: the group (g NULL: rule 1), the next epoch
 * (next_why set: rules 2 and 3) and the rank's join unless it holds this
 * epoch already. The group, or NULL with the refusal queued. */
static rdzv_group_t *s_record_changes(rdzv_batch_t *self, const rdzv_peer_t *peer,
                                      rdzv_group_t *g, const rdzv_request_t *req,
                                      const char *next_why)
{
    const rdzv_member_t *m = g ? rdzv_group_at(g, req->rank) : NULL;
    bool same_session = m && strcmp(m->session, req->session) == 0;
    if (!g && !(g = s_make_group(self, peer, req)))
        return NULL;
    if (next_why && rdzv_release_next_epoch(self, g, next_why) < 0) {
        rdzv_batch_error(self, peer, RDZV_E_INTERNAL, "cannot record the new epoch");
        return NULL;
    }
    if ((!same_session || m->epoch < g->epoch) && s_record_join(self, g, req) < 0) {
        rdzv_batch_error(self, peer, RDZV_E_INTERNAL, "cannot record the join");
        return NULL;
    }
    if (s_record_router(self, g, req, same_session) < 0) {
        rdzv_batch_error(self, peer, RDZV_E_INTERNAL, "cannot record the group's router");
        return NULL;
    }
    return g;
}

/* The rank waits in g's forming epoch; the last rank to come releases it. */
static void s_wait_in_epoch(rdzv_batch_t *self, const rdzv_peer_t *peer, rdzv_group_t *g,
                            const rdzv_request_t *req)
{
    if (req->rank0_ids) {
        cJSON_Delete(g->rank0_ids);
        g->rank0_ids = cJSON_Duplicate(req->rank0_ids, 1);
    }
    rdzv_member_t *m = rdzv_group_at(g, req->rank);
    if (!m->waiting && !g->complete)
        m->joined_at_ms = self->now_ms;
    /* What its heartbeats said was of an engine of another epoch. */
    if (!g->complete) {
        m->health = RDZV_HEALTH_UNKNOWN;
        m->served = false;
    }
    m->last_seen_ms = g->heard_ms = self->now_ms;
    s_set_waiter(self, g, m, peer, req);
    if (g->joined == g->world && !g->complete)
        rdzv_release_group(self, g);
}

/* A join that counts towards an epoch (rules 1-5 but the refusals and the
 * resume of a complete one): checked against the limits, recorded, then
 * waiting. g is NULL when the join makes the group; next_why, when set,
 * moves the group to its next epoch first and goes to the log. */
static void s_join_epoch(rdzv_batch_t *self, const rdzv_peer_t *peer, rdzv_group_t *g,
                         const rdzv_request_t *req, const char *next_why)
{
    const rdzv_member_t *m = g ? rdzv_group_at(g, req->rank) : NULL;
    if (!(m && m->waiting) && !rdzv_batch_wait_ok(self, peer))
        return;
    if (!s_member_bytes_ok(self, peer, g, m, req))
        return;
    if ((g = s_record_changes(self, peer, g, req, next_why)))
        s_wait_in_epoch(self, peer, g, req);
}

/* A join naming a router rdzvd may not drive is refused before anything
 * else: rdzvd would call that URL or write to that socket for the group. */
static bool s_router_ok(rdzv_batch_t *self, const rdzv_peer_t *peer, const rdzv_request_t *req)
{
    if (!req->router || rdzv_router_allowed(self->cfg->router_allow, self->cfg->nrouter_allow,
                                            req->router))
        return true;
    rdzv_batch_error(self, peer, RDZV_E_FORBIDDEN, "rdzvd does not register endpoints at "
                     "router %s: start it with --router-allow naming that router",
                     req->router);
    return false;
}

/* A join, by the rule it falls under; rank 0's NCCL IDs are checked first
 * whatever the rule. */
static void s_handle_join(rdzv_batch_t *self, const rdzv_peer_t *peer, const rdzv_request_t *req)
{
    rdzv_group_t *g = rdzv_state_group(self->state, req->group);
    s_join_rule_t rule = s_join_rule(self, g, req);
    if (!s_rank0_ids_ok(self, peer, req) || !s_router_ok(self, peer, req))
        return;
    switch (rule) {
    case S_JOIN_CREATES_GROUP:
        if (s_group_room(self, peer, req))
            s_join_epoch(self, peer, NULL, req, NULL);
        break;
    case S_JOIN_WORLD_MISMATCH:
        s_refuse_world(self, peer, g, req);
        break;
    case S_JOIN_RESIZES_GROUP:
        /* The new group has no member: this is its rank's first join
         * (rule 5), checked again against the new group's NCCL mode. */
        if ((g = s_resize(self, peer, g, req)) && s_rank0_ids_ok(self, peer, req))
            s_join_epoch(self, peer, g, req, NULL);
        break;
    case S_JOIN_RESUMES_ASSIGNED:
        s_resume(self, peer, g, req);
        break;
    case S_JOIN_RESUMES_LOST_ROOT:
        s_join_epoch(self, peer, g, req, "the nccl root of an earlier rdzvd is gone");
        break;
    case S_JOIN_RESTARTS_RANK:
        s_join_epoch(self, peer, g, req, "a rank restarted");
        break;
    case S_JOIN_CLAIMS_LIVE_RANK:
        s_refuse_live_holder(self, peer, g, req);
        break;
    case S_JOIN_RANK_WAITING:
        s_refuse_waiting_holder(self, peer, g, req);
        break;
    case S_JOIN_RESUMES_WAITING:
    case S_JOIN_TAKES_RANK:
    case S_JOIN_COUNTS_TOWARD_EPOCH:
        s_join_epoch(self, peer, g, req, NULL);
        break;
    }
}

static rdzv_group_t *s_existing(rdzv_batch_t *self, const rdzv_peer_t *peer, const char *name)
{
    rdzv_group_t *g = rdzv_state_group(self->state, name);
    if (!g)
        rdzv_batch_error(self, peer, RDZV_E_NOT_FOUND, "no group %s", name);
    return g;
}

static bool s_epoch_ok(rdzv_batch_t *self, const rdzv_peer_t *peer, rdzv_group_t *g,
                       int64_t epoch)
{
    if (epoch < g->epoch) {
        rdzv_batch_error(self, peer, RDZV_E_STALE_EPOCH, "group %s is at epoch %lld, not %lld",
                        g->name, (long long) g->epoch, (long long) epoch);
        return false;
    }
    if (epoch > g->epoch) {
        rdzv_batch_error(self, peer, RDZV_E_BAD_REQUEST, "group %s has no epoch %lld yet",
                        g->name, (long long) epoch);
        return false;
    }
    return true;
}

static void s_handle_heartbeat(rdzv_batch_t *self, const rdzv_peer_t *peer,
                               const rdzv_request_t *req)
{
    rdzv_group_t *g = s_existing(self, peer, req->group);
    if (!g)
        return;
    if (req->rank >= g->world) {
        /* A rank a shrink dropped, still behind the router: alive while its
         * agent waits, so that the router drains it rather than cutting. */
        rdzv_leaving_t *l = rdzv_group_leaving_find(g, req->rank);
        if (l)
            l->heard_ms = self->now_ms;
        rdzv_batch_error(self, peer, RDZV_E_NOT_FOUND, "group %s has world %d since its epoch "
                         "%lld: rank %d is no longer in it%s", g->name, g->world,
                         (long long) g->epoch, req->rank,
                         l ? " (it leaves the router first)" : "");
        return;
    }
    rdzv_member_t *m = rdzv_group_at(g, req->rank);
    if (!m || strcmp(m->session, req->session) != 0) {
        rdzv_batch_error(self, peer, RDZV_E_NOT_FOUND, "group %s rank %d has no session %s",
                        g->name, req->rank, req->session);
        return;
    }
    m->last_seen_ms = g->heard_ms = self->now_ms;
    /* "Not serving" holds whatever epoch it comes from: a draining agent
     * still on an old epoch must not stay registered until it rejoins. */
    if (req->serving == RDZV_HEALTH_DOWN)
        m->health = RDZV_HEALTH_DOWN;
    if (!s_epoch_ok(self, peer, g, req->epoch))
        return;
    /* Only the engine of the group's epoch counts (s_epoch_ok said so). */
    if (req->serving != RDZV_HEALTH_UNKNOWN) {
        m->health = (uint8_t) req->serving;
        m->served = m->served || req->serving == RDZV_HEALTH_SERVING;
    }
    rdzv_batch_reply(self, peer, rdzv_reply_epoch(req->id, g->epoch));
}

/* The group a kv request names, at the request's epoch; NULL with the
 * refusal queued. */
static rdzv_group_t *s_kv_group(rdzv_batch_t *self, const rdzv_peer_t *peer,
                                const rdzv_request_t *req)
{
    rdzv_group_t *g = s_existing(self, peer, req->group);
    return g && s_epoch_ok(self, peer, g, req->epoch) ? g : NULL;
}

/* Whether putting req's key fits the limits with old, the key's value
 * now (NULL if none), freed; the refusal queued if not. */
static bool s_kv_room(rdzv_batch_t *self, const rdzv_peer_t *peer, const rdzv_group_t *g,
                      const rdzv_request_t *req, const char *old_value)
{
    /* An overwrite frees the old value: count the group without it. */
    uint64_t old = old_value ? strlen(req->key) + strlen(old_value) : 0;
    uint64_t put = strlen(req->key) + strlen(req->value);
    const rdzv_limits_t *lim = &self->cfg->limits;
    if (self->state->kv_bytes - old + put > lim->max_kv_total_bytes) {
        rdzv_batch_error(self, peer, RDZV_E_LIMIT, "rdzvd holds %llu KV bytes in all groups; "
                         "the limit is %llu", (unsigned long long) self->state->kv_bytes,
                         (unsigned long long) lim->max_kv_total_bytes);
        return false;
    }
    uint64_t others = g->kv_bytes - old;
    if (others + put > lim->max_kv_bytes) {
        rdzv_batch_error(self, peer, RDZV_E_LIMIT, "group %s holds %llu KV bytes; the limit is %llu",
                        g->name, (unsigned long long) g->kv_bytes,
                        (unsigned long long) self->cfg->limits.max_kv_bytes);
        return false;
    }
    return true;
}

/* Answers, with value, every kv_wait of g on key. */
static void s_wake_kv_waiters(rdzv_batch_t *self, rdzv_group_t *g, const char *key,
                              const char *value)
{
    rdzv_kv_waiter_t *w = zlistx_first(g->kv_waiters);
    while (w) {
        void *handle = zlistx_cursor(g->kv_waiters);
        rdzv_kv_waiter_t *next = zlistx_next(g->kv_waiters);
        if (strcmp(w->key, key) == 0) {
            rdzv_batch_reply(self, &w->peer, rdzv_reply_value(w->peer.req, value));
            zlistx_delete(g->kv_waiters, handle);
        }
        w = next;
    }
}

static void s_handle_kv_put(rdzv_batch_t *self, const rdzv_peer_t *peer,
                            const rdzv_request_t *req)
{
    rdzv_group_t *g = s_kv_group(self, peer, req);
    if (!g || !s_kv_room(self, peer, g, req, rdzv_group_kv(g, req->key)))
        return;
    cJSON *rec = rdzv_record_kv(g->name, g->epoch, req->key, req->value);
    if (rdzv_batch_record(self, rec) < 0) {
        rdzv_batch_error(self, peer, RDZV_E_INTERNAL, "cannot record key %s", req->key);
        return;
    }
    rdzv_batch_reply(self, peer, rdzv_reply_ok(req->id));
    s_wake_kv_waiters(self, g, req->key, rdzv_group_kv(g, req->key));
}

static void s_handle_kv_get(rdzv_batch_t *self, const rdzv_peer_t *peer,
                            const rdzv_request_t *req)
{
    rdzv_group_t *g = s_kv_group(self, peer, req);
    if (!g)
        return;
    const char *value = rdzv_group_kv(g, req->key);
    if (value)
        rdzv_batch_reply(self, peer, rdzv_reply_value(req->id, value));
    else
        rdzv_batch_error(self, peer, RDZV_E_NOT_FOUND, "no key %s in group %s epoch %lld",
                        req->key, g->name, (long long) g->epoch);
}

/* Answers at once if the key is there, else waits for its put (or the
 * tick's timeout). */
static void s_handle_kv_wait(rdzv_batch_t *self, const rdzv_peer_t *peer,
                             const rdzv_request_t *req)
{
    rdzv_group_t *g = s_kv_group(self, peer, req);
    if (!g)
        return;
    const char *value = rdzv_group_kv(g, req->key);
    if (value) {
        rdzv_batch_reply(self, peer, rdzv_reply_value(req->id, value));
        return;
    }
    if (!rdzv_batch_wait_ok(self, peer))
        return;
    rdzv_kv_waiter_t *w = calloc(1, sizeof *w);
    if (!w || !(w->key = strdup(req->key))) {
        free(w);
        rdzv_batch_error(self, peer, RDZV_E_INTERNAL, "out of memory");
        return;
    }
    rdzv_peer_copy(&w->peer, peer);
    w->deadline_ms = self->now_ms + req->timeout_ms;
    zlistx_add_end(g->kv_waiters, w);
}

/* A plan overlap names the other group, its node and rank: under --tokens
 * only to a caller whose token opens that group too. The overlap itself,
 * on the caller's own rank and host, stays. */
static void s_redact_overlaps(rdzv_tokens_t *tokens, cJSON *group, const char *token)
{
    cJSON *overlaps = cJSON_GetObjectItemCaseSensitive(group, "plan_overlaps");
    for (cJSON *o = overlaps ? overlaps->child : NULL; o; o = o->next) {
        const cJSON *other = cJSON_GetObjectItemCaseSensitive(o, "other_group");
        if (cJSON_IsString(other) && rdzv_tokens_allow(tokens, other->valuestring, token))
            continue;
        cJSON_ReplaceItemInObjectCaseSensitive(o, "other_group", cJSON_CreateNull());
        cJSON_ReplaceItemInObjectCaseSensitive(o, "other_node", cJSON_CreateNull());
        cJSON_ReplaceItemInObjectCaseSensitive(o, "other_rank", cJSON_CreateNull());
    }
}

static void s_handle_status(rdzv_batch_t *self, const rdzv_peer_t *peer, const rdzv_request_t *req)
{
    cJSON *groups = rdzv_state_status(self->state, req->group, self->now_ms);
    const cJSON *token_item = cJSON_GetObjectItemCaseSensitive(req->root, "token");
    const char *token = cJSON_IsString(token_item) ? token_item->valuestring : NULL;
    for (cJSON *g = self->tokens && groups ? groups->child : NULL, *next; g; g = next) {
        next = g->next;
        const char *name = cJSON_GetObjectItemCaseSensitive(g, "group")->valuestring;
        if (!rdzv_tokens_allow(self->tokens, name, token))
            cJSON_Delete(cJSON_DetachItemViaPointer(groups, g));
        else
            s_redact_overlaps(self->tokens, g, token);
    }
    if (req->group && cJSON_GetArraySize(groups) == 0) {
        cJSON_Delete(groups);
        rdzv_batch_error(self, peer, RDZV_E_NOT_FOUND, "no group %s", req->group);
        return;
    }
    rdzv_batch_reply(self, peer, rdzv_reply_groups(req->id, groups));
}

static void s_handle_delete(rdzv_batch_t *self, const rdzv_peer_t *peer, const rdzv_request_t *req)
{
    rdzv_group_t *g = s_existing(self, peer, req->group);
    if (!g)
        return;
    rdzv_member_t *m;
    for (int r = 0; g->waiting > 0 && (m = rdzv_group_next(g, &r)); r++)
        if (m->waiting) {
            m->waiting = false;
            g->waiting--;
            rdzv_batch_error_to(self, &m->peer, g->name, r, RDZV_E_NOT_FOUND,
                                "group %s was deleted", g->name);
        }
    for (rdzv_kv_waiter_t *w = zlistx_first(g->kv_waiters); w; w = zlistx_next(g->kv_waiters))
        rdzv_batch_error_to(self, &w->peer, g->name, -1, RDZV_E_NOT_FOUND, "group %s was deleted",
                            g->name);
    if (rdzv_batch_record(self, rdzv_record_delete(g->name)) < 0) {
        rdzv_batch_error(self, peer, RDZV_E_INTERNAL, "cannot record the delete");
        return;
    }
    rdzv_core_log("delete", "group=%s", req->group);
    rdzv_batch_reply(self, peer, rdzv_reply_ok(req->id));
}

/* Whether a resize of forming g to world closes it: world is below g's and
 * exactly the ranks 0..world-1 have joined the epoch. */
static bool s_closes(const rdzv_group_t *g, int world)
{
    if (world >= g->world || g->joined != world)
        return false;
    for (int r = 0; r < world; r++) {
        const rdzv_member_t *m = rdzv_group_at(g, r);
        if (!m || m->epoch != g->epoch)
            return false;
    }
    return true;
}

/* The forming epoch closes at the ranks that joined it, and is released to
 * them at once: a round that ends with the ranks that came (the torchrun
 * backend's --nnodes MIN:MAX after its last call), or an operator's answer
 * to a rank that will not come. */
static void s_close(rdzv_batch_t *self, const rdzv_peer_t *peer, rdzv_group_t *g,
                    const rdzv_request_t *req)
{
    int old = g->world;
    if (rdzv_batch_record(self, rdzv_record_resize(g->name, req->world, g->epoch,
                                                   RDZV_RESIZE_CLOSE)) < 0) {
        rdzv_batch_error(self, peer, RDZV_E_INTERNAL, "cannot record the close");
        return;
    }
    rdzv_core_log("resize", "group=%s world=%d->%d epoch=%lld closed at the ranks that joined",
                  g->name, old, req->world, (long long) g->epoch);
    rdzv_release_group(self, g);
    rdzv_batch_reply(self, peer, rdzv_reply_epoch(req->id, g->epoch));
}

/* A resize of a formed group: the next epoch, of the new world, forming
 * (docs/protocol.md, "group_resize"). The ranks that stay keep their plans
 * and join the new epoch (their heartbeats answer stale_epoch); new ranks
 * join with the new world; ranks past it are no longer members, and their
 * heartbeats answer not_found. */
static void s_handle_resize(rdzv_batch_t *self, const rdzv_peer_t *peer, const rdzv_request_t *req)
{
    rdzv_group_t *g = s_existing(self, peer, req->group);
    if (!g)
        return;
    if (req->world == g->world && !(req->fresh && g->complete)) {
        rdzv_batch_reply(self, peer, rdzv_reply_epoch(req->id, g->epoch));
        return;
    }
    if (!g->complete && !req->fresh && s_closes(g, req->world)) {
        s_close(self, peer, g, req);
        return;
    }
    if (!g->complete) {
        rdzv_batch_error(self, peer, RDZV_E_BAD_REQUEST, "group %s is forming epoch %lld (%d of "
                         "%d ranks joined): resize it once it has formed, or close it at the "
                         "ranks that joined if they are 0..N-1 (--world N) (rdzv status --group "
                         "%s)", g->name, (long long) g->epoch, g->joined, g->world, g->name);
        return;
    }
    if (req->world > g->world
        && self->state->ranks + (req->world - g->world) > self->cfg->limits.max_ranks) {
        rdzv_batch_error(self, peer, RDZV_E_LIMIT, "rdzvd holds %lld ranks; %d more would pass "
                         "its limit of %lld (--max-ranks)", (long long) self->state->ranks,
                         req->world - g->world, (long long) self->cfg->limits.max_ranks);
        return;
    }
    for (rdzv_kv_waiter_t *w = zlistx_first(g->kv_waiters); w; w = zlistx_next(g->kv_waiters))
        rdzv_batch_error_to(self, &w->peer, g->name, -1, RDZV_E_STALE_EPOCH,
                            "group %s was resized", g->name);
    zlistx_purge(g->kv_waiters);
    int old = g->world;
    int64_t next = g->epoch + 1;
    if (rdzv_batch_record(self, rdzv_record_resize(g->name, req->world, next, req->fresh
                                                   ? RDZV_RESIZE_FRESH : RDZV_RESIZE_KEEP)) < 0) {
        rdzv_batch_error(self, peer, RDZV_E_INTERNAL, "cannot record the resize");
        return;
    }
    self->metrics->epoch_changes++;
    rdzv_core_log("resize", "group=%s world=%d->%d epoch=%lld", req->group, old, req->world,
                  (long long) next);
    rdzv_batch_reply(self, peer, rdzv_reply_epoch(req->id, next));
}

void rdzv_handle_request(rdzv_batch_t *self, const rdzv_peer_t *peer, const rdzv_request_t *req)
{
    switch (req->op) {
    case RDZV_OP_JOIN:
        s_handle_join(self, peer, req);
        break;
    case RDZV_OP_HEARTBEAT:
        s_handle_heartbeat(self, peer, req);
        break;
    case RDZV_OP_STATUS:
        s_handle_status(self, peer, req);
        break;
    case RDZV_OP_GROUP_DELETE:
        s_handle_delete(self, peer, req);
        break;
    case RDZV_OP_GROUP_RESIZE:
        s_handle_resize(self, peer, req);
        break;
    case RDZV_OP_KV_PUT:
        s_handle_kv_put(self, peer, req);
        break;
    case RDZV_OP_KV_GET:
        s_handle_kv_get(self, peer, req);
        break;
    case RDZV_OP_KV_WAIT:
        s_handle_kv_wait(self, peer, req);
        break;
    }
}
