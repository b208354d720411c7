/* Counters and histograms rdzvd keeps for operators (/metrics, status).
 * Updated only by the loop thread; readers take the server lock. */
#ifndef RDZV_METRICS_H
#define RDZV_METRICS_H

#include <stdint.h>

#define RDZV_HIST_BUCKETS 14
/* ROUTER shards at most; the per-shard arrays (metrics, outboxes) have as many. */
#define RDZV_MAX_SHARDS 64

/* Upper bounds in seconds of the histogram buckets (Prometheus "le"). */
extern const double rdzv_hist_bounds[RDZV_HIST_BUCKETS];

typedef struct {
    uint64_t count;
    double sum;
    uint64_t buckets[RDZV_HIST_BUCKETS];   /* not cumulative */
} rdzv_histogram_t;

/* Error codes of docs/protocol.md, in a fixed order for per-code counters. */
#define RDZV_ERROR_CODES 19
extern const char *const rdzv_error_codes[RDZV_ERROR_CODES];
int rdzv_error_code_index(const char *code);

typedef struct {
    uint64_t joins;
    uint64_t assignments;
    uint64_t epoch_changes;
    uint64_t compactions;                  /* journal rewrites that succeeded */
    uint64_t groups_expired;               /* forming groups deleted by --forming-ttl */
    uint64_t groups_reclaimed;             /* ... or to make room for a new group (reclaim.h) */
    uint64_t refusals[RDZV_ERROR_CODES];
    uint64_t shard_requests[RDZV_MAX_SHARDS];   /* by the shard they came in on */
    rdzv_histogram_t join_latency;         /* a rank's join to its assignment */
} rdzv_metrics_t;

void rdzv_histogram_observe(rdzv_histogram_t *h, double seconds);

#endif
