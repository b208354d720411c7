#include "plan.h"

#include <czmq.h>
#include <stdlib.h>
#include <string.h>

/* A group's name, shared by all its blocks: a release of N ranks then
 * copies the name once, not N times. */
typedef struct {
    int refs;
    char name[];
} s_name_t;

typedef struct {
    int start;
    int count;
    int rank;
    s_name_t *group;
} s_block_t;

/* One node's blocks, kept sorted by start so a first-fit scan is one pass. */
struct rdzv_plan_node {
    s_block_t *blocks;
    size_t n, cap;
};
typedef rdzv_plan_node_t s_node_t;

/* Room a new node gets for blocks: most nodes hold one rank's. */
#define S_NODE_SLOTS 2

struct rdzv_plans {
    int base, per_rank, limit;
    zhashx_t *nodes;            /* node name -> s_node_t */
    zhashx_t *names;            /* group name -> s_name_t */
    s_name_t *last;             /* the name used last: a release asks for it N times */
};

static void s_node_destroy(void **item)
{
    s_node_t *node = *item;
    if (!node)
        return;
    free(node->blocks);
    free(node);
    *item = NULL;
}

static s_name_t *s_name_ref(rdzv_plans_t *self, const char *group)
{
    s_name_t *g = self->last && streq(self->last->name, group) ? self->last
                                                              : zhashx_lookup(self->names, group);
    if (!g) {
        size_t len = strlen(group);
        g = malloc(sizeof *g + len + 1);
        if (!g)
            return NULL;
        g->refs = 0;
        memcpy(g->name, group, len + 1);
        zhashx_insert(self->names, group, g);
    }
    g->refs++;
    self->last = g;
    return g;
}

static void s_name_unref(rdzv_plans_t *self, s_name_t *g)
{
    if (--g->refs > 0)
        return;
    if (self->last == g)
        self->last = NULL;
    zhashx_delete(self->names, g->name);      /* frees g (destructor) */
}

static void s_name_destroy(void **item)
{
    free(*item);
    *item = NULL;
}

rdzv_plans_t *rdzv_plans_new(int port_base, int ports_per_rank, int port_limit)
{
    if (port_base <= 0 || ports_per_rank <= 0 || port_limit > 65536
        || port_base + ports_per_rank > port_limit)
        return NULL;
    rdzv_plans_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->base = port_base;
    self->per_rank = ports_per_rank;
    self->limit = port_limit;
    self->nodes = zhashx_new();
    self->names = zhashx_new();
    zhashx_set_destructor(self->nodes, s_node_destroy);
    zhashx_set_destructor(self->names, s_name_destroy);
    return self;
}

void rdzv_plans_destroy(rdzv_plans_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zhashx_destroy(&(*self_p)->nodes);
    zhashx_destroy(&(*self_p)->names);
    free(*self_p);
    *self_p = NULL;
}

int rdzv_plans_ports_per_rank(const rdzv_plans_t *self)
{
    return self->per_rank;
}

int rdzv_plans_find(const rdzv_plans_t *self, const char *node,
                    const char *group, int rank)
{
    s_node_t *n = zhashx_lookup(self->nodes, node);
    for (size_t i = 0; n && i < n->n; i++)
        if (n->blocks[i].rank == rank && streq(n->blocks[i].group->name, group))
            return n->blocks[i].start;
    return -1;
}

/* The lowest free block of node n (NULL: no blocks yet), or -1. */
static int s_first_free(const rdzv_plans_t *self, const s_node_t *n)
{
    int candidate = self->base;
    for (size_t i = 0; n && i < n->n; i++) {
        const s_block_t *b = &n->blocks[i];
        if (candidate + self->per_rank <= b->start)
            break;
        int end = b->start + b->count;
        if (end > candidate) {
            /* Stay aligned to the plan grid so blocks line up across nodes. */
            int off = end - self->base;
            candidate = self->base + (off + self->per_rank - 1) / self->per_rank * self->per_rank;
        }
    }
    return candidate + self->per_rank <= self->limit ? candidate : -1;
}

int rdzv_plans_first_free(const rdzv_plans_t *self, const char *node)
{
    return s_first_free(self, zhashx_lookup(self->nodes, node));
}

static s_node_t *s_node_require(rdzv_plans_t *self, const char *node)
{
    s_node_t *n = zhashx_lookup(self->nodes, node);
    if (!n) {
        n = calloc(1, sizeof *n);
        if (!n)
            return NULL;
        n->blocks = malloc(S_NODE_SLOTS * sizeof *n->blocks);
        n->cap = n->blocks ? S_NODE_SLOTS : 0;
        zhashx_insert(self->nodes, node, n);
    }
    return n;
}

