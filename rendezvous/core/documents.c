/* The assignment and status documents, built from a group's state. */
#include "documents.h"

#include "rdzv_proto.h"

#include <stdlib.h>
#include <string.h>

/* nccl_unique_id is the first ID (or null), nccl_unique_ids all of them. */
static void s_add_ids(cJSON *obj, const rdzv_group_t *g)
{
    const cJSON *first = g->nccl_ids ? cJSON_GetArrayItem(g->nccl_ids, 0) : NULL;
    if (first)
        cJSON_AddStringToObject(obj, "nccl_unique_id", first->valuestring);
    else
        cJSON_AddNullToObject(obj, "nccl_unique_id");
    cJSON_AddItemToObject(obj, "nccl_unique_ids",
                          g->nccl_ids ? cJSON_Duplicate(g->nccl_ids, 1) : cJSON_CreateArray());
}

static int s_port_start(const rdzv_state_t *st, const rdzv_group_t *g, int rank)
{
    return rdzv_plans_find(st->plans, rdzv_group_at(g, rank)->node, g->name, rank);
}

static cJSON *s_members(const rdzv_state_t *st, const rdzv_group_t *g, bool with_ports,
                        int64_t now_ms)
{
    cJSON *members = cJSON_CreateArray();
    const rdzv_member_t *m;
    for (int r = 0; (m = rdzv_group_next(g, &r)); r++) {
        cJSON *item = cJSON_CreateObject();
        cJSON_AddNumberToObject(item, "rank", r);
        cJSON_AddStringToObject(item, "host", m->host);
        cJSON_AddStringToObject(item, "node", m->node);
        if (with_ports) {
            int start = s_port_start(st, g, r);
            if (start >= 0) {
                int range[2] = { start, start + rdzv_plans_ports_per_rank(st->plans) - 1 };
                cJSON_AddItemToObject(item, "ports", cJSON_CreateIntArray(range, 2));
            } else
                cJSON_AddNullToObject(item, "ports");
            cJSON_AddNumberToObject(item, "epoch", (double) m->epoch);
            cJSON_AddBoolToObject(item, "alive", rdzv_member_alive(st, m, now_ms));
            cJSON_AddNumberToObject(item, "last_seen_s",
                                    (double) ((now_ms - rdzv_member_seen(st, m)) / 1000));
            if (m->health == RDZV_HEALTH_UNKNOWN)
                cJSON_AddNullToObject(item, "serving");
            else
                cJSON_AddBoolToObject(item, "serving", m->health == RDZV_HEALTH_SERVING);
            cJSON_AddBoolToObject(item, "registered", g->router && m->registered);
            cJSON_AddBoolToObject(item, "draining", g->router && m->draining);
        }
        cJSON_AddItemToArray(members, item);
    }
    return members;
}

/* The fields every rank of g's complete epoch shares, as JSON object
 * members without braces: built with cJSON once per epoch (and members
 * variant) and kept in g; NULL out of memory. */
static rdzv_shared_t *s_shared(const rdzv_state_t *st, rdzv_group_t *g, bool with_members)
{
    rdzv_shared_t **slot = &g->shared[with_members];
    if (*slot)
        return *slot;
    cJSON *a = cJSON_CreateObject();
    cJSON_AddStringToObject(a, "group", g->name);
    cJSON_AddNumberToObject(a, "epoch", (double) g->epoch);
    cJSON_AddNumberToObject(a, "world", g->world);
    cJSON_AddStringToObject(a, "master_addr", rdzv_group_at(g, 0)->host);
    cJSON_AddNumberToObject(a, "master_port", s_port_start(st, g, 0)
                                              + rdzv_role_shift(rdzv_plans_ports_per_rank(st->plans),
                                                                g->epoch));
    int range[2] = { st->cfg->port_base, st->cfg->port_limit };
    cJSON_AddItemToObject(a, "port_range", cJSON_CreateIntArray(range, 2));
    s_add_ids(a, g);
    if (with_members)
        cJSON_AddItemToObject(a, "members", s_members(st, g, false, 0));
    char *text = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    if (!text)
        return NULL;
    /* Without the outer braces the text splices into each rank's object. */
    *slot = rdzv_shared_new(text + 1, strlen(text) - 2);
    free(text);
    return *slot;
}

