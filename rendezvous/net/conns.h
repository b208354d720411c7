/* A shard's connections, as libzmq's socket monitor reports them: counted
 * against --max-connections (which keeps a reserve of open files for the
 * journal, /metrics and the rest); one accepted over it is shut down at
 * once (libzmq gives a ROUTER no call to close one connection: libzmq
 * reads the end and closes the socket as if the peer had hung up, and the
 * descriptor stays libzmq's throughout). Used by shard.c alone. */
#ifndef RDZV_CONNS_H
#define RDZV_CONNS_H

#include "core.h"

#include <stddef.h>
#include <stdint.h>

/* A connection shut down over the cap, until libzmq closes it. */
typedef struct {
    int fd;
    rdzv_peer_drop_t why;
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
    size_t len, cap;
    int64_t next_cap_log, next_accept_log;
} rdzv_conns_t;

/* Starts monitoring router (before it binds). 0, or -1. */
int rdzv_conns_init(rdzv_conns_t *self, rdzv_core_t *core, void *router, int index, long max);
void rdzv_conns_destroy(rdzv_conns_t *self);
/* Takes the events waiting on self->monitor (poll it for POLLIN). */
void rdzv_conns_on_events(rdzv_conns_t *self, int64_t now_ms);

#endif