static int s_insert(rdzv_plans_t *self, s_node_t *n, const char *group, int rank,
                    int start, int count)
{
    if (start < self->base || count <= 0 || start + count > self->limit)
        return -1;
    size_t at = 0;
    for (; at < n->n && n->blocks[at].start < start; at++)
        ;
    bool overlaps_prev = at > 0 && n->blocks[at - 1].start + n->blocks[at - 1].count > start;
    bool overlaps_next = at < n->n && start + count > n->blocks[at].start;
    if (overlaps_prev || overlaps_next)
        return -1;
    if (n->n == n->cap) {
        size_t cap = n->cap ? n->cap * 2 : 8;
        s_block_t *grown = realloc(n->blocks, cap * sizeof *grown);
        if (!grown)
            return -1;
        n->blocks = grown;
        n->cap = cap;
    }
    s_name_t *owner = s_name_ref(self, group);
    if (!owner)
        return -1;
    memmove(&n->blocks[at + 1], &n->blocks[at], (n->n - at) * sizeof *n->blocks);
    n->blocks[at] = (s_block_t) { .start = start, .count = count, .rank = rank, .group = owner };
    n->n++;
    return 0;
}

rdzv_plan_node_t *rdzv_plans_node(rdzv_plans_t *self, const char *node)
{
    return s_node_require(self, node);
}

int rdzv_plans_record(rdzv_plans_t *self, const char *node, const char *group,
                      int rank, int start, int count)
{
    s_node_t *n = s_node_require(self, node);
    return n ? s_insert(self, n, group, rank, start, count) : -1;
}

void rdzv_plans_prefetch(const rdzv_plan_node_t *n, bool blocks)
{
    if (!n)
        return;
    if (blocks)
        __builtin_prefetch(n->blocks, 1);
    else
        __builtin_prefetch(n, 0);
}

int rdzv_plans_place(rdzv_plans_t *self, rdzv_plan_node_t *n, const char *group, int rank,
                     bool *placed)
{
    *placed = false;
    for (size_t i = 0; i < n->n; i++)
        if (n->blocks[i].rank == rank && streq(n->blocks[i].group->name, group))
            return n->blocks[i].start;
    int start = s_first_free(self, n);
    if (start < 0)
        return -1;
    if (s_insert(self, n, group, rank, start, self->per_rank) < 0)
        return -2;
    *placed = true;
    return start;
}

int rdzv_plans_release_group(rdzv_plans_t *self, const char *group)
{
    int released = 0;
    for (s_node_t *n = zhashx_first(self->nodes); n; n = zhashx_next(self->nodes)) {
        size_t kept = 0;
        for (size_t i = 0; i < n->n; i++) {
            if (streq(n->blocks[i].group->name, group)) {
                s_name_unref(self, n->blocks[i].group);
                released++;
            } else
                n->blocks[kept++] = n->blocks[i];
        }
        n->n = kept;
    }
    return released;
}

int rdzv_plans_release_ranks(rdzv_plans_t *self, const char *group, int first)
{
    int released = 0;
    for (s_node_t *n = zhashx_first(self->nodes); n; n = zhashx_next(self->nodes)) {
        size_t kept = 0;
        for (size_t i = 0; i < n->n; i++) {
            if (n->blocks[i].rank >= first && streq(n->blocks[i].group->name, group)) {
                s_name_unref(self, n->blocks[i].group);
                released++;
            } else
                n->blocks[kept++] = n->blocks[i];
        }
        n->n = kept;
    }
    return released;
}

void rdzv_plans_forget(rdzv_plans_t *self, const char *node, const char *group, int rank)
{
    s_node_t *n = zhashx_lookup(self->nodes, node);
    for (size_t i = 0; n && i < n->n; i++) {
        if (n->blocks[i].rank == rank && streq(n->blocks[i].group->name, group)) {
            s_name_unref(self, n->blocks[i].group);
            memmove(&n->blocks[i], &n->blocks[i + 1], (n->n - i - 1) * sizeof *n->blocks);
            n->n--;
            return;
        }
    }
}

void rdzv_plans_foreach(const rdzv_plans_t *self, const char *group, rdzv_plans_fn *fn, void *arg)
{
    zlistx_t *names = zhashx_keys(self->nodes);
    for (const char *name = zlistx_first(names); name; name = zlistx_next(names)) {
        const s_node_t *n = zhashx_lookup(self->nodes, name);
        for (size_t i = 0; i < n->n; i++)
            if (streq(n->blocks[i].group->name, group))
                fn(arg, name, n->blocks[i].rank, n->blocks[i].start, n->blocks[i].count);
    }
    zlistx_destroy(&names);
}

const char *rdzv_plans_overlap(const rdzv_plans_t *self, const char *node, const char *group,
                               int start, int count, int *rank)
{
    const s_node_t *n = zhashx_lookup(self->nodes, node);
    for (size_t i = 0; n && i < n->n && n->blocks[i].start < start + count; i++) {
        const s_block_t *b = &n->blocks[i];
        if (b->start + b->count > start && !streq(b->group->name, group)) {
            *rank = b->rank;
            return b->group->name;
        }
    }
    return NULL;
}

bool rdzv_plans_has_other(const rdzv_plans_t *self, const char *node, const char *group)
{
    const s_node_t *n = zhashx_lookup(self->nodes, node);
    for (size_t i = 0; n && i < n->n; i++)
        if (!streq(n->blocks[i].group->name, group))
            return true;
    return false;
}

int rdzv_plans_count(const rdzv_plans_t *self, const char *node)
{
    s_node_t *n = zhashx_lookup(self->nodes, node);
    return n ? (int) n->n : 0;
}
