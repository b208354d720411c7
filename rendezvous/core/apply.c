/* Applying journal records to memory. The live handlers and the replay at
 * start-up go through these same functions, so what rdzvd knows after a
 * restart is exactly what it had recorded. */
#include "state.h"
#include "records.h"
#include "rdzv_proto.h"

#include <stdlib.h>
#include <string.h>

static int s_set(char **field, const char *value)
{
    char *copy = strdup(value);
    if (!copy)
        return -1;
    free(*field);
    *field = copy;
    return 0;
}

static int s_apply_group(rdzv_state_t *self, const rdzv_record_t *rec)
{
    int64_t world = rec->u.group.world, count = rec->u.group.nccl_ids;
    const char *name = rec->group;
    if (world <= 0 || world > self->cfg->max_world || count < 1 || count > 64)
        return -1;
    return rdzv_state_add_group(self, name, (int) world, rec->u.group.nccl, (int) count) ? 0 : -1;
}

static int s_apply_join(rdzv_state_t *self, rdzv_group_t *g, const rdzv_record_t *rec)
{
    int64_t rank = rec->u.join.rank, epoch = rec->u.join.epoch;
    const char *host = rec->u.join.host, *node = rec->u.join.node;
    const char *session = rec->u.join.session;
    if (rank < 0 || rank >= g->world)
        return -1;
    rdzv_member_t *m = rdzv_group_member(g, (int) rank);
    if (!m)
        return -1;
    uint64_t before = rdzv_member_text_bytes(m->host, m->node, m->session);
    /* The node's plan entry now, while ranks trickle in, rather than all
     * of them in the release the last rank waits for. */
    int rc = s_set(&m->host, host) < 0 || s_set(&m->node, node) < 0
        || s_set(&m->session, session) < 0
        || !(m->plan_node = rdzv_plans_node(self->plans, node))
        || rdzv_state_host_node(self, host, node) < 0 ? -1 : 0;
    uint64_t after = rdzv_member_text_bytes(m->host, m->node, m->session);
    g->member_bytes += after - before;
    self->member_bytes += after - before;
    if (rc < 0)
        return -1;
    if (epoch == g->epoch && m->epoch < epoch)
        g->joined++;
    m->epoch = epoch;
    return 0;
}

/* A new epoch forgets the old one's ID, KV and completeness; plans stay. */
static int s_apply_epoch(rdzv_state_t *self, rdzv_group_t *g, const rdzv_record_t *rec)
{
    int64_t epoch = rec->u.complete.epoch;
    if (epoch <= g->epoch)
        return -1;
    g->epoch = epoch;
    g->complete = false;
    g->joined = 0;
    const rdzv_member_t *m;
    for (int r = 0; (m = rdzv_group_next(g, &r)); r++)
        g->joined += m->epoch == epoch;
    rdzv_ncclroot_destroy(&g->root);
    g->root_lost = false;
    cJSON_Delete(g->nccl_ids);
    g->nccl_ids = NULL;
    cJSON_Delete(g->rank0_ids);
    g->rank0_ids = NULL;
    for (int i = 0; i < 2; i++)
        rdzv_shared_unref(&g->shared[i]);
    zhashx_purge(g->kv);
    self->kv_bytes -= g->kv_bytes;
    g->kv_bytes = 0;
    return 0;
}

static int s_apply_complete(rdzv_group_t *g, const rdzv_record_t *rec)
{
    if (rec->u.complete.epoch != g->epoch)
        return -1;
    const cJSON *ids = rec->u.complete.nccl_ids;
    cJSON_Delete(g->nccl_ids);
    g->nccl_ids = ids ? cJSON_Duplicate(ids, 1) : cJSON_CreateArray();
    g->complete = true;
    return 0;
}

static int s_apply_plan(rdzv_state_t *self, rdzv_group_t *g, const rdzv_record_t *rec)
{
    int64_t rank = rec->u.plan.rank, start = rec->u.plan.start, count = rec->u.plan.count;
    if (rank < 0 || rank >= g->world || start < 0 || start > 65535 || count <= 0 || count > 65536)
        return -1;
    return rdzv_plans_record(self->plans, rec->u.plan.node, g->name, (int) rank, (int) start,
                             (int) count);
}

/* The node a "plans" record puts block i on: its "nodes" entry (journals
 * written before 2026-11-30 name each), else the rank's node as its join
 * record before this one left it. NULL if neither. */
