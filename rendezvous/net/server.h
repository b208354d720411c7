/* The ZeroMQ side of rdzvd: one or more shards, each a ROUTER socket in its
 * own thread on its own SO_REUSEPORT listener of the one port, feeding the
 * core in batches, so one journal fsync covers every change of a batch
 * (group commit) before any of its replies leaves. */
#ifndef RDZV_SERVER_H
#define RDZV_SERVER_H

#include "core.h"

#define RDZV_MAX_LISTENERS 64

typedef struct rdzv_server rdzv_server_t;

#define RDZV_DEFAULT_PEER_TIMEOUT_MS 30000
/* Requests per peer libzmq queues before they are handled (replies are
 * counted in bytes: sendq.h). */
#define RDZV_PEER_RCVHWM 1000

/* CURVE: curve_secret is rdzvd's secret certificate (zcert format) and
 * clients_dir holds the public certificates of the clients it accepts
 * (clientkeys.h says which entries, and when they are read again).
 * Both NULL: no encryption. peer_timeout_ms: a connection that has not
 * finished its handshake, or has not answered a ZMTP heartbeat, this long
 * is dropped (0: RDZV_DEFAULT_PEER_TIMEOUT_MS). max_connections: one
 * connection more than this is closed at once (0: rdzv_fds_connection_cap
 * of the limit on open files). */
typedef struct {
    const char *curve_secret;
    const char *clients_dir;
    int peer_timeout_ms;
    long max_connections;
} rdzv_server_security_t;

/* shards > 1 or listeners > 1 needs an endpoint rdzv_listen_shardable()
 * accepts; listeners (>= shards) are dealt to the shards in turn. */
rdzv_server_t *rdzv_server_new(rdzv_core_t *core, const char *endpoint, int shards, int listeners,
                               const rdzv_server_security_t *security,
                               char *err, size_t errlen);
void rdzv_server_destroy(rdzv_server_t **self_p);
/* Runs until SIGINT/SIGTERM or rdzv_server_stop. Returns 0, -1 if a shard
 * thread could not start. */
int rdzv_server_run(rdzv_server_t *self);
void rdzv_server_stop(rdzv_server_t *self);
/* The endpoint actually bound (with the real port for tcp://...:0 or *:!). */
/* The client keys --clients held at start (they are read again when DIR
 * changes: clientkeys.h); -1 without CURVE. */
int rdzv_server_client_keys(const rdzv_server_t *self);
/* What --max-connections came to. */
long rdzv_server_max_connections(const rdzv_server_t *self);
const char *rdzv_server_endpoint(const rdzv_server_t *self);

#endif