/* The parts of rank's assignment, but its peer and text. */
rdzv_reply_t rdzv_assignment_parts(const rdzv_state_t *st, rdzv_group_t *g, int rank,
                                   int first_port, int role_port,
                                   const rdzv_local_t *local, bool with_members)
{
    return (rdzv_reply_t) { .rank = rank, .first_port = first_port,
                            .ports = rdzv_plans_ports_per_rank(st->plans),
                            .role_port = role_port
                                         + rdzv_role_shift(rdzv_plans_ports_per_rank(st->plans),
                                                           g->epoch),
                            .local_rank = local->local_rank, .local_world = local->local_world,
                            .group_rank = local->group_rank, .group_world = local->group_world,
                            .shared = s_shared(st, g, with_members) };
}

char *rdzv_assignment_text(const rdzv_state_t *st, rdzv_group_t *g, int rank, int64_t req_id,
                           bool with_members)
{
    rdzv_local_t *local = rdzv_group_local_ranks(g);
    if (!local)
        return NULL;
    rdzv_reply_t reply = rdzv_assignment_parts(st, g, rank, s_port_start(st, g, rank),
                                               s_port_start(st, g, 0), &local[rank],
                                               with_members);
    free(local);
    reply.peer.req = req_id;
    reply.shared = rdzv_shared_ref(reply.shared);
    if (!reply.shared || rdzv_reply_render(&reply) < 0) {
        rdzv_reply_clear(&reply);
        return NULL;
    }
    return reply.text;
}

#define S_OVERLAPS_SHOWN 8

/* The nodes of host that hold ports of a group other than g: the only ones
 * an overlap can be with. Listed once per host and call (cache: host ->
 * list), so that the check costs the group's ranks plus the host's nodes,
 * not their product: 16384 ranks on as many node names of one loopback
 * address took 25-30 s under the core's lock when every rank looked at
 * every node. NULL out of memory. */
static zlistx_t *s_foreign_nodes(const rdzv_state_t *st, const rdzv_group_t *g, zhashx_t *cache,
                                 const char *host)
{
    zlistx_t *list = zhashx_lookup(cache, host);
    if (list)
        return list;
    if (!(list = zlistx_new()))
        return NULL;
    zhashx_t *nodes = zhashx_lookup(st->host_nodes, host);
    for (void *it = nodes ? zhashx_first(nodes) : NULL; it; it = zhashx_next(nodes)) {
        const char *n = zhashx_cursor(nodes);
        if (rdzv_plans_has_other(st->plans, n, g->name))
            zlistx_add_end(list, (void *) n);
    }
    zhashx_insert(cache, host, list);
    return list;
}

/* The other node, first by name, among foreign (m's address's nodes with
 * another group's ports) that holds ports of [start, start + count) for
 * another group; NULL if none. */
static const char *s_overlapping_node(const rdzv_state_t *st, const rdzv_group_t *g,
                                      const rdzv_member_t *m, int start, int count,
                                      zlistx_t *foreign, const char **group, int *rank)
{
    const char *best = NULL;
    for (const char *n = zlistx_first(foreign); n; n = zlistx_next(foreign)) {
        int r = -1;
        const char *other = strcmp(n, m->node) == 0 || (best && strcmp(n, best) >= 0)
                            ? NULL : rdzv_plans_overlap(st->plans, n, g->name, start, count, &r);
        if (other) {
            best = n;
            *group = other;
            *rank = r;
        }
    }
    return best;
}

static void s_add_overlap(cJSON **out, int r, const rdzv_member_t *m, const char *node,
                          const char *group, int rank)
{
    if (!*out)
        *out = cJSON_CreateArray();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "rank", r);
    cJSON_AddStringToObject(o, "host", m->host);
    cJSON_AddStringToObject(o, "node", m->node);
    cJSON_AddStringToObject(o, "other_node", node);
    cJSON_AddStringToObject(o, "other_group", group);
    cJSON_AddNumberToObject(o, "other_rank", rank);
    cJSON_AddItemToArray(*out, o);
}

