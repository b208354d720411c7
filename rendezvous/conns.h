/* A shard's connections, as libzmq's socket monitor reports them: counted
 * against --max-connections (which keeps a reserve of open files for the
 * journal, /metrics and the rest), and dropped when over it or when the
 * peer leaves its replies unread. libzmq gives a ROUTER no call to close
 * one connection; shutting its TCP socket down does it: libzmq reads the
 * end, closes the socket and forgets the peer, as if the peer had hung up,
 * and the descriptor stays libzmq's throughout. Used by shard.c alone. */
#ifndef RDZV_CONNS_H
#define RDZV_CONNS_H

#include "core.h"

#include <stddef.h>
#include <stdint.h>

/* A connection watched: one whose reply queue overflowed (a suspect,
 * checked again later), or one shut down, until libzmq closes it. */
typedef struct {
    int fd;
    bool shut;
    rdzv_peer_drop_t why;
    unsigned long ino;           /* the socket's inode: the same connection later */
    int64_t since_ms, due_ms;
} rdzv_conn_watch_t;

/* Where recent connections came from: libzmq reports a refused handshake
 * without its peer, so the log names the newest accepted one. */
#define RDZV_CONNS_RECENT 1024
typedef struct {
    int fd;
    char addr[64];
} rdzv_conn_recent_t;

typedef struct {
    rdzv_core_t *core;
    void *monitor;               /* the monitor's PAIR: events arrive here */
    rdzv_conn_recent_t recent[RDZV_CONNS_RECENT];
    size_t recent_next;
    int64_t next_refused_log[2];
    unsigned refused_unlogged[2];  /* since the last line of that kind */
    long max;                    /* connections of the whole server */
    rdzv_conn_watch_t *v;
    size_t len, cap, suspects;
    int64_t next_cap_log, next_accept_log;
} rdzv_conns_t;

/* Starts monitoring router (before it binds). 0, or -1. */
int rdzv_conns_init(rdzv_conns_t *self, rdzv_core_t *core, void *router, int index, long max);
void rdzv_conns_destroy(rdzv_conns_t *self);
/* Takes the events waiting on self->monitor (poll it for POLLIN). */
void rdzv_conns_on_events(rdzv_conns_t *self, int64_t now_ms);
/* The queue of replies of the connection on fd just overflowed: that
 * connection is dropped once it is seen leaving bytes unread on the wire,
 * checked every RDZV_CONNS_SLOW_MS for RDZV_CONNS_SUSPECT_MS (libzmq's I/O
 * thread may take a while to put the queue on the wire: under load the
 * kernel's queue is not full at the first look). */
void rdzv_conns_suspect(rdzv_conns_t *self, int fd, int64_t now_ms);
/* Checks the suspects due; returns ms until the next is due, -1 if none. */
long rdzv_conns_check(rdzv_conns_t *self, int64_t now_ms);

#define RDZV_CONNS_SLOW_MS 250
#define RDZV_CONNS_SUSPECT_MS 10000

#endif
