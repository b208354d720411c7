/* DEALER transport of librdzv: request/reply matched by id, with resends.
 *
 * Resending the same frame is safe because every rdzv request is idempotent
 * for a given session (a repeated join is a resume); it is what carries a
 * client through a lost reply or a rdzvd restart. */
#include "transport.h"
#include "context.h"
#include "security.h"

#include "rdzv.h"
#include "rdzv_private.h"
#include "rdzv_util.h"

#include <errno.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <zmq.h>

struct rdzv_transport {
    void *ctx;
    void *sock;
    int64_t next_id;
    int sends;
    rdzv_security_t *security;   /* keys and token, read once */
};

void rdzv_set_error(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static int s_set_int(void *sock, int option, int value)
{
    return zmq_setsockopt(sock, option, &value, sizeof value);
}

bool rdzv_endpoint_wants_ipv6(const char *endpoint)
{
    const char *host = strncmp(endpoint, "tcp://", 6) == 0 ? endpoint + 6 : NULL;
    if (!host)
        return false;
    if (host[0] == '[')
        return true;                 /* an IPv6 literal */
    const char *colon = strrchr(host, ':');
    size_t n = colon ? (size_t) (colon - host) : strlen(host);
    char name[256];
    if (n == 0 || n >= sizeof name)
        return false;
    memcpy(name, host, n);
    name[n] = '\0';
    if (strcmp(name, "*") == 0)
        return false;
    /* A name with an IPv4 address stays on IPv4, as libzmq resolves by
     * default; only a name with IPv6 addresses alone (an IPv6-only
     * cluster) turns IPv6 on. */
    struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
    struct addrinfo *found = NULL;
    if (getaddrinfo(name, NULL, &hints, &found) == 0) {
        freeaddrinfo(found);
        return false;
    }
    hints.ai_family = AF_INET6;
    if (getaddrinfo(name, NULL, &hints, &found) == 0) {
        freeaddrinfo(found);
        return true;
    }
    return false;
}

/* LINGER 0: a client that gives up must not block exit on unsent frames.
 * IMMEDIATE: while disconnected, sends fail instead of queueing stale
 * copies that would all arrive at once after a reconnect. IPV6 only where
 * the endpoint needs it (rdzv_endpoint_wants_ipv6): with it on, libzmq
 * resolves a name to its IPv6 addresses alone, and `localhost` (::1 in a
 * Pod's /etc/hosts) or a dual-stack Service would miss an rdzvd listening
 * on IPv4. */
static int s_configure(void *sock, bool ipv6)
{
    if (s_set_int(sock, ZMQ_LINGER, 0) != 0
        || s_set_int(sock, ZMQ_IMMEDIATE, 1) != 0
        || s_set_int(sock, ZMQ_IPV6, ipv6) != 0
        || s_set_int(sock, ZMQ_RECONNECT_IVL, RDZV_RECONNECT_IVL_MS) != 0
        || s_set_int(sock, ZMQ_RECONNECT_IVL_MAX, RDZV_RECONNECT_IVL_MAX_MS) != 0
        || s_set_int(sock, ZMQ_HEARTBEAT_IVL, RDZV_HEARTBEAT_IVL_MS) != 0
        || s_set_int(sock, ZMQ_HEARTBEAT_TIMEOUT, RDZV_HEARTBEAT_TIMEOUT_MS) != 0)
        return -1;
    return 0;
}

rdzv_transport_t *rdzv_transport_new(const char *endpoint, char *err, size_t errlen)
{
    rdzv_transport_t *self = calloc(1, sizeof *self);
    if (!self) {
        rdzv_set_error(err, errlen, "out of memory");
        errno = ENOMEM;
        return NULL;
    }
    self->next_id = 1;
    self->ctx = rdzv_context_acquire();
    if (self->ctx)
        self->sock = zmq_socket(self->ctx, ZMQ_DEALER);
    if (!self->sock || s_configure(self->sock, rdzv_endpoint_wants_ipv6(endpoint)) != 0) {
        rdzv_set_error(err, errlen, "cannot create a ZeroMQ socket: %s",
                       zmq_strerror(zmq_errno()));
        rdzv_transport_destroy(&self);
        errno = EIO;
        return NULL;
    }
    if (!(self->security = rdzv_security_new(err, errlen))) {
        int saved = errno;
        rdzv_transport_destroy(&self);
        errno = saved;
        return NULL;
    }
    if (rdzv_security_apply(self->security, self->sock, err, errlen) < 0) {
        rdzv_transport_destroy(&self);
        errno = EACCES;
        return NULL;
    }
    if (zmq_connect(self->sock, endpoint) != 0) {
        int saved = zmq_errno();
        rdzv_set_error(err, errlen, "bad server endpoint '%s': %s", endpoint,
                       zmq_strerror(saved));
        rdzv_transport_destroy(&self);
        errno = saved == ENOMEM ? ENOMEM : EINVAL;
        return NULL;
    }
    return self;
}

void rdzv_transport_destroy(rdzv_transport_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_transport_t *self = *self_p;
    if (self->sock)
        zmq_close(self->sock);
    rdzv_context_release(self->ctx);
    rdzv_security_destroy(&self->security);
    free(self);
    *self_p = NULL;
}

int rdzv_transport_sends(const rdzv_transport_t *self)
{
    return self ? self->sends : 0;
}

/* Next resend interval: the current one with +-RDZV_RESEND_JITTER_PCT, so
 * that ranks started together do not resend in lockstep. */
static int64_t s_jittered(int64_t interval_ms)
{
    uint32_t r = 0;
    if (rdzv_random_bytes(&r, sizeof r) != 0)
        return interval_ms;
    int64_t span = interval_ms * RDZV_RESEND_JITTER_PCT / 100;
    return interval_ms - span + (int64_t) (r % (uint32_t) (2 * span + 1));
}

/* Parses one received frame; returns it if it is the reply to id, else
 * NULL (stale replies of earlier requests, garbage). */
static cJSON *s_match(zmq_msg_t *msg, int64_t id)
{
    cJSON *root = cJSON_ParseWithLength(zmq_msg_data(msg), zmq_msg_size(msg));
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return NULL;
    }
    const cJSON *rid = cJSON_GetObjectItemCaseSensitive(root, "id");
    if (!cJSON_IsNumber(rid) || rid->valuedouble != (double) id) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* Reads every frame that is ready; returns 1 with *reply set when one
 * answers id, 0 when none did, -1 on a socket error. */
static int s_drain(rdzv_transport_t *self, int64_t id, cJSON **reply)
{
    for (;;) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, self->sock, ZMQ_DONTWAIT) < 0) {
            int e = zmq_errno();
            zmq_msg_close(&msg);
            return e == EAGAIN || e == EINTR ? 0 : -1;
        }
        /* One frame per reply; a multipart message is not ours to parse. */
        bool single = !zmq_msg_more(&msg);
        *reply = single ? s_match(&msg, id) : NULL;
        zmq_msg_close(&msg);
        if (*reply)
            return 1;
    }
}

