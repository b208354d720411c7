#include "reclaim.h"
#include "log.h"
#include "records.h"
#include "rdzv_proto.h"
#include "rdzv_util.h"

#include <stdlib.h>
#include <string.h>

bool rdzv_reclaim_candidate(const rdzv_group_t *g)
{
    return !g->complete && g->epoch <= 1 && g->waiting == 0 && zlistx_size(g->kv_waiters) == 0;
}

static bool s_fits(const rdzv_batch_t *self, rdzv_reclaim_need_t need)
{
    const rdzv_limits_t *l = &self->cfg->limits;
    return self->state->ranks + need.ranks <= l->max_ranks
           && (!need.group || (int) zhashx_size(self->state->groups) < l->max_groups)
           && self->state->member_bytes + need.member_bytes <= l->max_member_bytes;
}

/* Least recently heard from first; never heard from since a load counts
 * as oldest. */
static int s_by_heard(const void *a, const void *b)
{
    int64_t x = (*(rdzv_group_t *const *) a)->heard_ms, y = (*(rdzv_group_t *const *) b)->heard_ms;
    return x < y ? -1 : x > y;
}

/* Deletes g, answering its waits with message; a record, so a replay agrees. */
static int s_delete(rdzv_batch_t *self, rdzv_group_t *g, const char *message)
{
    char name[RDZV_MAX_NAME + 1];
    snprintf(name, sizeof name, "%s", g->name);
    int world = g->world, joined = g->joined;
    rdzv_member_t *m;
    for (int r = 0; g->waiting > 0 && (m = rdzv_group_next(g, &r)); r++)
        if (m->waiting) {
            m->waiting = false;
            g->waiting--;
            rdzv_batch_error_to(self, &m->peer, name, r, RDZV_E_LIMIT,
                                "group %s was reclaimed: %s", name, message);
        }
    if (rdzv_batch_record(self, rdzv_record_delete(name)) < 0)
        return -1;
    self->metrics->groups_reclaimed++;
    rdzv_core_log("reclaim", "group=%s world=%d joined=%d reason=\"%s\"", name, world, joined,
                  message);
    return 0;
}

/* Deletes abandoned groups (rdzv_reclaim_candidate) until need fits. */
static void s_reclaim_abandoned(rdzv_batch_t *self, rdzv_reclaim_need_t need,
                                const rdzv_group_t *keep)
{
    zhashx_t *groups = self->state->groups;
    size_t n = 0;
    rdzv_group_t **v = malloc(zhashx_size(groups) * sizeof *v + 1);
    if (!v)
        return;
    for (rdzv_group_t *g = zhashx_first(groups); g; g = zhashx_next(groups))
        if (g != keep && rdzv_reclaim_candidate(g))
            v[n++] = g;
    qsort(v, n, sizeof *v, s_by_heard);
    for (size_t i = 0; i < n && !s_fits(self, need); i++)
        if (s_delete(self, v[i], "a new group or rank needs its place under rdzvd's limits, "
                     "and nobody waits in it") < 0)
            break;
    free(v);
}

/* A connection's key: its shard and ROUTER identity. */
static void s_peer_key(const rdzv_peer_t *p, char key[16 + 2 * RDZV_PEER_MAX + 1])
{
    int n = snprintf(key, 16, "%d/", p->shard);
    rdzv_hex_encode(rdzv_peer_id(p), p->len, key + n);
}

/* The connection every wait in g comes from; NULL when g is not forming its
 * first epoch, nobody or several connections wait in it, or a KV wait is
 * pending. */
static const rdzv_peer_t *s_sole_waiter(const rdzv_group_t *g)
{
    if (g->complete || g->epoch > 1 || g->waiting == 0 || zlistx_size(g->kv_waiters))
        return NULL;
    const rdzv_peer_t *one = NULL;
    const rdzv_member_t *m;
    for (int r = 0; (m = rdzv_group_next(g, &r)); r++) {
        if (!m->waiting)
            continue;
        if (one && (one->shard != m->peer.shard || one->len != m->peer.len
                    || memcmp(rdzv_peer_id(one), rdzv_peer_id(&m->peer), one->len) != 0))
            return NULL;
        one = &m->peer;
    }
    return one;
}

