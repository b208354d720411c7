/* Completing a group's epoch, and moving it to the next one. */
#ifndef RDZV_RELEASE_H
#define RDZV_RELEASE_H

#include "batch.h"

/* Called when the epoch's last rank joined: plans, IDs and their records;
 * the group waits in self->releasing for rdzv_release_answer. On failure
 * every waiter is refused and nothing waits. */
void rdzv_release_group(rdzv_batch_t *self, rdzv_group_t *group);
/* Queues an assignment for every waiting rank of the group released last
 * (the core calls it as soon as the request that released it is handled). */
void rdzv_release_answer(rdzv_batch_t *self);
/* Records epoch+1 (new IDs at its completion, the same plans); the epoch's
 * kv waiters are refused. why goes to the log. 0 or -1. */
int rdzv_release_next_epoch(rdzv_batch_t *self, rdzv_group_t *group, const char *why);
/* Logs the overlaps of group's plans with other nodes of the same host
 * address (documents.h), once after a release: run by the tick
 * (overlaps_due). */
void rdzv_release_check_overlaps(rdzv_batch_t *self, rdzv_group_t *group);

#endif
