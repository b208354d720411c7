/* What a group looks like from outside: a rank's assignment and the status
 * document, built from the state alone. */
#ifndef RDZV_DOCUMENTS_H
#define RDZV_DOCUMENTS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "reply.h"
#include "state.h"

/* The fields every rank of g's complete epoch shares, made once per epoch
 * (and members variant) and kept in g; NULL out of memory. */
rdzv_shared_t *rdzv_group_shared(const rdzv_state_t *st, rdzv_group_t *g, bool with_members);
/* rank's whole assignment reply to request req_id, malloc'd; NULL out of
 * memory. */
char *rdzv_assignment_text(const rdzv_state_t *st, rdzv_group_t *g, int rank, int64_t req_id,
                           bool with_members);
/* Different nodes may reuse port numbers because they are different network
 * namespaces; two nodes of one host address are one (hostNetwork Pods), and
 * their blocks must not overlap. The first ranks of complete group g (8 at
 * most, in rank order) whose block another node of their address holds
 * too, each with the first such node by name, as status shows them; NULL if
 * none. A function of the state alone, so a restart shows the same. */
cJSON *rdzv_group_overlaps(const rdzv_state_t *st, const rdzv_group_t *g);
/* The first max ranks (in rank order) that have not joined g's current
 * epoch, as an array; status lists RDZV_STATUS_MISSING_MAX of them beside
 * the count. NULL out of memory. */
#define RDZV_STATUS_MISSING_MAX 64
cJSON *rdzv_group_missing(const rdzv_group_t *g, int max);
/* Each rank's place among the ranks of its node (the members with one
 * plan_node), and its node's among the group's nodes, numbered by each
 * node's lowest rank: torchrun's LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK
 * and GROUP_WORLD_SIZE. */
typedef struct {
    int local_rank, local_world;
    int group_rank, group_world;
} rdzv_local_t;
/* One pass over the members; world entries, malloc'd, NULL out of memory. */
rdzv_local_t *rdzv_group_local_ranks(const rdzv_group_t *g);
/* The parts of rank's assignment reply, its plan from first_port, its peer
 * and text unset, the roles' from rank 0's role_port; .shared is the epoch's, not referenced (NULL out of
 * memory). */
rdzv_reply_t rdzv_assignment_parts(const rdzv_state_t *st, rdzv_group_t *g, int rank,
                                   int first_port, int role_port,
                                   const rdzv_local_t *local, bool with_members);
/* The timeout reply to a join of g that waited in vain: how many ranks
 * joined, and which are missing (the first 8 in the message, the first
 * RDZV_STATUS_MISSING_MAX in "missing"); malloc'd, NULL out of memory. */
char *rdzv_group_timeout_reply(const rdzv_group_t *g, int64_t req_id);
/* The status objects of every group, or of the one named (an empty array
 * if there is none), as the status op and /v1/groups answer them. */
cJSON *rdzv_state_status(const rdzv_state_t *st, const char *group, int64_t now_ms);

#endif
