#include "server.h"
#include "curve_cert.h"
#include "fds.h"
#include "cpus.h"
#include "listen.h"
#include "shard.h"
#include "zap.h"
#include "rdzv_proto.h"
#include "rdzv_util.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct rdzv_server {
    rdzv_shard_set_t set;
    int listeners;               /* SO_REUSEPORT listeners, spread over the shards */
    zactor_t *auth;              /* ZAP handler checking client keys (zap.h) */
    int client_keys;             /* keys --clients held at start; -1: no CURVE */
    char *endpoint;
    long max_connections;        /* what --max-connections came to */
};

/* The ZAP handler must run before the sockets bind so that no handshake
 * escapes it. */
static int s_start_auth(rdzv_server_t *self, const rdzv_server_security_t *sec,
                        zcert_t **cert_p, char *err, size_t errlen)
{
    if (!sec || (!sec->curve_secret && !sec->clients_dir))
        return 0;
    if (!sec->curve_secret || !sec->clients_dir) {
        snprintf(err, errlen, "--curve-secret and --clients go together");
        return -1;
    }
    char public_z85[RDZV_Z85_KEY_LEN + 1], secret_z85[RDZV_Z85_KEY_LEN + 1], why[256];
    uint8_t public_key[32], secret_key[32];
    if (rdzv_curve_cert_load(sec->curve_secret, public_z85, secret_z85, why, sizeof why) < 0) {
        snprintf(err, errlen, "cannot load a secret key from %s (--curve-secret): %s",
                 sec->curve_secret, why);
        return -1;
    }
    zmq_z85_decode(public_key, public_z85);
    zmq_z85_decode(secret_key, secret_z85);
    zcert_t *cert = zcert_new_from(public_key, secret_key);
    if (!cert) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    rdzv_clientkeys_t *keys = rdzv_clientkeys_new(sec->clients_dir, err, errlen);
    if (!keys) {
        zcert_destroy(&cert);
        return -1;
    }
    self->client_keys = rdzv_clientkeys_count(keys);
    if (!(self->auth = rdzv_zap_start(&keys))) {
        zcert_destroy(&cert);
        snprintf(err, errlen, "cannot start the ZAP handler for --clients");
        return -1;
    }
    *cert_p = cert;
    return 0;
}

/* A peer that stops mid-frame, or never finishes its greeting, would hold
 * its descriptor forever: libzmq drops a handshake that takes longer than
 * its limit, and heartbeats (a PING every third of the timeout; libzmq
 * answers them for every client, however idle its application) drop a peer
 * that stops answering within the timeout.
 *
 * The handshake limit is half the heartbeat interval (a sixth of the
 * timeout, at least a second), not the timeout: libzmq 4.3 cancels a timer by walking its I/O
 * thread's timers from the earliest (poller_base.cpp: "O(n). We assume it
 * is rarely used"), and every handshake cancels its own. With the limit
 * past the interval, each established connection's heartbeat timer sorts
 * ahead of every pending handshake, and a burst of N connections costs N^2
 * steps per thread; 16384 ranks on 2 cores took 5.3-5.7 s instead of
 * 9.5-11.5 s with the shorter limit (docs/performance.md). A handshake is
 * a few round trips; one that takes seconds is stalled, and libzmq's
 * client reconnects and resends. */
static void s_peer_timeouts(void *sock, int timeout_ms)
{
    int ivl = timeout_ms / 3 > 100 ? timeout_ms / 3 : 100;
    /* At least a second (or the whole timeout, when that is shorter): a
     * CURVE handshake over a slow link, or on a loaded machine, must fit. */
    int floor_ms = timeout_ms < 1000 ? timeout_ms : 1000;
    int handshake = ivl / 2 > floor_ms ? ivl / 2 : floor_ms;
    zmq_setsockopt(sock, ZMQ_HANDSHAKE_IVL, &handshake, sizeof handshake);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_TIMEOUT, &timeout_ms, sizeof timeout_ms);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_TTL, &timeout_ms, sizeof timeout_ms);
}

static zsock_t *s_router(zcert_t *cert, int peer_timeout_ms)
{
    zsock_t *router = zsock_new(ZMQ_ROUTER);
    if (!router)
        return NULL;
    void *sock = zsock_resolve(router);
    int64_t max = RDZV_HARD_MAX_FRAME;
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof max);
    s_peer_timeouts(sock, peer_timeout_ms);
    zsock_set_linger(router, 0);
    /* What a peer may leave unread is counted in bytes by sendq.c, which
     * stops feeding one that does not read: libzmq's own limit counts
     * messages, and a reader's as read only every few dozen. RCVHWM: what
     * a peer may send ahead before TCP holds it back. Without it a flood
     * grows rdzvd without bound; with it libzmq 4.3 stops reading a peer
     * that floods, and a reset from that peer before rdzvd has drained it
     * can still reach libzmq's assertion (docs/reliability.md). */
    zsock_set_sndhwm(router, 0);
    zsock_set_rcvhwm(router, RDZV_PEER_RCVHWM);
    zsock_set_router_mandatory(router, 1);
    /* A rendezvous is a burst of connects; libzmq's default backlog of 100
     * turns the burst into SYN retries. */
    zsock_set_backlog(router, RDZV_LISTEN_BACKLOG);
    if (cert) {
        zcert_apply(cert, router);
        zsock_set_curve_server(router, 1);
    }
    return router;
}

/* Binds the shards' ROUTERs: the SO_REUSEPORT listeners dealt to them in
 * turn where rdzvd can open them itself, else libzmq binds the endpoint for
 * a single shard. */
