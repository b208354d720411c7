/* rdzvd's state machine without I/O: requests in, replies out through an
 * outbox, every accepted change recorded in the journal first. The zmq loop
 * (server.c) and the unit tests both drive it through this interface. */
#ifndef RDZV_CORE_H
#define RDZV_CORE_H

#include <cjson/cJSON.h>
#include <czmq.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "journal.h"
#include "quota.h"
#include "metrics.h"
#include "nccl_mode.h"
#include "ncclroot.h"
#include "plan.h"
#include "proto.h"
#include "reply.h"


typedef struct {
    int port_base, ports_per_rank, port_limit, max_world;
    int64_t dead_after_ms;
    bool do_fsync, repair;
    bool nccl_default;           /* groups get server-made IDs by default */
    int max_nccl_ids;            /* IDs per epoch a group may ask for */
    const char *nccl_helper;     /* path of rdzv-nccl-root, NULL without NCCL */
    int nccl_root_timeout_s;
    const char *state_dir;
    const char *group_token;     /* every request must carry it; NULL: none */
    uint64_t compact_bytes;      /* compact the journal past this size; 0: never */
    rdzv_limits_t limits;
} rdzv_config_t;


/* Replies for the connections of one shard. */
typedef struct {
    rdzv_reply_t *v;
    size_t len, cap;
} rdzv_outbox_t;

typedef struct rdzv_core rdzv_core_t;

/* Opens the journal and replays it. NULL on failure, reason in err. */
rdzv_core_t *rdzv_core_new(const rdzv_config_t *cfg, char *err, size_t errlen);
void rdzv_core_destroy(rdzv_core_t **self_p);

/* Handles one request frame from peer (peer->req is ignored: the request's
 * own id is used). Replies land in the outbox. */
void rdzv_core_handle(rdzv_core_t *self, const rdzv_peer_t *peer,
                      const char *frame, size_t len, int64_t now_ms);

/* The same in two steps, so that server shards parse in parallel outside
 * the core's lock: rdzv_core_parse reads only the configuration;
 * rdzv_core_handle_parsed (under the lock) handles the result and clears it. */
typedef struct {
    int rc;                      /* rdzv_request_parse's */
    rdzv_request_t req;
    const char *code;
    char msg[256];
} rdzv_parsed_t;
void rdzv_core_parse(const rdzv_core_t *self, const char *frame, size_t len, rdzv_parsed_t *out);
void rdzv_core_handle_parsed(rdzv_core_t *self, const rdzv_peer_t *peer, rdzv_parsed_t *parsed,
                             int64_t now_ms);
/* Answers waits whose deadline has passed. */
void rdzv_core_tick(rdzv_core_t *self, int64_t now_ms);
/* Makes queued journal records durable. On failure every queued reply is
 * replaced by an "internal" error and the state is reloaded from disk.
 * Returns 0 or -1. */
int rdzv_core_commit(rdzv_core_t *self);
/* The same in two steps: write the records and start their sync (under the
 * lock; *gate: what the queued replies depend on), then, anywhere, wait
 * until that is durable before sending any of them. The shards hand the
 * replies out in between. 0 or -1, as rdzv_core_commit. */
int rdzv_core_commit_begin(rdzv_core_t *self, uint64_t *gate);
void rdzv_core_commit_wait(rdzv_core_t *self, uint64_t gate);
/* Joins and kv waits pending now. */
int rdzv_core_pending(rdzv_core_t *self);
/* Rewrites the journal as the records of the current state (compact.c). */
int rdzv_core_compact(rdzv_core_t *self);
/* Whether the journal file has grown enough to be compacted: past
 * --compact-mib, and to twice what the last compaction left (a state
 * larger than the limit would otherwise be rewritten at every commit). */
bool rdzv_core_wants_compaction(const rdzv_core_t *self);
/* Takes the outbox, every reply formatted (text NULL only when out of
 * memory); the caller sends and clears each reply, then frees the array. */
rdzv_reply_t *rdzv_core_take_outbox(rdzv_core_t *self, size_t *count);
/* The same with assignments left for the sender to rdzv_reply_render. */
rdzv_reply_t *rdzv_core_take_outbox_unrendered(rdzv_core_t *self, size_t *count);
/* Takes the replies for shard's connections only (not formatted); the
 * array is the caller's to free. */
rdzv_reply_t *rdzv_core_take_shard_outbox(rdzv_core_t *self, int shard, size_t *count);

/* Queues an error reply to peer (a frame the shard refused itself). */
void rdzv_core_error(rdzv_core_t *self, const rdzv_peer_t *peer, const char *code,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The core's lock: the shards hold it while they handle a batch and start
 * its commit; HTTP while it reads. timedlock: false if not had within ms. */
void rdzv_core_lock(rdzv_core_t *self);
bool rdzv_core_timedlock(rdzv_core_t *self, int ms);
void rdzv_core_unlock(rdzv_core_t *self);
/* Under the lock: whether journal records wait for a commit. */
bool rdzv_core_journal_pending(rdzv_core_t *self);
/* Seconds the sync in flight has taken so far, 0 if none (any thread). */
double rdzv_core_sync_busy_s(rdzv_core_t *self);

/* What /metrics shows, read under the lock. */
typedef struct {
    rdzv_metrics_t metrics;
    unsigned long long groups, ranks_joined, ranks_live, journal_bytes;
    rdzv_histogram_t fsync;
} rdzv_core_stats_t;
void rdzv_core_stats(rdzv_core_t *self, int64_t now_ms, rdzv_core_stats_t *out);
/* Under the lock: the status objects of every group, or of the one named
 * (an empty array if there is none), as the status op answers them. */
cJSON *rdzv_core_status_json(rdzv_core_t *self, const char *group);

#endif
