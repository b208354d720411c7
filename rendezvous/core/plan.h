/* Port plans: which block of ports each (group, rank) holds on a node.
 * Blocks on one node never overlap; different nodes are separate network
 * namespaces and may reuse numbers. Pure bookkeeping, no I/O. */
#ifndef RDZV_PLAN_H
#define RDZV_PLAN_H

#include <stdbool.h>

typedef struct rdzv_plans rdzv_plans_t;
/* One node's entry: made once, kept as long as the plans. */
typedef struct rdzv_plan_node rdzv_plan_node_t;

rdzv_plans_t *rdzv_plans_new(int port_base, int ports_per_rank, int port_limit);
void rdzv_plans_destroy(rdzv_plans_t **self_p);

int rdzv_plans_ports_per_rank(const rdzv_plans_t *self);

/* node's entry, made (without blocks) if new; NULL out of memory. Ranks
 * keep it from their join, so a release looks up no node by name. */
rdzv_plan_node_t *rdzv_plans_node(rdzv_plans_t *self, const char *node);
/* Start of the block recorded for (group, rank, node), or -1. */
int rdzv_plans_find(const rdzv_plans_t *self, const char *node,
                    const char *group, int rank);
/* Lowest free block of the configured size on node; -1 if none is free.
 * Does not record it. */
int rdzv_plans_first_free(const rdzv_plans_t *self, const char *node);
/* Records [start, start+count) for (group, rank) on node. Returns 0, or -1
 * if the block leaves the managed range or overlaps another owner's block
 * (replay of a journal written with other settings). */
int rdzv_plans_record(rdzv_plans_t *self, const char *node, const char *group,
                      int rank, int start, int count);
/* The block of (group, rank) on node: the one recorded, else the lowest
 * free one, recorded now (*placed true). Start, -1 if no block is free,
 * -2 out of memory. */
int rdzv_plans_place(rdzv_plans_t *self, rdzv_plan_node_t *node, const char *group, int rank,
                     bool *placed);
/* Asks the CPU to fetch node's entry (blocks false) or, once that is in,
 * its blocks: a release places every rank of a group in turn, and each
 * rank's node was written by whichever shard thread took its join. */
void rdzv_plans_prefetch(const rdzv_plan_node_t *node, bool blocks);
/* Frees every block of group on every node; returns how many. */
int rdzv_plans_release_group(rdzv_plans_t *self, const char *group);
/* The same for group's ranks first and above only, on every node (a rank
 * that moved node keeps a block on the old one too): a shrink. */
int rdzv_plans_release_ranks(rdzv_plans_t *self, const char *group, int first);
/* Drops the block of (group, rank) on node, if any: undoes a record. */
void rdzv_plans_forget(rdzv_plans_t *self, const char *node, const char *group, int rank);
/* Calls fn for every block of group, on every node (node valid during the call only). */
typedef void (rdzv_plans_fn)(void *arg, const char *node, int rank, int start, int count);
void rdzv_plans_foreach(const rdzv_plans_t *self, const char *group, rdzv_plans_fn *fn, void *arg);
/* A block on node, of a group other than group, that overlaps [start,
 * start+count): that group's name (valid until the plans change) and
 * *rank its rank; NULL if none. */
const char *rdzv_plans_overlap(const rdzv_plans_t *self, const char *node, const char *group,
                               int start, int count, int *rank);
/* Whether node holds a block of a group other than group. */
bool rdzv_plans_has_other(const rdzv_plans_t *self, const char *node, const char *group);
/* Number of blocks recorded on node. */
int rdzv_plans_count(const rdzv_plans_t *self, const char *node);

#endif
