/* Completing a group's epoch, and moving it to the next one. */
#ifndef RDZV_RELEASE_H
#define RDZV_RELEASE_H

#include "batch.h"

/* Called when the epoch's last rank joined: plans, IDs and their records;
 * the group waits in self->releasing for rdzv_release_answer. On failure
 * every waiter is refused and nothing waits. */
void rdzv_group_release(rdzv_batch_t *self, rdzv_group_t *group);
/* Queues an assignment for every waiting rank of the group released last
 * (the core calls it as soon as the request that released it is handled). */
void rdzv_release_answer(rdzv_batch_t *self);
/* Records epoch+1 (new IDs at its completion, the same plans); the epoch's
 * kv waiters are refused. why goes to the log. 0 or -1. */
int rdzv_group_next_epoch(rdzv_batch_t *self, rdzv_group_t *group, const char *why);
/* Different nodes may reuse port numbers because they are different network
 * namespaces; two nodes of one host address are one (hostNetwork Pods), and
 * their blocks must not overlap. Notes in group->overlaps (for status) and
 * in the log the first ranks whose block another node of their address
 * holds too. Run by the tick after a release (overlaps_due). */
void rdzv_group_check_overlaps(rdzv_batch_t *self, rdzv_group_t *group);

#endif
