/* The state's set of groups (each one's insides are group.c's), the
 * nodes of each host address, and what all groups hold together. */
#include "state.h"

#include <stdlib.h>
#include <string.h>

static void s_group_free(void **item)
{
    rdzv_group_t *g = *item;
    rdzv_group_destroy(&g);
    *item = NULL;
}

static void s_set_free(void **item)
{
    zhashx_destroy((zhashx_t **) item);
}

/* Joins of 16384 ranks from one address (a loopback benchmark) look the
 * node up 16384 times: a set, not a list. */
int rdzv_state_host_node(rdzv_state_t *self, const char *host, const char *node)
{
    zhashx_t *nodes = zhashx_lookup(self->host_nodes, host);
    if (!nodes) {
        if (!(nodes = zhashx_new()) || zhashx_insert(self->host_nodes, host, nodes) != 0) {
            zhashx_destroy(&nodes);
            return -1;
        }
    }
    if (zhashx_lookup(nodes, node))
        return 0;
    /* The value is only there to be non-NULL. */
    if (zhashx_insert(nodes, node, (void *) "") != 0)
        return -1;
    self->shared_hosts += zhashx_size(nodes) == 2;
    return 0;
}

int rdzv_state_init(rdzv_state_t *self, const rdzv_config_t *cfg)
{
    *self = (rdzv_state_t) { .cfg = cfg };
    self->groups = zhashx_new();
    self->host_nodes = zhashx_new();
    self->plans = rdzv_plans_new(cfg->port_base, cfg->ports_per_rank, cfg->port_limit);
    if (!self->groups || !self->plans || !self->host_nodes) {
        rdzv_state_clear(self);
        return -1;
    }
    zhashx_set_destructor(self->groups, s_group_free);
    zhashx_set_destructor(self->host_nodes, s_set_free);
    return 0;
}

void rdzv_state_clear(rdzv_state_t *self)
{
    zhashx_destroy(&self->host_nodes);
    zhashx_destroy(&self->groups);
    rdzv_plans_destroy(&self->plans);
}

rdzv_group_t *rdzv_state_group(const rdzv_state_t *self, const char *name)
{
    return zhashx_lookup(self->groups, name);
}

rdzv_group_t *rdzv_state_add_group(rdzv_state_t *self, const char *name, int world,
                                   rdzv_nccl_mode_t mode, int nccl_count)
{
    if (rdzv_state_group(self, name))
        return NULL;
    rdzv_group_t *g = rdzv_group_new(name, world, mode, nccl_count);
    if (g && zhashx_insert(self->groups, name, g) != 0)
        rdzv_group_destroy(&g);
    if (g)
        self->ranks += world;
    return g;
}

void rdzv_state_remove_group(rdzv_state_t *self, const char *name)
{
    const rdzv_group_t *g = rdzv_state_group(self, name);
    if (g) {
        self->kv_bytes -= g->kv_bytes;
        self->ranks -= g->world;
        self->member_bytes -= g->member_bytes;
    }
    rdzv_plans_release_group(self->plans, name);
    zhashx_delete(self->groups, name);
}

int rdzv_state_pending(const rdzv_state_t *self)
{
    size_t n = 0;
    for (rdzv_group_t *g = zhashx_first(self->groups); g; g = zhashx_next(self->groups))
        n += (size_t) g->waiting + zlistx_size(g->kv_waiters);
    return (int) n;
}

static uint64_t s_text_bytes(const char *s)
{
    return s ? 16 + ((strlen(s) + 1 + 15) & ~(size_t) 15) : 0;
}

uint64_t rdzv_member_text_bytes(const char *host, const char *node, const char *session)
{
    return s_text_bytes(host) + s_text_bytes(node) + s_text_bytes(session);
}

rdzv_serving_t rdzv_state_serving(const rdzv_state_t *st, const rdzv_group_t *g,
                                  int64_t now_ms)
{
    rdzv_serving_t s = { .state = g->complete ? RDZV_GROUP_COMPLETE : RDZV_GROUP_FORMING };
    if (!g->complete)
        return s;
    bool lost = false;
    const rdzv_member_t *m;
    for (int r = 0; (m = rdzv_group_next(g, &r)); r++) {
        bool alive = rdzv_member_alive(st, m, now_ms);
        s.live += alive;
        s.serving += alive && m->health == RDZV_HEALTH_SERVING;
        /* A dead rank, or an engine that stopped answering after it had
         * served; one that has not answered yet is still starting. */
        lost = lost || !alive || (m->served && m->health != RDZV_HEALTH_SERVING);
    }
    s.state = lost ? RDZV_GROUP_DEGRADED
              : s.serving == g->world ? RDZV_GROUP_SERVING : RDZV_GROUP_COMPLETE;
    return s;
}
