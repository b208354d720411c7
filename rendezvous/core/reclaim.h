/* Room for a new group when rdzvd's limits are reached: forming groups
 * that nobody waits in give their place, least recently heard from first.
 *
 * Without this, one client could announce worlds it never fills (256 joins
 * of world 65536 with a deadline of 1 ms fill --max-ranks), or join ranks
 * with the longest strings, and every new group or rank, however small,
 * would be refused until --forming-ttl expired them.
 * A group whose first epoch has not formed and in which no join or KV wait
 * is pending holds nothing anyone waits for: its ranks that come back later
 * join it afresh. A group with a rank waiting is never taken for that.
 *
 * Waits that last (a deadline of a day is allowed) would lock others out
 * the same way: so when a new group still does not fit, a connection that
 * waits alone in forming groups of more than its share (1/
 * RDZV_CONNECTION_SHARE of --max-ranks or --max-groups) gives up such
 * groups, least recently heard from first, until it is back within its
 * share or the new group fits; its waits are answered "limit". An honest
 * group, waited in by several connections, or a connection's only one, or
 * one of a connection within its share, keeps its place. */
#ifndef RDZV_RECLAIM_H
#define RDZV_RECLAIM_H

#include "batch.h"

#include <stdbool.h>
#include <stdint.h>

/* Whether g is forming its first epoch with nobody waiting in it. */
bool rdzv_reclaim_candidate(const rdzv_group_t *g);

/* What a request needs beyond what rdzvd holds. */
typedef struct {
    int64_t ranks;               /* of --max-ranks */
    bool group;                  /* one more group, of --max-groups */
    uint64_t member_bytes;       /* of --max-member-mib */
} rdzv_reclaim_need_t;

/* Deletes such groups (recorded, so that a replay agrees; never keep), then
 * groups of connections past their share other than requester's, until
 * need fits rdzvd's limits. Returns whether it fits now. */
bool rdzv_reclaim_room(rdzv_batch_t *self, rdzv_reclaim_need_t need, const rdzv_group_t *keep,
                       const rdzv_peer_t *requester);

#endif
