/* Timestamps of a large release's phases in rdzvd's log, for
 * tests/bench/release_trace.py: built only with -Drelease_trace=true, so
 * a normal build carries no trace code at all. Lines read
 *   trace <phase> shard=S t=<CLOCK_MONOTONIC ns> [n=N]
 * The bench's clocks are the same CLOCK_MONOTONIC. */
#ifndef RDZV_TRACE_H
#define RDZV_TRACE_H

#include <stdint.h>

/* Releases with at least this many replies are traced. */
#define RDZV_TRACE_MIN 64

#ifdef RDZV_RELEASE_TRACE
#include <stdio.h>
#include <time.h>

static inline int64_t rdzv_trace_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}
#define RDZV_TRACE(phase, shard, t, n)                                                   \
    fprintf(stderr, "trace %s shard=%d t=%lld n=%zu\n", (phase), (shard), (long long) (t), \
            (size_t) (n))
#else
static inline int64_t rdzv_trace_ns(void)
{
    return 0;
}
#define RDZV_TRACE(phase, shard, t, n) ((void) (t), (void) (n))
#endif

#endif
