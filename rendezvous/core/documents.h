/* What a group looks like from outside: a rank's assignment and the status
 * document, built from the state alone. */
#ifndef RDZV_DOCUMENTS_H
#define RDZV_DOCUMENTS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "reply.h"
#include "state.h"

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
cJSON *rdzv_status_overlaps(const rdzv_state_t *st, const rdzv_group_t *g);
/* The parts of rank's assignment reply, its plan from first_port, its peer
 * and text unset, the roles' from rank 0's first port role_port (shifted
 * by the epoch: rdzv_role_shift); .shared is the epoch's, not referenced
 * (NULL out of memory). */
rdzv_reply_t rdzv_assignment_parts(const rdzv_state_t *st, rdzv_group_t *g, int rank,
                                   int first_port, int role_port,
                                   const rdzv_local_t *local, bool with_members);
/* The status objects of every group, or of the one named (an empty array
 * if there is none), as the status op and /v1/groups answer them. */
cJSON *rdzv_state_status(const rdzv_state_t *st, const char *group, int64_t now_ms);
/* The status objects of the groups that name a router. */
cJSON *rdzv_state_routed(const rdzv_state_t *st, int64_t now_ms);

#endif