static const char *s_plans_node(const rdzv_group_t *g, const cJSON *node_item, int rank)
{
    if (node_item)
        return cJSON_IsString(node_item) ? node_item->valuestring : NULL;
    const rdzv_member_t *m = rdzv_group_at(g, rank);
    return m ? m->node : NULL;
}

/* "plans": the blocks one release laid out, as parallel arrays (one record
 * per release rather than one per rank: a 1024-rank release wrote 1024
 * records before). All or nothing. */
static int s_apply_plans(rdzv_state_t *self, rdzv_group_t *g, const rdzv_record_t *rec)
{
    const cJSON *ranks = rec->u.plans.ranks, *nodes = rec->u.plans.nodes;
    const cJSON *starts = rec->u.plans.starts;
    int64_t count = rec->u.plans.count;
    if (count <= 0 || count > 65536)
        return -1;
    int n = cJSON_GetArraySize(ranks);
    const cJSON *r = ranks->child, *nd = nodes ? nodes->child : NULL, *st = starts->child;
    int done = 0, rank = 0, start = 0;
    for (; done < n; done++, r = r->next, nd = nd ? nd->next : NULL, st = st->next) {
        const char *node = NULL;
        if (rdzv_record_int_item(r, 0, g->world - 1, &rank) < 0
            || !(node = s_plans_node(g, nd, rank))
            || rdzv_record_int_item(st, 0, 65535, &start) < 0
            || rdzv_plans_record(self->plans, node, g->name, rank, start, (int) count) < 0)
            break;
    }
    if (done == n)
        return 0;
    for (r = ranks->child, nd = nodes ? nodes->child : NULL; done-- > 0;
         r = r->next, nd = nd ? nd->next : NULL)
        rdzv_plans_forget(self->plans, s_plans_node(g, nd, (int) r->valuedouble), g->name,
                          (int) r->valuedouble);
    return -1;
}

static int s_apply_kv(rdzv_state_t *self, rdzv_group_t *g, const rdzv_record_t *rec)
{
    const char *key = rec->u.kv.key, *value = rec->u.kv.value;
    if (rec->u.kv.epoch != g->epoch)
        return -1;
    size_t len = strlen(value);
    rdzv_shared_t *copy = rdzv_shared_new(value, len);
    if (!copy)
        return -1;
    const rdzv_shared_t *old = zhashx_lookup(g->kv, key);
    uint64_t was = old ? strlen(key) + old->len : 0, now = strlen(key) + len;
    g->kv_bytes += now - was;
    self->kv_bytes += now - was;
    zhashx_update(g->kv, key, copy);
    return 0;
}

/* A rank a resize drops: its strings' bytes go back (its plan blocks go
 * in s_apply_resize, on every node). */
typedef struct {
    rdzv_state_t *state;
    rdzv_group_t *group;
} s_resize_t;

static void s_drop_member(void *arg, const rdzv_member_t *m, int rank)
{
    s_resize_t *c = arg;
    /* Behind a router its engine still serves: it leaves once the router
     * lets it go (group.h). Out of memory it is cut off as without one. */
    int start = c->group->router ? rdzv_plans_find(c->state->plans, m->node, c->group->name, rank)
                                 : -1;
    if (start >= 0)
        (void) rdzv_group_leaving_add(c->group, rank, m->host, start + RDZV_ROLE_API,
                                      m->last_seen_ms);
    uint64_t bytes = rdzv_member_text_bytes(m->host, m->node, m->session);
    c->group->member_bytes -= bytes;
    c->state->member_bytes -= bytes;
}

static bool s_outside(const rdzv_leaving_t *l, void *world)
{
    return l->rank >= *(int *) world;
}

/* A close: the forming epoch ends at the ranks 0..world-1, which all
 * joined it; the ranks past them (members of earlier epochs) go. The
 * epoch stays: its release follows. */
static int s_apply_close(rdzv_state_t *self, rdzv_group_t *g, int world, int64_t epoch)
{
    if (epoch != g->epoch || g->complete || world >= g->world || g->joined != world)
        return -1;
    for (int r = 0; r < world; r++) {
        const rdzv_member_t *m = rdzv_group_at(g, r);
        if (!m || m->epoch != g->epoch)
            return -1;
    }
    int old = g->world;
    s_resize_t ctx = { self, g };
    if (rdzv_group_set_world(g, world, world, s_drop_member, &ctx) < 0)
        return -1;
    rdzv_plans_release_ranks(self->plans, g->name, world);
    self->ranks += world - old;
    rdzv_shared_unref(&g->shared[0]);        /* the world is in the epoch's shared text */
    rdzv_shared_unref(&g->shared[1]);
    g->resized_at = epoch;                   /* its ranks said the world before the close */
    return 0;
}

