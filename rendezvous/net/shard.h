/* One server shard: a thread with its own ROUTER socket on its own listener
 * of the shared port. Shards take the core's lock only to handle a batch and
 * to commit it; receiving and sending, which is where libzmq spends its time,
 * run in parallel. A reply for a connection of another shard is queued to
 * that shard, which alone may touch its socket. Used by server.c alone. */
#ifndef RDZV_SHARD_H
#define RDZV_SHARD_H

#include "conns.h"
#include "core.h"
#include "sendq.h"

#include <czmq.h>
#include <pthread.h>
#include <stdatomic.h>

#define RDZV_SHARD_RECV_BATCH 256

typedef struct {
    rdzv_peer_t peer;
    rdzv_parsed_t parsed;        /* parsed before the lock is taken */
    bool extra_frames;
    rdzv_sendq_verdict_t intake; /* BUSY: answered so unhandled (sendq.h) */
} rdzv_shard_request_t;

typedef struct rdzv_shard_set rdzv_shard_set_t;

typedef struct rdzv_shard {
    rdzv_shard_set_t *set;
    int index;
    zsock_t *router;
    void *sock;
    pthread_t thread;
    bool started;
    int wake_fd;                 /* eventfd: the inbox has replies */
    rdzv_conns_t conns;
    rdzv_sendq_t *sendq;         /* what each peer leaves unread */
    pthread_mutex_t lock;        /* guards the inbox */
    rdzv_reply_t *inbox;
    size_t in_len, in_cap;
    uint64_t in_gate;            /* journal offset the inbox's replies wait for */
    rdzv_shard_request_t batch[RDZV_SHARD_RECV_BATCH];
    int64_t trace_got, trace_handled;   /* trace.h: the last batch's times */
} rdzv_shard_t;

/* A server's shards and what they share; the server (server.c) owns it. */
struct rdzv_shard_set {
    rdzv_core_t *core;
    rdzv_shard_t *shards;
    int count;
    atomic_int stopping;
    _Atomic int64_t last_commit_ms;  /* when a commit last wrote records */
};

/* Takes router over (before it binds). Returns 0 or -1. */
int rdzv_shard_init(rdzv_shard_t *self, rdzv_shard_set_t *set, int index, zsock_t *router);
void rdzv_shard_destroy(rdzv_shard_t *self);
int rdzv_shard_start(rdzv_shard_t *self);
void rdzv_shard_join(rdzv_shard_t *self);
void rdzv_shard_wake(rdzv_shard_t *self);
/* Serves until the set stops; shard 0 also runs the core's timers and
 * stops the set on SIGINT/SIGTERM. */
void rdzv_shard_loop(rdzv_shard_t *self);
/* Tells every shard of the set to stop (any thread). */
void rdzv_shard_set_stop(rdzv_shard_set_t *set);

#endif
