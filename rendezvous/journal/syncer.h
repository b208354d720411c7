/* The journal's fdatasync on a thread of its own. The thread that wrote a
 * release's records asks for them to be made durable and goes on queueing
 * the release's replies and handing them to the shards while the disk
 * works; every reply then waits until what it depends on is durable
 * (rdzv_syncer_wait) before it leaves rdzvd. Offsets are the journal's
 * logical offsets (bytes since its first file; journal.c), which only grow. */
#ifndef RDZV_SYNCER_H
#define RDZV_SYNCER_H

#include <stdbool.h>
#include <stdint.h>

#include "metrics.h"

typedef struct rdzv_syncer rdzv_syncer_t;

/* Everything below `durable` is on disk already. Without do_sync nothing is
 * synced and every offset counts as durable once written. NULL out of memory. */
rdzv_syncer_t *rdzv_syncer_new(int fd, uint64_t durable, bool do_sync);
/* Waits for a sync in flight, stops the thread. */
void rdzv_syncer_destroy(rdzv_syncer_t **self_p);

/* The file holds written bytes up to `written`: starts making them durable
 * and returns at once. */
void rdzv_syncer_start(rdzv_syncer_t *self, uint64_t written);
/* Returns once everything below `upto` is durable, starting a sync if none
 * in flight covers it. Never fails: when fdatasync fails, which pages
 * reached the disk is unknown (and a second fdatasync may report success
 * for pages the kernel dropped), so rdzvd logs it and exits; its
 * supervisor restarts it and the replay keeps what the disk holds. */
void rdzv_syncer_wait(rdzv_syncer_t *self, uint64_t upto);
/* The file is now fd, and everything below `durable` is on disk (an offset
 * never lowers what is durable: offsets only grow, see journal.c). Waits
 * for a sync in flight on the old fd first; the caller closes it after. */
void rdzv_syncer_reset(rdzv_syncer_t *self, int fd, uint64_t durable);
/* Seconds the fdatasync in flight has run so far; 0 when none is. */
double rdzv_syncer_busy_s(rdzv_syncer_t *self);
/* Copies the histogram of fdatasync durations. */
void rdzv_syncer_latency(rdzv_syncer_t *self, rdzv_histogram_t *out);
/* Replaces fdatasync (fault-injection tests). */
void rdzv_syncer_set_sync_fn(rdzv_syncer_t *self, int (*fn)(int fd));

#endif
