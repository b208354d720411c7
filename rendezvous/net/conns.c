#include "conns.h"
#include "log.h"

#include <arpa/inet.h>
#include <czmq.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>

int rdzv_conns_init(rdzv_conns_t *self, rdzv_core_t *core, void *router, int index, long max)
{
    memset(self, 0, sizeof *self);
    self->core = core;
    self->max = max;
    char ep[96];
    snprintf(ep, sizeof ep, "inproc://rdzv-conns-%p-%d", (void *) self, index);
    if (zmq_socket_monitor(router, ep, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED
                                           | ZMQ_EVENT_ACCEPT_FAILED
                                           | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                                           | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) < 0)
        return -1;
    self->monitor = zmq_socket(zsys_init(), ZMQ_PAIR);
    /* Unbounded: an event lost would leave the count wrong for good, and
     * libzmq's I/O thread must never wait on this queue. */
    int zero = 0;
    if (!self->monitor || zmq_setsockopt(self->monitor, ZMQ_RCVHWM, &zero, sizeof zero) < 0
        || zmq_connect(self->monitor, ep) < 0)
        return -1;
    return 0;
}

void rdzv_conns_destroy(rdzv_conns_t *self)
{
    if (self->monitor) {
        int zero = 0;
        zmq_setsockopt(self->monitor, ZMQ_LINGER, &zero, sizeof zero);
        zmq_close(self->monitor);
    }
    self->monitor = NULL;
    free(self->v);
    self->v = NULL;
    self->len = self->cap = 0;
}

/* The connection on fd that rdzvd shut down and libzmq has not reported
 * closed yet. */
static rdzv_conn_watch_t *s_find(rdzv_conns_t *self, int fd)
{
    for (size_t i = 0; i < self->len; i++)
        if (self->v[i].fd == fd)
            return &self->v[i];
    return NULL;
}

static void s_forget(rdzv_conns_t *self, rdzv_conn_watch_t *w)
{
    *w = self->v[--self->len];
}

/* Shuts a connection down that libzmq accepted over the cap, and watches
 * for its close (where it is counted). Safe only here, at its accept:
 * libzmq 4.3's engine aborts the process if its heartbeat timer fires
 * after a hang-up came while the peer's input was throttled (a full queue
 * of requests unread), and a connection this new has sent nothing yet.
 * rdzvd shuts down no other connection (sendq.h). */
static void s_shut(rdzv_conns_t *self, int fd, rdzv_peer_drop_t why)
{
    if (shutdown(fd, SHUT_RDWR) < 0)
        return;
    if (self->len == self->cap) {
        size_t cap = self->cap ? self->cap * 2 : 16;
        rdzv_conn_watch_t *v = realloc(self->v, cap * sizeof *v);
        if (!v)
            return;
        self->v = v;
        self->cap = cap;
    }
    self->v[self->len++] = (rdzv_conn_watch_t) { .fd = fd, .why = why };
}

/* Remembers where the connection on fd comes from ("10.0.0.7:51234"). */
static void s_remember(rdzv_conns_t *self, int fd)
{
    rdzv_conn_recent_t *r = &self->recent[self->recent_next++ % RDZV_CONNS_RECENT];
    r->fd = fd;
    snprintf(r->addr, sizeof r->addr, "an unknown address");
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "";
    if (getpeername(fd, (struct sockaddr *) &ss, &len) < 0)
        return;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *) &ss;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        snprintf(r->addr, sizeof r->addr, "%s:%d", host, ntohs(in->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *) &ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        snprintf(r->addr, sizeof r->addr, "[%s]:%d", host, ntohs(in6->sin6_port));
    } else if (ss.ss_family == AF_UNIX) {
        snprintf(r->addr, sizeof r->addr, "a unix socket");
    }
}

/* A refused handshake, logged when libzmq reports it, with the cause the
 * event itself carries. The event names no peer: the newest accepted
 * connection is the usual one (a handshake follows its accept at once),
 * which under a storm of connections may be another's. At most a line
 * every 10 s per cause, saying how many went unlogged since. */
static void s_log_refused(rdzv_conns_t *self, int kind, const char *why, int64_t now)
{
    if (now < self->next_refused_log[kind]) {
        self->refused_unlogged[kind]++;
        return;
    }
    self->next_refused_log[kind] = now + 10000;
    char more[48] = "";
    if (self->refused_unlogged[kind])
        snprintf(more, sizeof more, " (%u more like it since the last line)",
                 self->refused_unlogged[kind]);
    const char *addr = self->recent_next
                       ? self->recent[(self->recent_next - 1) % RDZV_CONNS_RECENT].addr
                       : "an unknown address";
    rdzv_core_log("refuse", "handshake from %s: %s%s", addr, why, more);
    self->refused_unlogged[kind] = 0;
}

static void s_on_accepted(rdzv_conns_t *self, int fd, int64_t now)
{
    s_remember(self, fd);
    long live = rdzv_core_connections_add(self->core, 1);
    if (live <= self->max)
        return;
    s_shut(self, fd, RDZV_PEER_DROP_CONNECTION_CAP);
    if (now >= self->next_cap_log) {
        self->next_cap_log = now + 60000;
        rdzv_core_log("connections", "%ld open, --max-connections allows %ld: new ones are "
                      "closed (each is an open file; raise the limit on open files and "
                      "--max-connections, or find who holds them)", live, self->max);
    }
}

static void s_on_event(rdzv_conns_t *self, uint16_t event, int32_t value, int64_t now)
{
    if (event == ZMQ_EVENT_ACCEPTED) {
        s_on_accepted(self, value, now);
    } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
        /* value: the ZAP status; 400 is a client key not in --clients. */
        s_log_refused(self, 0, value == 400 ? "its CURVE key is not in --clients (ZAP 400)"
                                            : "the ZAP handler said no", now);
    } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
        s_log_refused(self, 1, value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
                               ? "it does not speak CURVE (no keys, or plaintext)"
                               : value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC
                               ? "a CURVE message did not decrypt (the client has another "
                                 "server key?)"
                               : "a ZMTP protocol error", now);
    } else if (event == ZMQ_EVENT_DISCONNECTED) {
        rdzv_core_connections_add(self->core, -1);
        rdzv_conn_watch_t *w = s_find(self, value);
        if (w) {
            rdzv_core_count_peer_dropped(self->core, w->why);
            s_forget(self, w);
        }
    } else if (event == ZMQ_EVENT_ACCEPT_FAILED && now >= self->next_accept_log) {
        self->next_accept_log = now + 60000;
        rdzv_core_log("connections", "cannot accept a connection: %s", strerror(value));
    }
}

void rdzv_conns_on_events(rdzv_conns_t *self, int64_t now_ms)
{
    for (;;) {
        zmq_msg_t head;
        zmq_msg_init(&head);
        if (zmq_msg_recv(&head, self->monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&head);
            return;
        }
        uint16_t event = 0;
        int32_t value = -1;
        if (zmq_msg_size(&head) >= 6) {
            const unsigned char *p = zmq_msg_data(&head);
            memcpy(&event, p, sizeof event);
            memcpy(&value, p + 2, sizeof value);
        }
        /* The second frame names the endpoint: not needed. */
        while (zmq_msg_more(&head)) {
            zmq_msg_close(&head);
            zmq_msg_init(&head);
            if (zmq_msg_recv(&head, self->monitor, ZMQ_DONTWAIT) < 0)
                break;
        }
        zmq_msg_close(&head);
        s_on_event(self, event, value, now_ms);
    }
}
