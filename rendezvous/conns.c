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

/* A reader that has stopped leaves at least this much unsent in the
 * kernel once its queue is full; one that reads, less. */
#define S_SLOW_OUTQ 4096

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
    self->len = self->cap = self->suspects = 0;
}

/* The entry for fd that is shut (or not). A number can have both: a
 * connection shut down whose close libzmq has not reported yet, and the
 * new connection that got its number since. */
static rdzv_conn_watch_t *s_find(rdzv_conns_t *self, int fd, bool shut)
{
    for (size_t i = 0; i < self->len; i++)
        if (self->v[i].fd == fd && self->v[i].shut == shut)
            return &self->v[i];
    return NULL;
}

static void s_forget(rdzv_conns_t *self, rdzv_conn_watch_t *w)
{
    self->suspects -= !w->shut;
    *w = self->v[--self->len];
}

static rdzv_conn_watch_t *s_add(rdzv_conns_t *self, int fd)
{
    if (self->len == self->cap) {
        size_t cap = self->cap ? self->cap * 2 : 16;
        rdzv_conn_watch_t *v = realloc(self->v, cap * sizeof *v);
        if (!v)
            return NULL;
        self->v = v;
        self->cap = cap;
    }
    rdzv_conn_watch_t *w = &self->v[self->len++];
    memset(w, 0, sizeof *w);
    w->fd = fd;
    return w;
}

/* Shuts the connection down; it is counted once libzmq closes it. */
static void s_shut(rdzv_conns_t *self, rdzv_conn_watch_t *w, rdzv_peer_drop_t why)
{
    if (shutdown(w->fd, SHUT_RDWR) < 0) {
        s_forget(self, w);
        return;
    }
    self->suspects -= !w->shut;
    w->shut = true;
    w->why = why;
}

void rdzv_conns_suspect(rdzv_conns_t *self, int fd, int64_t now_ms)
{
    struct stat st;
    if (fd < 3 || s_find(self, fd, false) || fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
        return;
    rdzv_conn_watch_t *w = s_add(self, fd);
    if (!w)
        return;
    w->ino = (unsigned long) st.st_ino;
    w->since_ms = now_ms;
    w->due_ms = now_ms + RDZV_CONNS_SLOW_MS;
    self->suspects++;
}

long rdzv_conns_check(rdzv_conns_t *self, int64_t now_ms)
{
    long next = -1;
    for (size_t i = 0; self->suspects && i < self->len;) {
        rdzv_conn_watch_t *w = &self->v[i];
        int64_t due = w->due_ms;
        if (w->shut) {
            i++;
            continue;
        }
        if (now_ms < due) {
            long left = (long) (due - now_ms);
            next = next < 0 || left < next ? left : next;
            i++;
            continue;
        }
        /* The same socket (a closed one's number may be a new connection's
         * by now), and still not reading. */
        struct stat st;
        int outq = 0;
        bool same = fstat(w->fd, &st) == 0 && (unsigned long) st.st_ino == w->ino;
        if (same && ioctl(w->fd, SIOCOUTQ, &outq) == 0 && outq >= S_SLOW_OUTQ) {
            s_shut(self, w, RDZV_PEER_DROP_SLOW_READER);
            i++;                     /* shut, or forgotten: v[i] is another now */
        } else if (same && now_ms - w->since_ms < RDZV_CONNS_SUSPECT_MS) {
            w->due_ms = now_ms + RDZV_CONNS_SLOW_MS;   /* look again */
            next = next < 0 || RDZV_CONNS_SLOW_MS < next ? RDZV_CONNS_SLOW_MS : next;
            i++;
        } else {
            s_forget(self, w);       /* v[i] is the last one now */
        }
    }
    return next;
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
    /* A suspect on this number is stale if its socket is not this one (its
     * close went unseen). It may well be this one: a peer's requests, and
     * its overflow, can come before the monitor reports its accept. */
    rdzv_conn_watch_t *stale = s_find(self, fd, false);
    struct stat st;
    if (stale && (fstat(fd, &st) < 0 || (unsigned long) st.st_ino != stale->ino))
        s_forget(self, stale);
    long live = rdzv_core_connections_add(self->core, 1);
    if (live <= self->max)
        return;
    rdzv_conn_watch_t *w = s_add(self, fd);
    if (w) {
        self->suspects++;            /* s_shut counts it out again */
        s_shut(self, w, RDZV_PEER_DROP_CONNECTION_CAP);
    }
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
        /* The shut one first: a live suspect may have its number now. */
        rdzv_conn_watch_t *w = s_find(self, value, true);
        if (!w)
            w = s_find(self, value, false);
        if (w && w->shut)
            rdzv_core_count_peer_dropped(self->core, w->why);
        if (w)
            s_forget(self, w);
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