typedef struct {
    bool pending;           /* a copy is due but not yet on the wire */
    int64_t next_send_ms;
    int64_t interval_ms;
} s_schedule_t;

/* Tries to put the frame on the wire; EAGAIN (not connected) keeps it due. */
static int s_send(rdzv_transport_t *self, const char *text, s_schedule_t *sch)
{
    if (zmq_send(self->sock, text, strlen(text), ZMQ_DONTWAIT) < 0)
        return zmq_errno() == EAGAIN || zmq_errno() == EINTR ? 0 : -1;
    self->sends++;
    sch->pending = false;
    sch->next_send_ms = rdzv_now_ms() + s_jittered(sch->interval_ms);
    sch->interval_ms *= 2;
    if (sch->interval_ms > RDZV_RESEND_CAP_MS)
        sch->interval_ms = RDZV_RESEND_CAP_MS;
    return 0;
}

static int s_wait_reply(rdzv_transport_t *self, const char *text, int64_t id,
                        int64_t deadline_ms, cJSON **reply)
{
    s_schedule_t sch = { true, 0, RDZV_RESEND_FIRST_MS };
    for (;;) {
        int64_t now = rdzv_now_ms();
        if (now >= deadline_ms)
            return RDZV_ERR_TIMEOUT;
        if (!sch.pending && now >= sch.next_send_ms)
            sch.pending = true;
        int64_t until = sch.pending || sch.next_send_ms > deadline_ms
                        ? deadline_ms : sch.next_send_ms;
        zmq_pollitem_t item = { self->sock, 0, ZMQ_POLLIN, 0 };
        if (sch.pending)
            item.events |= ZMQ_POLLOUT;
        int rc = zmq_poll(&item, 1, (long) (until - now));
        if (rc < 0 && zmq_errno() != EINTR)
            return RDZV_ERR_IO;
        if (rc <= 0)
            continue;
        if ((item.revents & ZMQ_POLLOUT) && s_send(self, text, &sch) != 0)
            return RDZV_ERR_IO;
        if (item.revents & ZMQ_POLLIN) {
            int got = s_drain(self, id, reply);
            if (got != 0)
                return got > 0 ? RDZV_OK : RDZV_ERR_IO;
        }
    }
}

int rdzv_transport_call(rdzv_transport_t *self, cJSON *req, int64_t deadline_ms,
                        cJSON **reply_out, char *err, size_t errlen)
{
    int64_t id = self->next_id++;
    const char *token = rdzv_security_token(self->security);
    cJSON_DeleteItemFromObjectCaseSensitive(req, "id");
    cJSON_DeleteItemFromObjectCaseSensitive(req, "token");
    char *text = NULL;
    if (cJSON_AddNumberToObject(req, "id", (double) id)
        && (!token || cJSON_AddStringToObject(req, "token", token)))
        text = cJSON_PrintUnformatted(req);
    if (!text) {
        rdzv_set_error(err, errlen, "out of memory");
        return RDZV_ERR_IO;
    }
    self->sends = 0;
    *reply_out = NULL;
    int rc = s_wait_reply(self, text, id, deadline_ms, reply_out);
    free(text);
    if (rc == RDZV_ERR_TIMEOUT)
        rdzv_set_error(err, errlen, "no reply from the server before the deadline");
    else if (rc == RDZV_ERR_IO)
        rdzv_set_error(err, errlen, "ZeroMQ error: %s", zmq_strerror(zmq_errno()));
    return rc;
}