cJSON *rdzv_status_overlaps(const rdzv_state_t *st, const rdzv_group_t *g)
{
    if (!st->shared_hosts || !g->complete)
        return NULL;             /* the usual case: one node per address */
    zhashx_t *cache = zhashx_new();
    if (!cache)
        return NULL;
    zhashx_set_destructor(cache, (zhashx_destructor_fn *) zlistx_destroy);
    int count = rdzv_plans_ports_per_rank(st->plans);
    cJSON *out = NULL;
    const rdzv_member_t *m;
    for (int r = 0; (m = rdzv_group_next(g, &r)) && cJSON_GetArraySize(out) < S_OVERLAPS_SHOWN;
         r++) {
        zhashx_t *nodes = zhashx_lookup(st->host_nodes, m->host);
        zlistx_t *foreign = nodes && zhashx_size(nodes) > 1
                            ? s_foreign_nodes(st, g, cache, m->host) : NULL;
        if (!foreign || zlistx_size(foreign) == 0)
            continue;
        int start = s_port_start(st, g, r);
        const char *group = NULL;
        int rank = -1;
        const char *node = start < 0 ? NULL : s_overlapping_node(st, g, m, start, count,
                                                                 foreign, &group, &rank);
        if (node)
            s_add_overlap(&out, r, m, node, group, rank);
    }
    zhashx_destroy(&cache);
    return out;
}

/* Where a complete epoch's server-made root stands: a helper serves it,
 * every rank reached it, it was retired with ranks still to come, or it
 * died with an earlier rdzvd first. */
static const char *s_root_state(const rdzv_group_t *g)
{
    if (g->root)
        return "serving";
    if (g->root_lost)
        return "lost";
    return g->root_retired && g->root_done_epoch == g->epoch ? "retired" : "done";
}

/* The group's serving state (docs/protocol.md, "status"): forming until
 * its epoch is complete; then serving when every rank is alive and its
 * engine answers, degraded when a rank is dead or its engine stopped
 * answering after it had served, complete (assigned, engines starting)
 * otherwise; and the ranks that do not serve, at most
 * RDZV_STATUS_MISSING_MAX of them. */
static void s_add_serving(const rdzv_state_t *st, const rdzv_group_t *g, cJSON *item,
                          int64_t now_ms)
{
    rdzv_serving_t s = rdzv_state_serving(st, g, now_ms);
    cJSON *down = cJSON_CreateArray();
    const rdzv_member_t *m;
    for (int r = 0; (m = rdzv_group_next(g, &r)) && g->complete; r++)
        if ((!rdzv_member_alive(st, m, now_ms) || m->health != RDZV_HEALTH_SERVING)
            && cJSON_GetArraySize(down) < RDZV_STATUS_MISSING_MAX)
            cJSON_AddItemToArray(down, cJSON_CreateNumber(r));
    static const char *const names[] = { "forming", "complete", "serving", "degraded" };
    cJSON_AddStringToObject(item, "state", names[s.state]);
    cJSON_AddNumberToObject(item, "live_count", s.live);
    cJSON_AddNumberToObject(item, "serving_count", s.serving);
    cJSON_AddItemToObject(item, "not_serving", down);
}

/* The group's router, null for none; what the last reconcile with it said
 * (null: it went through); and how many ranks it lists as ready. */
static void s_add_router(const rdzv_group_t *g, cJSON *item)
{
    int registered = 0;
    const rdzv_member_t *m;
    for (int r = 0; (m = rdzv_group_next(g, &r)) && g->router; r++)
        registered += m->registered;
    if (g->router)
        cJSON_AddStringToObject(item, "router", g->router);
    else
        cJSON_AddNullToObject(item, "router");
    if (g->router_error)
        cJSON_AddStringToObject(item, "router_error", g->router_error);
    else
        cJSON_AddNullToObject(item, "router_error");
    cJSON_AddNumberToObject(item, "registered_count", registered);
}