static int s_bind(rdzv_server_t *self, const char *endpoint, char *err, size_t errlen)
{
    if (self->listeners == 1 && !rdzv_listen_shardable(endpoint)) {
        if (zsock_bind(self->set.shards[0].router, "%s", endpoint) < 0) {
            snprintf(err, errlen, "cannot bind %s: %s", endpoint, zmq_strerror(zmq_errno()));
            return -1;
        }
        return 0;
    }
    int n = self->listeners, fds[RDZV_MAX_LISTENERS];
    if (rdzv_listen_group(endpoint, n, fds, err, errlen) < 0)
        return -1;
    for (int i = 0; i < n; i++) {
        zsock_t *router = self->set.shards[i % self->set.count].router;
        void *sock = zsock_resolve(router);
        /* libzmq takes the listening socket as it is and closes it later;
         * a ROUTER may hold several. */
        zmq_setsockopt(sock, ZMQ_USE_FD, &fds[i], sizeof fds[i]);
        if (zsock_bind(router, "%s", endpoint) < 0) {
            snprintf(err, errlen, "cannot serve %s: %s", endpoint, zmq_strerror(zmq_errno()));
            for (int j = i; j < n; j++)
                close(fds[j]);
            return -1;
        }
    }
    return 0;
}

rdzv_server_t *rdzv_server_new(rdzv_core_t *core, const char *endpoint, int shards, int listeners,
                               const rdzv_server_security_t *security,
                               char *err, size_t errlen)
{
    if (shards < 1 || shards > RDZV_MAX_SHARDS) {
        snprintf(err, errlen, "--shards must be in [1, %d]", RDZV_MAX_SHARDS);
        return NULL;
    }
    if ((shards > 1 || listeners > 1) && !rdzv_listen_shardable(endpoint)) {
        snprintf(err, errlen, "--shards %d and --listeners %d need a tcp://ADDRESS:PORT "
                 "endpoint, not %s", shards, listeners, endpoint);
        return NULL;
    }
    if (listeners < shards || listeners > RDZV_MAX_LISTENERS) {
        snprintf(err, errlen, "--listeners must be in [--shards, %d]", RDZV_MAX_LISTENERS);
        return NULL;
    }
    rdzv_server_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->set.core = core;
    self->client_keys = -1;
    self->set.count = shards;
    self->listeners = listeners;
    self->set.shards = calloc((size_t) shards, sizeof *self->set.shards);
    zcert_t *cert = NULL;
    if (!self->set.shards || s_start_auth(self, security, &cert, err, errlen) < 0) {
        rdzv_server_destroy(&self);
        return NULL;
    }
    int rc = 0;
    int io_threads = zmq_ctx_get(zsys_init(), ZMQ_IO_THREADS);
    for (int i = 0; i < shards && rc == 0; i++) {
        zsock_t *router = s_router(cert, security && security->peer_timeout_ms > 0
                                               ? security->peer_timeout_ms
                                               : RDZV_DEFAULT_PEER_TIMEOUT_MS);
        /* Each shard's connections on I/O threads of its own: a release
         * then hands its replies to a few threads kept busy rather than
         * waking every thread for every shard. */
        uint64_t affinity = rdzv_io_affinity(i, shards, io_threads);
        if (router && shards > 1)
            zmq_setsockopt(zsock_resolve(router), ZMQ_AFFINITY, &affinity, sizeof affinity);
        rc = router ? rdzv_shard_init(&self->set.shards[i], &self->set, i, router) : -1;
        if (rc < 0)
            snprintf(err, errlen, "cannot create a ROUTER socket");
    }
    zcert_destroy(&cert);
    if (rc < 0 || s_bind(self, endpoint, err, errlen) < 0) {
        rdzv_server_destroy(&self);
        return NULL;
    }
    self->endpoint = zsock_last_endpoint(self->set.shards[0].router);
    /* Counted once every socket and listener of rdzvd's own is open. */
    long cap = security && security->max_connections > 0 ? security->max_connections
                                                         : rdzv_fds_connection_cap(rdzv_fds_raise());
    for (int i = 0; i < shards; i++)
        self->set.shards[i].conns.max = cap;
    rdzv_core_set_connection_cap(core, cap);
    self->max_connections = cap;
    return self;
}

void rdzv_server_destroy(rdzv_server_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_server_t *self = *self_p;
    rdzv_server_stop(self);
    for (int i = 0; self->set.shards && i < self->set.count; i++)
        rdzv_shard_join(&self->set.shards[i]);
    for (int i = 0; self->set.shards && i < self->set.count; i++)
        rdzv_shard_destroy(&self->set.shards[i]);
    free(self->set.shards);
    zactor_destroy(&self->auth);
    free(self->endpoint);
    free(self);
    *self_p = NULL;
}

void rdzv_server_stop(rdzv_server_t *self)
{
    rdzv_shard_set_stop(&self->set);
}

int rdzv_server_run(rdzv_server_t *self)
{
    /* Signals stay with this thread, whose poll they interrupt. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int rc = 0;
    for (int i = 1; i < self->set.count && rc == 0; i++)
        rc = rdzv_shard_start(&self->set.shards[i]);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0)
        rdzv_shard_loop(&self->set.shards[0]);
    rdzv_server_stop(self);
    return rc;
}

int rdzv_server_client_keys(const rdzv_server_t *self)
{
    return self->client_keys;
}

long rdzv_server_max_connections(const rdzv_server_t *self)
{
    return self->max_connections;
}

const char *rdzv_server_endpoint(const rdzv_server_t *self)
{
    return self->endpoint;
}
