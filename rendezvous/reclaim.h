/* Room for a new group when rdzvd's limits are reached: forming groups
 * that nobody waits in give their place, least recently heard from first.
 *
 * Without this, one client could announce worlds it never fills (256 joins
 * of world 65536 with a deadline of 1 ms fill --max-ranks) and every new
 * group, however small, would be refused until --forming-ttl expired them.
 * A group whose first epoch has not formed and in which no join or KV wait
 * is pending holds nothing anyone waits for: its ranks that come back later
 * join it afresh. A group with a rank waiting is never taken. */
#ifndef RDZV_RECLAIM_H
#define RDZV_RECLAIM_H

#include "batch.h"

#include <stdbool.h>
#include <stdint.h>

/* Whether g is forming its first epoch with nobody waiting in it. */
bool rdzv_reclaim_candidate(const rdzv_group_t *g);

/* Deletes such groups (recorded, so that a replay agrees; never keep) until
 * ranks more ranks and, if new_group, one more group fit rdzvd's limits.
 * Returns whether they fit now. */
bool rdzv_reclaim_room(rdzv_batch_t *self, int64_t ranks, bool new_group,
                       const rdzv_group_t *keep);

#endif
