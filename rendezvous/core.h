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


#define RDZV_MEMBER_CHUNK 64

typedef struct {
    char *session, *host, *node;
    rdzv_plan_node_t *plan_node; /* node's entry in the plans */
    int64_t epoch;               /* last epoch this rank joined; 0: none */
    int64_t last_seen_ms;
    int64_t joined_at_ms;        /* when this rank joined the forming epoch */
    bool waiting;                /* a join of this rank awaits the epoch */
    bool want_members;
    rdzv_peer_t peer;
    int64_t deadline_ms;
} rdzv_member_t;

typedef struct {
    rdzv_peer_t peer;
    char *key;
    int64_t deadline_ms;
} rdzv_kv_waiter_t;

typedef struct {
    char *name;
    int world;
    int64_t epoch;
    bool complete;
    int joined;                  /* ranks that joined the current epoch */
    int waiting;                 /* members with a join waiting */
    rdzv_nccl_mode_t nccl_mode;
    int nccl_count;              /* IDs per epoch */
    cJSON *nccl_ids;             /* this epoch's IDs (hex strings), NULL until complete */
    cJSON *rank0_ids;            /* rank0 mode: what rank 0 brought to this epoch */
    rdzv_ncclroot_t *root;       /* the helper hosting server-made roots */
    rdzv_member_t **members;     /* world entries, NULL until joined */
    /* The members themselves, RDZV_MEMBER_CHUNK ranks to a block made when
     * the first of them joins: a release walks every member in rank order,
     * and neighbours in memory make that a stream, not a scatter. */
    rdzv_member_t **member_chunks;   /* RDZV_MEMBER_CHUNK members each */
    /* The part of every rank's assignment that is the same for all ranks of
     * the epoch, formatted once: with and without the members list. */
    rdzv_shared_t *shared[2];
    zhashx_t *kv;                /* key -> value, current epoch only */
    zlistx_t *kv_waiters;        /* rdzv_kv_waiter_t */
    uint64_t kv_bytes;           /* keys + values of the current epoch */
} rdzv_group_t;

/* Replies for the connections of one shard. */
typedef struct {
    rdzv_reply_t *v;
    size_t len, cap;
} rdzv_outbox_t;

typedef struct {
    rdzv_config_t cfg;
    rdzv_journal_t *journal;
    rdzv_plans_t *plans;
    zhashx_t *groups;            /* name -> rdzv_group_t */
    /* By the shard of the reply's connection (peer.shard): a release hands
     * each shard its replies whole instead of sorting and copying them. */
    rdzv_outbox_t outboxes[RDZV_MAX_SHARDS];
    bool replaying;
    int64_t now_ms;
    rdzv_metrics_t metrics;
    uint64_t compacted_size;     /* the journal file's size after the last compaction */
    rdzv_rate_t *rate;
    int64_t last_prune_ms;
    /* Pending waits as counted at the last tick, plus those added since: an
     * upper bound that keeps the limit check O(1) until it gets close. */
    int pending_at_tick, added_since_tick;
    /* Held by the loop thread while it handles a batch; other threads
     * (the HTTP server) hold it while they read anything above. */
    pthread_mutex_t lock;
} rdzv_core_t;

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

/* --- used by the handlers (handlers.c, group.c) --- */
void rdzv_core_reply(rdzv_core_t *self, const rdzv_peer_t *peer, char *text);
/* Queues an assignment by its parts; takes a reference to shared. */
void rdzv_core_reply_assignment(rdzv_core_t *self, const rdzv_peer_t *peer, rdzv_shared_t *shared,
                                int rank, int first_port, int ports);
void rdzv_core_error(rdzv_core_t *self, const rdzv_peer_t *peer, const char *code,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Journals record and applies it to memory; takes ownership of record. */
int rdzv_core_record(rdzv_core_t *self, cJSON *record);
/* Applies one record to memory (replay and live). 0 or -1. */
int rdzv_core_apply(void *self, const cJSON *record);
rdzv_group_t *rdzv_core_group(rdzv_core_t *self, const char *name);
rdzv_group_t *rdzv_group_new(const char *name, int world, rdzv_nccl_mode_t mode, int count);
/* rank's member of g, made (zeroed, in its chunk) if it has none; NULL
 * out of memory. */
rdzv_member_t *rdzv_group_member(rdzv_group_t *g, int rank);
void rdzv_group_free(void **item);
#include "log.h"

/* handlers.c */
void rdzv_handle_request(rdzv_core_t *self, const rdzv_peer_t *peer, void *req);
/* Called when the epoch completes: plans, ID, replies to every waiter. */
void rdzv_group_release(rdzv_core_t *self, rdzv_group_t *group);
/* Moves the group to epoch+1 (new ID at completion, same plans). */
int rdzv_group_next_epoch(rdzv_core_t *self, rdzv_group_t *group, const char *why);
/* Assignment reply for one rank (assign.c). */
char *rdzv_assignment_reply(rdzv_core_t *self, rdzv_group_t *group, int rank,
                            int64_t req_id, bool with_members);
cJSON *rdzv_group_status(rdzv_core_t *self, rdzv_group_t *group);

#endif
