/* The core's state: groups, members and the core itself, for the files of
 * the state machine (core.c, handlers.c, assign.c, group.c, compact.c) and
 * for white-box tests. Everything else goes through core.h. */
#ifndef RDZV_CORE_STATE_H
#define RDZV_CORE_STATE_H

#include "core.h"

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

struct rdzv_core {
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
};

/* --- used by the handlers (handlers.c, group.c) --- */
void rdzv_core_reply(rdzv_core_t *self, const rdzv_peer_t *peer, char *text);
/* Queues an assignment by its parts; takes a reference to shared. */
void rdzv_core_reply_assignment(rdzv_core_t *self, const rdzv_peer_t *peer, rdzv_shared_t *shared,
                                int rank, int first_port, int ports);
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
