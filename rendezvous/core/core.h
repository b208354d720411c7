/* rdzvd's state machine without sockets: requests in, replies out, every
 * accepted change journaled and durable before any reply that depends on
 * it leaves. The shards (shard.c), the HTTP server and the tests all drive
 * it through the one sequence below; the core owns its lock, its state and
 * its journal.
 *
 *   rdzv_core_parse      any thread, no lock: a frame to a request
 *   rdzv_core_begin      takes the lock: a batch starts
 *   rdzv_core_handle     each request of the batch (also _error, _tick)
 *   rdzv_core_end        writes the batch's records, starts their sync,
 *                        hands over every shard's replies, drops the lock
 *   rdzv_core_wait       until the replies' records are durable; then send
 *
 * rdzv_core_defer ends a batch without a commit instead, so that a busy
 * shard commits several batches at once (group commit). */
#ifndef RDZV_CORE_H
#define RDZV_CORE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "journal.h"
#include "metrics.h"
#include "proto.h"
#include "reply.h"
#include "rdzv_proto.h"
#include "router_url.h"

typedef struct rdzv_core rdzv_core_t;

/* Opens the journal and replays it. NULL on failure, reason in err. */
rdzv_core_t *rdzv_core_new(const rdzv_config_t *cfg, char *err, size_t errlen);
void rdzv_core_destroy(rdzv_core_t **self_p);

/* A request frame, parsed; reads only the configuration, so every shard
 * parses its own frames at once. rdzv_core_handle clears it. */
typedef struct {
    int rc;                      /* rdzv_request_parse's */
    rdzv_request_t req;
    const char *code;
    char msg[256];
} rdzv_parsed_t;
void rdzv_core_parse(const rdzv_core_t *self, const char *frame, size_t len, rdzv_parsed_t *out);

/* Starts a batch at now_ms: takes the core's lock. */
void rdzv_core_begin(rdzv_core_t *self, int64_t now_ms);
/* Handles one parsed request from peer (peer->req is ignored: the
 * request's own id is used); its replies are queued for peer's shard. */