/* The ranks a shrink dropped that the router may still list (group.h):
 * each with its API's address, whether its agent is heard from, and
 * whether it is still listed (true until a reconcile has looked). */
static void s_add_leaving(const rdzv_state_t *st, const rdzv_group_t *g, cJSON *item,
                          int64_t now_ms)
{
    cJSON *leaving = cJSON_AddArrayToObject(item, "leaving");
    for (int i = 0; i < g->nleaving; i++) {
        const rdzv_leaving_t *l = &g->leaving[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", l->rank);
        cJSON_AddStringToObject(o, "host", l->host);
        cJSON_AddNumberToObject(o, "api_port", l->api_port);
        int64_t seen = l->heard_ms > st->loaded_ms ? l->heard_ms : st->loaded_ms;
        cJSON_AddBoolToObject(o, "alive", now_ms - seen < st->cfg->dead_after_ms);
        cJSON_AddBoolToObject(o, "registered", !l->looked || l->registered);
        cJSON_AddItemToArray(leaving, o);
    }
}

static cJSON *s_status(const rdzv_state_t *st, rdzv_group_t *g, int64_t now_ms)
{
    cJSON *item = cJSON_CreateObject();
    cJSON_AddStringToObject(item, "group", g->name);
    cJSON_AddNumberToObject(item, "world", g->world);
    cJSON_AddNumberToObject(item, "epoch", (double) g->epoch);
    cJSON_AddBoolToObject(item, "complete", g->complete);
    cJSON *joined = cJSON_AddArrayToObject(item, "joined");
    const rdzv_member_t *m;
    int64_t first_join = 0;
    for (int r = 0; (m = rdzv_group_next(g, &r)); r++)
        if (m->epoch == g->epoch) {
            cJSON_AddItemToArray(joined, cJSON_CreateNumber(r));
            if (m->joined_at_ms > 0 && (!first_join || m->joined_at_ms < first_join))
                first_join = m->joined_at_ms;
        }
    cJSON_AddNumberToObject(item, "missing_count", g->world - g->joined);
    cJSON_AddItemToObject(item, "missing", rdzv_group_missing(g, RDZV_STATUS_MISSING_MAX));
    s_add_serving(st, g, item, now_ms);
    s_add_router(g, item);
    s_add_leaving(st, g, item, now_ms);
    /* Since this epoch's first join, as this rdzvd saw it (none after a
     * restart until a rank joins again). */
    if (first_join)
        cJSON_AddNumberToObject(item, "age_s", (double) ((now_ms - first_join) / 1000));
    cJSON_AddStringToObject(item, "nccl_mode", rdzv_nccl_mode_name(g->nccl_mode));
    if (g->nccl_mode == RDZV_NCCL_SERVER && g->complete)
        cJSON_AddStringToObject(item, "nccl_root", s_root_state(g));
    s_add_ids(item, g);
    cJSON *overlaps = rdzv_status_overlaps(st, g);
    if (overlaps)
        cJSON_AddItemToObject(item, "plan_overlaps", overlaps);
    cJSON_AddItemToObject(item, "members", s_members(st, g, true, now_ms));
    return item;
}

cJSON *rdzv_state_routed(const rdzv_state_t *st, int64_t now_ms)
{
    cJSON *groups = cJSON_CreateArray();
    for (rdzv_group_t *g = zhashx_first(st->groups); g; g = zhashx_next(st->groups))
        if (g->router)
            cJSON_AddItemToArray(groups, s_status(st, g, now_ms));
    return groups;
}

cJSON *rdzv_state_status(const rdzv_state_t *st, const char *group, int64_t now_ms)
{
    cJSON *groups = cJSON_CreateArray();
    if (group) {
        rdzv_group_t *g = rdzv_state_group(st, group);
        if (g)
            cJSON_AddItemToArray(groups, s_status(st, g, now_ms));
    } else {
        for (rdzv_group_t *g = zhashx_first(st->groups); g; g = zhashx_next(st->groups))
            cJSON_AddItemToArray(groups, s_status(st, g, now_ms));
    }
    return groups;
}
