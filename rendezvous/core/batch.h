/* One batch of requests, as the handlers see it: the state they change,
 * the journal their records go to, and the replies they queue. The core
 * (core.c) opens a batch under its lock and ends it with a commit; what is
 * here never writes or syncs the journal itself, it only appends. */
#ifndef RDZV_BATCH_H
#define RDZV_BATCH_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "journal.h"
#include "metrics.h"
#include "proto.h"
#include "reply.h"
#include "state.h"
#include "tokens.h"

/* A release whose records are made and whose replies are not yet queued. */
typedef struct {
    rdzv_group_t *group;         /* NULL: none */
    int *starts;                 /* each rank's first port */
    int64_t t_start, t_laid, t_recorded;   /* trace.h */
} rdzv_release_t;

typedef struct {
    rdzv_state_t *state;
    const rdzv_config_t *cfg;
    rdzv_journal_t *journal;
    rdzv_metrics_t *metrics;
    int64_t now_ms;
    /* By the shard of the reply's connection (peer.shard): a release hands
     * each shard its replies whole instead of sorting and copying them. */
    rdzv_outbox_t outboxes[RDZV_MAX_SHARDS];
    /* Pending waits as counted at the last tick, plus those added since: an
     * upper bound that keeps the limit check O(1) until it gets close. */
    int pending_at_tick, added_since_tick;
    int released;                /* ranks released since the last commit */
    uint64_t appended;           /* records appended, ever (the tick's check) */
    /* Records were appended that no reply of this batch waits for, yet must
     * be durable soon: the tick's (a root every rank reached, an expired
     * group's delete). */
    bool sync_anyway;
    size_t reply_bytes;          /* of reply texts queued since the last commit */
    rdzv_release_t releasing;
    rdzv_tokens_t *tokens;       /* --tokens; NULL: none */
    /* The request being handled and where its reply goes (NULL: none, or
     * it did not parse): a refusal to that peer is logged with its group
     * and rank. */
    const rdzv_request_t *asked;
    const rdzv_peer_t *asker;
} rdzv_batch_t;

/* Appends record to the journal and applies it to the state; takes the
 * record (NULL: a builder ran out of memory). 0 or -1. */
int rdzv_batch_record(rdzv_batch_t *self, cJSON *record);
/* Appends record, whose change the caller has made in memory already. */
int rdzv_batch_record_applied(rdzv_batch_t *self, cJSON *record);
/* Queues text (takes it; NULL: out of memory, nothing is queued) for peer. */
void rdzv_batch_reply(rdzv_batch_t *self, const rdzv_peer_t *peer, char *text);
/* Queues an assignment by its parts (parts->text NULL, parts->peer
 * unused); takes a reference to parts->shared. */
void rdzv_batch_reply_assignment(rdzv_batch_t *self, const rdzv_peer_t *peer,
                                 const rdzv_reply_t *parts);
/* Queues an error reply, counted and logged by its code; the log names the
 * group and rank of the request being handled when peer asked it. */
void rdzv_batch_error(rdzv_batch_t *self, const rdzv_peer_t *peer, const char *code,
                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The same for a wait of group's rank (-1: a KV wait, no rank) that ends
 * refused while another request is handled. */
void rdzv_batch_error_to(rdzv_batch_t *self, const rdzv_peer_t *peer, const char *group, int rank,
                         const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Whether one more join or kv wait may wait (the --max-waits limit); a
 * "limit" error to peer if not. */
bool rdzv_batch_wait_ok(rdzv_batch_t *self, const rdzv_peer_t *peer);

/* Replaces every queued reply by an "internal" error with message: the
 * records they depended on did not reach the journal. */
void rdzv_batch_refuse_all(rdzv_batch_t *self, const char *message);
/* Moves shard's queued replies to out (the caller's to free). */
void rdzv_batch_take(rdzv_batch_t *self, int shard, rdzv_outbox_t *out);
/* Frees every queued reply and the outboxes. */
void rdzv_batch_clear(rdzv_batch_t *self);

#endif
