/* Completing a group's epoch, and moving it to the next one. */
#ifndef RDZV_RELEASE_H
#define RDZV_RELEASE_H

#include "batch.h"

/* Called when the epoch's last rank joined: plans, IDs, and an assignment
 * queued for every waiting rank; on failure every waiter is refused. */
void rdzv_group_release(rdzv_batch_t *self, rdzv_group_t *group);
/* Records epoch+1 (new IDs at its completion, the same plans); the epoch's
 * kv waiters are refused. why goes to the log. 0 or -1. */
int rdzv_group_next_epoch(rdzv_batch_t *self, rdzv_group_t *group, const char *why);

#endif