typedef struct {
    int64_t ranks;               /* worlds of the forming groups it waits in alone */
    int groups;
} s_held_t;

typedef struct {
    rdzv_group_t *group;
    s_held_t *held;              /* its connection's */
} s_hoarded_t;

/* A connection's only group is never past its share: one group of a large
 * world (under a small --max-ranks) is what an honest rank 0 looks like
 * before its peers come; hoarding takes many groups. */
static bool s_past_share(const rdzv_batch_t *self, const s_held_t *h)
{
    const rdzv_limits_t *l = &self->cfg->limits;
    return h->groups > 1 && (h->ranks > l->max_ranks / RDZV_CONNECTION_SHARE
                             || h->groups > l->max_groups / RDZV_CONNECTION_SHARE);
}

static int s_hoarded_by_heard(const void *a, const void *b)
{
    rdzv_group_t *x = ((const s_hoarded_t *) a)->group, *y = ((const s_hoarded_t *) b)->group;
    return s_by_heard(&x, &y);
}

/* Deletes groups of connections past their share (not requester's) until
 * need fits or each is back within its share. */
static void s_reclaim_hoarded(rdzv_batch_t *self, rdzv_reclaim_need_t need,
                              const rdzv_group_t *keep, const char *requester)
{
    zhashx_t *groups = self->state->groups, *held = zhashx_new();
    s_hoarded_t *v = held ? malloc(zhashx_size(groups) * sizeof *v + 1) : NULL;
    size_t n = 0;
    char key[16 + 2 * RDZV_PEER_MAX + 1];
    if (!v)
        goto done;
    zhashx_set_destructor(held, (zhashx_destructor_fn *) zstr_free);
    for (rdzv_group_t *g = zhashx_first(groups); g; g = zhashx_next(groups)) {
        const rdzv_peer_t *p = g != keep ? s_sole_waiter(g) : NULL;
        if (!p)
            continue;
        s_peer_key(p, key);
        s_held_t *h = zhashx_lookup(held, key);
        if (!h && (!(h = calloc(1, sizeof *h)) || zhashx_insert(held, key, h) != 0)) {
            free(h);
            goto done;
        }
        h->ranks += g->world;
        h->groups++;
        if (strcmp(key, requester) != 0)
            v[n++] = (s_hoarded_t) { g, h };
    }
    qsort(v, n, sizeof *v, s_hoarded_by_heard);
    for (size_t i = 0; i < n && !s_fits(self, need); i++) {
        s_held_t *h = v[i].held;
        if (!s_past_share(self, h))
            continue;
        char why[256];
        snprintf(why, sizeof why, "its connection waits alone in %d forming groups of %lld "
                 "ranks, past its share (1/%d of --max-ranks and --max-groups), and another "
                 "group needs the room", h->groups, (long long) h->ranks, RDZV_CONNECTION_SHARE);
        h->ranks -= v[i].group->world;
        h->groups--;
        if (s_delete(self, v[i].group, why) < 0)
            break;
    }
done:
    free(v);
    zhashx_destroy(&held);
}

bool rdzv_reclaim_room(rdzv_batch_t *self, rdzv_reclaim_need_t need, const rdzv_group_t *keep,
                       const rdzv_peer_t *requester)
{
    if (s_fits(self, need))
        return true;
    s_reclaim_abandoned(self, need, keep);
    if (s_fits(self, need))
        return true;
    char key[16 + 2 * RDZV_PEER_MAX + 1];
    s_peer_key(requester, key);
    s_reclaim_hoarded(self, need, keep, key);
    return s_fits(self, need);
}
