/* Limits that keep one client or tenant from exhausting rdzvd. Each refusal
 * is the "limit" error code; defaults hold a 16384-rank group easily. */
#ifndef RDZV_QUOTA_H
#define RDZV_QUOTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int max_groups;              /* groups recorded at once */
    int64_t max_ranks;           /* the worlds of every group held, summed */
    uint64_t max_kv_bytes;       /* keys + values of one group's epoch */
    uint64_t max_kv_total_bytes; /* keys + values of every group together */
    uint64_t max_member_bytes;   /* host, node and session strings of every rank */
    int max_waits;               /* joins and kv waits pending at once */
    int max_rps;                 /* requests per second per connection */
} rdzv_limits_t;

#define RDZV_DEFAULT_MAX_GROUPS   100000
#define RDZV_DEFAULT_MAX_RANKS    (1 << 24)
#define RDZV_DEFAULT_MAX_KV_BYTES (64ull << 20)
#define RDZV_DEFAULT_MAX_KV_TOTAL_BYTES (1024ull << 20)
#define RDZV_DEFAULT_MAX_MEMBER_BYTES (1024ull << 20)
#define RDZV_DEFAULT_MAX_WAITS    1000000
#define RDZV_DEFAULT_MAX_RPS      1000
/* A connection waiting alone in forming groups holds at most 1/N of
 * --max-ranks and of --max-groups once another connection needs room
 * (reclaim.h). */
#define RDZV_CONNECTION_SHARE     4

typedef struct rdzv_rate rdzv_rate_t;

/* A token bucket per connection (shard and ROUTER identity), refilled at max_rps with
 * a burst of max_rps. */
rdzv_rate_t *rdzv_rate_new(int max_rps);
void rdzv_rate_destroy(rdzv_rate_t **self_p);
/* True if the connection may send one more request now. */
bool rdzv_rate_allow(rdzv_rate_t *self, int shard, const unsigned char *id, size_t len,
                     int64_t now_ms);
/* Forgets connections idle for more than idle_ms. */
void rdzv_rate_prune(rdzv_rate_t *self, int64_t now_ms, int64_t idle_ms);

#endif
