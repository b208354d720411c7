/* The state's groups and members: made, looked up, freed. */
#include "state.h"

#include <stdlib.h>
#include <string.h>

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

static void s_free_value(void **item)
{
    rdzv_shared_unref((rdzv_shared_t **) item);
}

static void s_group_free(void **item)
{
    rdzv_group_t *g = *item;
    if (!g)
        return;
    for (int c = 0; g->member_chunks && c * RDZV_MEMBER_CHUNK < g->world; c++) {
        rdzv_member_t *chunk = g->member_chunks[c];
        for (int i = 0; chunk && i < RDZV_MEMBER_CHUNK && c * RDZV_MEMBER_CHUNK + i < g->world; i++)
            s_member_clear(&chunk[i]);
        free(chunk);
    }
    free(g->member_chunks);
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

static rdzv_group_t *s_group_new(const char *name, int world, rdzv_nccl_mode_t mode, int count)
{
    rdzv_group_t *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->name = strdup(name);
    g->world = world;
    g->epoch = 1;
    g->nccl_mode = mode;
    g->nccl_count = count;
    g->member_chunks = calloc((size_t) (world + RDZV_MEMBER_CHUNK - 1) / RDZV_MEMBER_CHUNK,
                              sizeof *g->member_chunks);
    g->kv = zhashx_new();
    zhashx_set_destructor(g->kv, s_free_value);
    g->kv_waiters = zlistx_new();
    zlistx_set_destructor(g->kv_waiters, s_kv_waiter_free);
    if (!g->name || !g->member_chunks || !g->kv || !g->kv_waiters) {
        void *item = g;
        s_group_free(&item);
        return NULL;
    }
    return g;
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
    rdzv_group_t *g = s_group_new(name, world, mode, nccl_count);
    if (g && zhashx_insert(self->groups, name, g) != 0) {
        void *item = g;
        s_group_free(&item);
        g = NULL;
    }
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

const char *rdzv_group_kv(const rdzv_group_t *g, const char *key)
{
    const rdzv_shared_t *v = zhashx_lookup(g->kv, key);
    return v ? v->text : NULL;
}

rdzv_member_t *rdzv_group_member(rdzv_group_t *g, int rank)
{
    int c = rank / RDZV_MEMBER_CHUNK;
    if (!g->member_chunks[c]) {
        int n = g->world - c * RDZV_MEMBER_CHUNK;
        g->member_chunks[c] = calloc((size_t) (n < RDZV_MEMBER_CHUNK ? n : RDZV_MEMBER_CHUNK),
                                     sizeof **g->member_chunks);
        if (!g->member_chunks[c])
            return NULL;
    }
    return &g->member_chunks[c][rank % RDZV_MEMBER_CHUNK];
}

rdzv_member_t *rdzv_group_next(const rdzv_group_t *g, int *r)
{
    while (*r < g->world) {
        rdzv_member_t *chunk = g->member_chunks[*r / RDZV_MEMBER_CHUNK];
        if (!chunk) {
            *r = (*r / RDZV_MEMBER_CHUNK + 1) * RDZV_MEMBER_CHUNK;
            continue;
        }
        rdzv_member_t *m = &chunk[*r % RDZV_MEMBER_CHUNK];
        if (m->session)
            return m;
        (*r)++;
    }
    return NULL;
}

static uint64_t s_text_bytes(const char *s)
{
    return s ? 16 + ((strlen(s) + 1 + 15) & ~(size_t) 15) : 0;
}

uint64_t rdzv_member_text_bytes(const char *host, const char *node, const char *session)
{
    return s_text_bytes(host) + s_text_bytes(node) + s_text_bytes(session);
}
