#include "server.h"
#include "rdzv_proto.h"
#include "rdzv_util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define S_BATCH 4096             /* requests handled before one commit */
#define S_TICK_MS 100
#define S_COMMIT_WINDOW_MS 2         /* longest a reply waits for batch-mates */

struct rdzv_server {
    rdzv_core_t *core;
    zsock_t *router;
    zactor_t *auth;              /* ZAP handler checking client keys */
    zloop_t *loop;
    char *endpoint;
};

static void s_send_outbox(rdzv_server_t *self)
{
    size_t count = 0;
    rdzv_reply_t *out = rdzv_core_take_outbox(self->core, &count);
    void *sock = zsock_resolve(self->router);
    for (size_t i = 0; i < count; i++) {
        /* A peer that vanished is dropped by the ROUTER; nothing to do. */
        if (zmq_send(sock, out[i].peer.id, out[i].peer.len, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0)
            zmq_send(sock, out[i].text, strlen(out[i].text), ZMQ_DONTWAIT);
        free(out[i].text);
    }
    free(out);
}

static void s_drain_frames(void *sock)
{
    int more = 1;
    size_t size = sizeof more;
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &size) == 0 && more) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT);
        zmq_msg_close(&msg);
    }
}

/* Receives one [identity][payload] message; returns 1, 0 if none, -1 if the
 * message had the wrong shape (answered already). */
static int s_recv_one(rdzv_server_t *self, void *sock, int64_t now)
{
    rdzv_peer_t peer = { 0 };
    int n = zmq_recv(sock, peer.id, sizeof peer.id, ZMQ_DONTWAIT);
    if (n < 0)
        return 0;
    peer.len = (size_t) n > sizeof peer.id ? sizeof peer.id : (size_t) n;
    zmq_msg_t body;
    zmq_msg_init(&body);
    if (zmq_msg_recv(&body, sock, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&body);
        return -1;
    }
    if (zmq_msg_more(&body)) {
        s_drain_frames(sock);
        rdzv_core_error(self->core, &peer, RDZV_E_BAD_JSON,
                        "a request is exactly one frame");
    } else
        rdzv_core_handle(self->core, &peer, zmq_msg_data(&body), zmq_msg_size(&body), now);
    zmq_msg_close(&body);
    return 1;
}

static void s_commit_and_send(rdzv_server_t *self)
{
    rdzv_core_commit(self->core);
    s_send_outbox(self);
    /* stderr is fully buffered (rdzvd.c): one write per batch, not per line. */
    fflush(stderr);
}

/* Handles what is queued; returns how many requests that was. */
static int s_drain(rdzv_server_t *self, void *sock, int budget)
{
    int64_t now = rdzv_now_ms();
    int handled = 0;
    while (handled < budget && s_recv_one(self, sock, now) != 0)
        handled++;
    return handled;
}

/* Group commit: while requests keep arriving, keep handling them for up to
 * S_COMMIT_WINDOW_MS before the one fsync that covers them all, so a burst
 * that trickles in pays a few fsyncs rather than one per trickle. A lone
 * request waits at most one window. */
static int s_on_router(zloop_t *loop, zsock_t *reader, void *arg)
{
    rdzv_server_t *self = arg;
    void *sock = zsock_resolve(reader);
    pthread_mutex_lock(&self->core->lock);
    int handled = s_drain(self, sock, S_BATCH);
    int64_t until = rdzv_now_ms() + S_COMMIT_WINDOW_MS;
    while (handled < S_BATCH && rdzv_journal_pending(self->core->journal)
           && rdzv_now_ms() < until) {
        zmq_pollitem_t item = { .socket = sock, .events = ZMQ_POLLIN };
        if (zmq_poll(&item, 1, S_COMMIT_WINDOW_MS) <= 0)
            break;
        handled += s_drain(self, sock, S_BATCH - handled);
    }
    s_commit_and_send(self);
    pthread_mutex_unlock(&self->core->lock);
    return 0;
}

static int s_on_tick(zloop_t *loop, int timer_id, void *arg)
{
    rdzv_server_t *self = arg;
    pthread_mutex_lock(&self->core->lock);
    rdzv_core_tick(self->core, rdzv_now_ms());
    s_commit_and_send(self);
    pthread_mutex_unlock(&self->core->lock);
    return 0;
}

/* zauth must run before the socket binds so that no handshake escapes it. */
static int s_secure(rdzv_server_t *self, const rdzv_server_security_t *sec,
                    char *err, size_t errlen)
{
    if (!sec || (!sec->curve_secret && !sec->clients_dir))
        return 0;
    if (!sec->curve_secret || !sec->clients_dir) {
        snprintf(err, errlen, "--curve-secret and --clients go together");
        return -1;
    }
    zcert_t *cert = zcert_load(sec->curve_secret);
    if (!cert || streq(zcert_secret_txt(cert), "0000000000000000000000000000000000000000")) {
        zcert_destroy(&cert);
        snprintf(err, errlen, "cannot load a secret key from %s (--curve-secret)", sec->curve_secret);
        return -1;
    }
    struct stat st;
    if (stat(sec->clients_dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        zcert_destroy(&cert);
        snprintf(err, errlen, "--clients %s is not a directory", sec->clients_dir);
        return -1;
    }
    self->auth = zactor_new(zauth, NULL);
    zstr_sendx(self->auth, "CURVE", sec->clients_dir, NULL);
    zsock_wait(self->auth);
    zcert_apply(cert, self->router);
    zsock_set_curve_server(self->router, 1);
    zcert_destroy(&cert);
    return 0;
}

rdzv_server_t *rdzv_server_new(rdzv_core_t *core, const char *endpoint,
                               const rdzv_server_security_t *security,
                               char *err, size_t errlen)
{
    rdzv_server_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->core = core;
    self->router = zsock_new(ZMQ_ROUTER);
    if (!self->router) {
        snprintf(err, errlen, "cannot create a ROUTER socket");
        rdzv_server_destroy(&self);
        return NULL;
    }
    void *sock = zsock_resolve(self->router);
    int64_t max = RDZV_HARD_MAX_FRAME;
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof max);
    zsock_set_linger(self->router, 0);
    zsock_set_sndhwm(self->router, 0);
    zsock_set_rcvhwm(self->router, 0);
    /* A rendezvous is a burst of connects; libzmq's default backlog of 100
     * turns the burst into SYN retries. */
    zsock_set_backlog(self->router, 4096);
    if (s_secure(self, security, err, errlen) < 0) {
        rdzv_server_destroy(&self);
        return NULL;
    }
    if (zsock_bind(self->router, "%s", endpoint) < 0) {
        snprintf(err, errlen, "cannot bind %s: %s", endpoint, zmq_strerror(zmq_errno()));
        rdzv_server_destroy(&self);
        return NULL;
    }
    self->endpoint = zsock_last_endpoint(self->router);
    self->loop = zloop_new();
    zloop_reader(self->loop, self->router, s_on_router, self);
    zloop_timer(self->loop, S_TICK_MS, 0, s_on_tick, self);
    return self;
}

void rdzv_server_destroy(rdzv_server_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_server_t *self = *self_p;
    zloop_destroy(&self->loop);
    zsock_destroy(&self->router);
    zactor_destroy(&self->auth);
    free(self->endpoint);
    free(self);
    *self_p = NULL;
}

int rdzv_server_run(rdzv_server_t *self)
{
    zloop_start(self->loop);
    return 0;
}

const char *rdzv_server_endpoint(const rdzv_server_t *self)
{
    return self->endpoint;
}