void rdzv_core_handle(rdzv_core_t *self, const rdzv_peer_t *peer, rdzv_parsed_t *parsed);
/* Queues an error reply to peer (for a frame the shard refused itself). */
void rdzv_core_error(rdzv_core_t *self, const rdzv_peer_t *peer, const char *code,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Answers waits whose deadline has passed; reaps NCCL root helpers. */
void rdzv_core_tick(rdzv_core_t *self);

typedef enum {
    RDZV_CORE_IDLE,              /* nothing waits for a commit */
    RDZV_CORE_QUEUED,            /* records wait: a later end commits them */
    RDZV_CORE_URGENT,            /* a large release or many large replies wait: end now */
} rdzv_core_queued_t;
/* Ends the batch without a commit: records and replies stay queued for the
 * next rdzv_core_end. Drops the lock. */
rdzv_core_queued_t rdzv_core_defer(rdzv_core_t *self);

typedef struct {
    /* Every shard's replies, the caller's (send or rdzv_reply_clear each,
     * then free v). Assignments are left for the sender to format. */
    rdzv_outbox_t out[RDZV_MAX_SHARDS];
    uint64_t gate;               /* rdzv_core_wait for this before sending */
    bool had_records;            /* the commit wrote something */
} rdzv_commit_t;
/* Ends the batch with a commit: writes the queued records, starts their
 * sync and takes the replies, then drops the lock. If the write fails,
 * every reply is an "internal" error and the state is reloaded from the
 * file. 0 or -1. */
int rdzv_core_end(rdzv_core_t *self, rdzv_commit_t *commit);
/* Waits until what gate names is durable (any thread, no lock). 0, or -1
 * when a replicated journal could not commit it in time: the replies must
 * not leave as they are. */
int rdzv_core_wait(rdzv_core_t *self, uint64_t gate);
/* The same, and on -1 each of the n replies becomes an "unavailable"
 * error (its change may still be committed later: a retry finds it). */
void rdzv_core_wait_or_refuse(rdzv_core_t *self, uint64_t gate, rdzv_reply_t *v, size_t n);

/* With a replicated journal: stands by and campaigns to lead, as advertise
 * (the endpoint a standby names to clients). Nothing to do for a file
 * journal. 0 or -1. */
int rdzv_core_campaign(rdzv_core_t *self, const char *advertise, char *err, size_t errlen);
/* Whether this rdzvd serves requests: it leads (always, with a file
 * journal). */
bool rdzv_core_leading(rdzv_core_t *self);

/* Replies a shard did not send as made, by why (sendq.h): the peer reads
 * nothing of what it asked for (dropped), the peer was gone (dropped), or
 * the peer left too much unread (a "busy" error went instead). */
typedef enum {
    RDZV_DROP_SLOW_READER, RDZV_DROP_GONE, RDZV_DROP_BUSY, RDZV_DROP_REASONS
} rdzv_drop_reason_t;
extern const char *const rdzv_drop_reason_names[RDZV_DROP_REASONS];
/* Counts n such replies (any thread, no lock). */
void rdzv_core_count_dropped(rdzv_core_t *self, rdzv_drop_reason_t why, unsigned n);

/* Connections a shard closed itself, by why: it came while the server had
 * all --max-connections allows (conns.h). slow_reader stays for the
 * scrapers that name it; rdzvd no longer closes a peer that does not read
 * (sendq.h says what it does instead). */
typedef enum {
    RDZV_PEER_DROP_SLOW_READER, RDZV_PEER_DROP_CONNECTION_CAP, RDZV_PEER_DROP_REASONS
} rdzv_peer_drop_t;
extern const char *const rdzv_peer_drop_names[RDZV_PEER_DROP_REASONS];
/* Counts one (any thread, no lock). */
void rdzv_core_count_peer_dropped(rdzv_core_t *self, rdzv_peer_drop_t why);
/* Adds delta to the connections open now and returns their number; the
 * cap is what --max-connections allows (both any thread, no lock). */
long rdzv_core_connections_add(rdzv_core_t *self, long delta);
void rdzv_core_set_connection_cap(rdzv_core_t *self, long cap);

/* Whether rdzvd is close to its limit on open files (shard.c watches);
 * any thread. */
void rdzv_core_set_fds_short(rdzv_core_t *self, bool shortage, long limit);

/* Per-group samples on /metrics: the first RDZV_METRICS_GROUPS groups in
 * name order, so a server of thousands of groups does not make thousands
 * of series per metric; rdzv_group_metrics_omitted counts the rest. */
#define RDZV_METRICS_GROUPS 256
typedef struct {
    char name[RDZV_MAX_NAME + 1];
    int world, joined;
    int64_t epoch;
    bool complete;
    int live, serving;           /* ranks alive, and alive with their engine serving */
    bool routed;                 /* it names a router */
    int registered;              /* ranks its router lists as ready */
    uint64_t router_errors[RDZV_ROUTER_ERR_REASONS];
} rdzv_group_stat_t;

/* What /metrics shows. Takes the lock. */
typedef struct {
    rdzv_metrics_t metrics;
    unsigned long long groups, ranks_joined, ranks_live;
    unsigned long long replies_dropped[RDZV_DROP_REASONS];
    unsigned long long fds_limit, fds_short;
    unsigned long long connections, connection_cap, peers_dropped[RDZV_PEER_DROP_REASONS];
    rdzv_group_stat_t group[RDZV_METRICS_GROUPS];
    size_t ngroup;
    unsigned long long groups_omitted;
    rdzv_journal_stats_t journal;
} rdzv_core_stats_t;
void rdzv_core_stats(rdzv_core_t *self, int64_t now_ms, rdzv_core_stats_t *out);
/* The status objects of every group, or of the one named (an empty array if
 * there is none), as the status op answers them. Takes the lock. */
cJSON *rdzv_core_status_json(rdzv_core_t *self, const char *group, int64_t now_ms);
/* --- Routers (rendezvous/router/ drives them) --- */
/* The status objects of the groups that name a router, as the status op
 * answers them. Takes the lock. */
cJSON *rdzv_core_routed_json(rdzv_core_t *self, int64_t now_ms);
/* What one reconcile of group with router found: the ranks the router
 * lists as ready workers and those it still lists on their way out (when
 * known: the router was read; otherwise the flags stay as they were, so
 * that a failed read never says a rank has left), and why the reconcile
 * fell short (reason one of rdzv_router_err_t, counted; -1 and error NULL:
 * it went through). Ignored when the group is gone or names another router
 * by now. Takes the lock. */
typedef struct {
    const char *group, *router;
    bool known;
    const int *registered;
    int nregistered;
    const int *draining;         /* ranks still listed but on their way out */
    int ndraining;
    int reason;
    const char *error;
} rdzv_router_report_t;
void rdzv_core_router_report(rdzv_core_t *self, const rdzv_router_report_t *rep);

/* Whether the lock could be had within ms (/healthz). */
bool rdzv_core_responsive(rdzv_core_t *self, int ms);
/* Seconds the sync in flight has taken so far, 0 if none (any thread). */
double rdzv_core_sync_busy_s(rdzv_core_t *self);

#endif