/* A resize: the world changes and the group moves to the recorded epoch,
 * forming. Ranks below both worlds keep their members and plans (their
 * engines hold those ports) unless it is fresh; ranks at or above the new
 * world go. */
static int s_apply_resize(rdzv_state_t *self, rdzv_group_t *g, const rdzv_record_t *rec)
{
    int64_t world = rec->u.resize.world;
    if (world < 1 || world > self->cfg->max_world)
        return -1;
    if (rec->u.resize.how == RDZV_RESIZE_CLOSE)
        return s_apply_close(self, g, (int) world, rec->u.resize.epoch);
    if (rec->u.resize.epoch <= g->epoch)
        return -1;
    int old = g->world;
    int keep = rec->u.resize.how == RDZV_RESIZE_FRESH ? 0 : (int) world;
    s_resize_t ctx = { self, g };
    if (rdzv_group_set_world(g, (int) world, keep, s_drop_member, &ctx) < 0)
        return -1;
    rdzv_plans_release_ranks(self->plans, g->name, keep);
    rdzv_group_leaving_filter(g, s_outside, &g->world);      /* a grow takes them back */
    self->ranks += world - old;
    rdzv_record_t epoch = { .kind = RDZV_REC_EPOCH, .group = rec->group,
                            .u.complete.epoch = rec->u.resize.epoch };
    if (s_apply_epoch(self, g, &epoch) < 0)
        return -1;
    g->resized_at = rec->u.resize.epoch;
    return 0;
}

static bool s_none(const rdzv_leaving_t *l, void *arg)
{
    (void) l, (void) arg;
    return false;
}

/* A new router: what was found registered at the old one says nothing of
 * the new. A damaged journal's URL is refused like any client's. */
static int s_apply_router(rdzv_group_t *g, const rdzv_record_t *rec)
{
    rdzv_router_url_t url;
    char err[1];
    if (rdzv_router_url_parse(rec->u.router.url, &url, err, sizeof err) < 0
        || s_set(&g->router, rec->u.router.url) < 0)
        return -1;
    rdzv_member_t *m;
    for (int r = 0; (m = rdzv_group_next(g, &r)); r++)
        m->registered = m->draining = false;
    rdzv_group_leaving_filter(g, s_none, NULL);   /* the old router is emptied of the group */
    free(g->router_error);
    g->router_error = NULL;
    return 0;
}

int rdzv_state_apply(void *arg, const cJSON *json)
{
    rdzv_state_t *self = arg;
    rdzv_record_t rec;
    if (rdzv_record_read(json, &rec) < 0)
        return -1;
    if (rec.kind == RDZV_REC_GROUP)
        return s_apply_group(self, &rec);
    rdzv_group_t *g = rdzv_state_group(self, rec.group);
    if (!g)
        return -1;
    switch (rec.kind) {
    case RDZV_REC_GROUP:         /* applied above: it makes the group looked up */
        return -1;
    case RDZV_REC_JOIN: return s_apply_join(self, g, &rec);
    case RDZV_REC_EPOCH: return s_apply_epoch(self, g, &rec);
    case RDZV_REC_COMPLETE: return s_apply_complete(g, &rec);
    case RDZV_REC_PLANS: return s_apply_plans(self, g, &rec);
    case RDZV_REC_PLAN: return s_apply_plan(self, g, &rec);
    case RDZV_REC_KV: return s_apply_kv(self, g, &rec);
    case RDZV_REC_ROOT_DONE:
        if (rec.u.complete.epoch != g->epoch || !g->complete)
            return -1;
        g->root_done_epoch = rec.u.complete.epoch;
        g->root_retired = rec.u.complete.retired;
        return 0;
    case RDZV_REC_DELETE:
        rdzv_state_remove_group(self, rec.group);
        return 0;
    case RDZV_REC_ROUTER: return s_apply_router(g, &rec);
    case RDZV_REC_RESIZE: return s_apply_resize(self, g, &rec);
    }
    return -1;                   /* no kind: rdzv_record_read refuses it */
}
