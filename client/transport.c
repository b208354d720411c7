/* DEALER transport of librdzv: request/reply matched by id, with resends,
 * to one server or to the replicas of an active/standby rdzvd.
 *
 * Resending the same frame is safe because every rdzv request is idempotent
 * for a given session (a repeated join is a resume); it is what carries a
 * client through a lost reply, a rdzvd restart, or a move to another
 * server. Each server has its own socket, and ids are the transport's, so
 * a late reply on any socket is still recognised by its id. */
#include "transport.h"
#include "context.h"
#include "route.h"
#include "security.h"

#include "rdzv.h"
#include "rdzv_private.h"
#include "rdzv_proto.h"
#include "rdzv_util.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <zmq.h>

/* The list's servers, then a spare slot for a leader that a standby named
 * and the list lacks (a name the list spells otherwise, or one Service
 * address in front of every replica). */
#define S_SLOTS (RDZV_MAX_SERVERS + 1)

typedef struct {
    char endpoint[RDZV_ENDPOINT_LEN];
    void *sock;                 /* NULL: the spare slot while unused */
    int64_t owed_since_ms;      /* a copy due since then drew no frame back; 0: none */
    bool sent;                  /* one of those copies went on the wire */
} s_server_t;

struct rdzv_transport {
    void *ctx;
    rdzv_security_t *security;
    s_server_t servers[S_SLOTS];
    int listed;                 /* servers of the list; the spare is servers[listed] */
    int cur;                    /* where copies go: the last to answer */
    int named_by;               /* the listed server that named the spare's leader */
    int64_t next_id;
    int sends;
    char unresolved[RDZV_ERR_LEN];  /* the last call's names that did not resolve */
};

/* One call: its frame, its resend schedule, and what standbys said. */
typedef struct {
    int64_t id;
    const char *text;
    bool pending;               /* a copy is due but not yet on the wire */
    int64_t next_send_ms;
    int64_t interval_ms;
    int64_t pause_ms;           /* the next pause before asking again */
    bool redirected;            /* the last answer was a not_leader */
    cJSON *refusal;             /* the last not_leader or unavailable reply */
    char malformed[RDZV_ERR_LEN];   /* why a frame was no reply at all; "": none */
} s_call_t;

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
 * copies that would all arrive at once after a reconnect; it is also how a
 * server that cannot be reached shows. IPV6 only where the endpoint needs
 * it (rdzv_endpoint_wants_ipv6): with it on, libzmq resolves a name to its
 * IPv6 addresses alone, and `localhost` (::1 in a Pod's /etc/hosts) or a
 * dual-stack Service would miss an rdzvd listening on IPv4. */
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

/* Opens slot i's socket to endpoint: 0, or -1 with err and errno set
 * (EIO, EACCES for CURVE keys libzmq refuses, EINVAL for an endpoint
 * libzmq refuses). */
static int s_open(rdzv_transport_t *self, int i, const char *endpoint, char *err, size_t errlen)
{
    s_server_t *s = &self->servers[i];
    snprintf(s->endpoint, sizeof s->endpoint, "%s", endpoint);
    s->owed_since_ms = 0;
    s->sent = false;
    s->sock = zmq_socket(self->ctx, ZMQ_DEALER);
    int rc = -1;
    if (!s->sock || s_configure(s->sock, rdzv_endpoint_wants_ipv6(endpoint)) != 0) {
        rdzv_set_error(err, errlen, "cannot create a ZeroMQ socket: %s",
                       zmq_strerror(zmq_errno()));
        errno = EIO;
    } else if (rdzv_security_apply(self->security, s->sock, err, errlen) < 0) {
        errno = EACCES;
    } else if (zmq_connect(s->sock, endpoint) != 0) {
        int saved = zmq_errno();
        rdzv_set_error(err, errlen, "bad server endpoint '%s': %s", endpoint,
                       zmq_strerror(saved));
        errno = saved == ENOMEM ? ENOMEM : EINVAL;
    } else {
        rc = 0;
    }
    if (rc < 0 && s->sock) {
        zmq_close(s->sock);
        s->sock = NULL;
    }
    return rc;
}

rdzv_transport_t *rdzv_transport_new(const rdzv_endpoints_t *servers, char *err, size_t errlen)
{
    rdzv_transport_t *self = calloc(1, sizeof *self);
    if (!self) {
        rdzv_set_error(err, errlen, "out of memory");
        errno = ENOMEM;
        return NULL;
    }
    self->next_id = 1;
    self->ctx = rdzv_context_acquire();
    if (!self->ctx) {
        rdzv_set_error(err, errlen, "cannot create a ZeroMQ context: %s",
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
    for (; self->listed < servers->count; self->listed++) {
        if (s_open(self, self->listed, servers->endpoint[self->listed], err, errlen) < 0) {
            int saved = errno;
            rdzv_transport_destroy(&self);
            errno = saved;
            return NULL;
        }
    }
    return self;
}

void rdzv_transport_destroy(rdzv_transport_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_transport_t *self = *self_p;
    for (int i = 0; i < S_SLOTS; i++) {
        if (self->servers[i].sock)
            zmq_close(self->servers[i].sock);
    }
    rdzv_context_release(self->ctx);
    rdzv_security_destroy(&self->security);
    free(self);
    *self_p = NULL;
}

const char *rdzv_transport_endpoint(const rdzv_transport_t *self)
{
    return self->servers[self->cur].endpoint;
}

int rdzv_transport_sends(const rdzv_transport_t *self)
{
    return self ? self->sends : 0;
}

/* Next resend interval or pause: interval_ms with +-RDZV_RESEND_JITTER_PCT,
 * so that ranks started together do not resend in lockstep. */
static int64_t s_jittered(int64_t interval_ms)
{
    uint32_t r = 0;
    if (rdzv_random_bytes(&r, sizeof r) != 0)
        return interval_ms;
    int64_t span = interval_ms * RDZV_RESEND_JITTER_PCT / 100;
    return interval_ms - span + (int64_t) (r % (uint32_t) (2 * span + 1));
}

/* ---- Which server: the list, the spare, moving between them ---- */

static int s_count(const rdzv_transport_t *self)
{
    return self->listed + (self->servers[self->listed].sock != NULL);
}

/* The server after slot i: round robin over the list; from the spare, the
 * one after the server that named it. */
static int s_next(const rdzv_transport_t *self, int i)
{
    if (i == self->listed)
        i = self->named_by;
    return (i + 1) % self->listed;
}

/* Makes slot i current; a server moved to gets a fresh chance. */
static void s_move(rdzv_transport_t *self, int i)
{
    if (i == self->cur)
        return;
    self->cur = i;
    self->servers[i].owed_since_ms = 0;
    self->servers[i].sent = false;
}

/* Points the spare slot at endpoint, named by slot from: its index, or -1
 * when libzmq will not connect there. */
static int s_open_spare(rdzv_transport_t *self, const char *endpoint, int from)
{
    s_server_t *spare = &self->servers[self->listed];
    if (spare->sock)
        zmq_close(spare->sock);
    spare->sock = NULL;
    if (from < self->listed)
        self->named_by = from;
    if (s_open(self, self->listed, endpoint, NULL, 0) < 0)
        return -1;
    return self->listed;
}

/* The slot of the leader a not_leader reply's error names, opening the
 * spare for one outside the list; -1 when it names none to go to (left
 * out while no leader is elected, malformed, or the sender itself). */
static int s_leader(rdzv_transport_t *self, const cJSON *error, int from)
{
    const cJSON *leader = cJSON_GetObjectItemCaseSensitive(error, "leader");
    char endpoint[RDZV_ENDPOINT_LEN];
    if (!cJSON_IsString(leader)
        || rdzv_endpoint_normalize(leader->valuestring, endpoint, sizeof endpoint) < 0
        || strcmp(endpoint, self->servers[from].endpoint) == 0)
        return -1;
    for (int i = 0; i < s_count(self); i++) {
        if (strcmp(self->servers[i].endpoint, endpoint) == 0)
            return i;
    }
    /* The spare may be the sender, a leader no more: it is replaced. */
    return s_open_spare(self, endpoint, from);
}

/* Whether the current server, owing a reply for a due copy, has had its
 * chance: see RDZV_SERVER_CONNECT_MS and RDZV_SERVER_SILENT_MS. */
static bool s_exhausted(const rdzv_transport_t *self, const s_call_t *call, int64_t now)
{
    const s_server_t *s = &self->servers[self->cur];
    if (s_count(self) < 2 || !call->pending || s->owed_since_ms == 0)
        return false;
    return now - s->owed_since_ms >= (s->sent ? RDZV_SERVER_SILENT_MS : RDZV_SERVER_CONNECT_MS);
}

/* A copy is due: the current server owes a frame from now on, and moves
 * aside for the next once it had its chance. */
static void s_owe(rdzv_transport_t *self, s_call_t *call, int64_t now)
{
    if (self->servers[self->cur].owed_since_ms == 0)
        self->servers[self->cur].owed_since_ms = now;
    if (!s_exhausted(self, call, now))
        return;
    s_move(self, s_next(self, self->cur));
    self->servers[self->cur].owed_since_ms = now;
    call->redirected = false;
}

/* Asks again after delay_ms (0: at once), wherever s_move pointed. */
static void s_ask_again(s_call_t *call, bool at_once, int64_t now)
{
    call->pending = false;
    call->next_send_ms = now;
    if (at_once)
        return;
    call->next_send_ms += s_jittered(call->pause_ms);
    call->pause_ms *= 2;
    if (call->pause_ms > RDZV_RETRY_PAUSE_CAP_MS)
        call->pause_ms = RDZV_RETRY_PAUSE_CAP_MS;
}

static bool s_has_code(const cJSON *error, const char *code)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(error, "code");
    return cJSON_IsString(c) && strcmp(c->valuestring, code) == 0;
}

/* Takes the reply (consumed) to this call from slot from: true when it is
 * the answer, the one *reply_out gets; false when the call goes on after
 * a not_leader (to the leader it names, at once unless the last answer was
 * a not_leader too, which two standbys naming each other would make
 * endless) or an unavailable (after a pause). */
static bool s_answer(rdzv_transport_t *self, s_call_t *call, int from, cJSON *reply,
                     int64_t now)
{
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(reply, "error");
    bool not_leader = cJSON_IsObject(error) && s_has_code(error, RDZV_E_NOT_LEADER);
    if (!not_leader && !(cJSON_IsObject(error) && s_has_code(error, RDZV_E_UNAVAILABLE))) {
        s_move(self, from);     /* later calls start where this one ended */
        return true;
    }
    int to = not_leader ? s_leader(self, error, from) : -1;
    bool at_once = to >= 0 && !call->redirected;
    call->redirected = not_leader;
    cJSON_Delete(call->refusal);
    call->refusal = reply;
    s_move(self, to >= 0 ? to : s_next(self, from));
    s_ask_again(call, at_once, now);
    return false;
}

/* ---- The wire ---- */

/* Whether text holds an escaped NUL (\u0000) outside an escaped backslash:
 * cJSON would cut the string there, and the caller get less than was sent. */
static bool s_has_nul_escape(const char *text, size_t len)
{
    static const char nul[] = "u0000";
    for (size_t i = 0; i + sizeof nul <= len; i++) {
        if (text[i] != '\\')
            continue;
        if (strncasecmp(text + i + 1, nul, sizeof nul - 1) == 0)
            return true;
        i++;                    /* the escaped character, a backslash perhaps */
    }
    return false;
}

/* Why root, a parsed JSON value, is no reply to call id; NULL when it is,
 * "" when it is an older call's (dropped, as ids only grow). */
static const char *s_why_not(const cJSON *root, int64_t id, char *why, size_t len)
{
    if (!cJSON_IsObject(root))
        return cJSON_IsArray(root) ? "a JSON array, not an object" : "JSON, but not an object";
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "v");
    const cJSON *rid = cJSON_GetObjectItemCaseSensitive(root, "id");
    if (!cJSON_IsNumber(rid))
        return "no numeric \"id\"";
    double got = rid->valuedouble;
    if (got == (double) id) {
        if (cJSON_IsNumber(v) && v->valuedouble == RDZV_PROTO_VERSION)
            return NULL;
        char *text = v ? cJSON_PrintUnformatted(v) : NULL;
        snprintf(why, len, "unsupported protocol version %.32s (librdzv speaks %d)",
                 text ? text : "(none)", RDZV_PROTO_VERSION);
        free(text);
        return why;
    }
    if (got >= 0 && got < (double) id && got == (double) (int64_t) got)
        return "";
    snprintf(why, len, "\"id\" %.17g, but the request's is %" PRId64, got, id);
    return why;
}

/* Parses one received frame: 1 with *reply set when it is the reply to id,
 * 0 for an older call's reply (dropped), -1 with why set when it is no
 * reply at all. */
static int s_match(zmq_msg_t *msg, int64_t id, cJSON **reply, char *why, size_t len)
{
    *reply = NULL;
    const char *text = zmq_msg_data(msg);
    size_t size = zmq_msg_size(msg);
    if (zmq_msg_more(msg)) {
        snprintf(why, len, "a multipart message (a reply is one frame)");
        return -1;
    }
    cJSON *root = cJSON_ParseWithLength(text, size);
    char buf[RDZV_ERR_LEN];
    const char *not = root ? s_why_not(root, id, buf, sizeof buf) : "not JSON";
    if (!not && s_has_nul_escape(text, size))
        not = "a string holds \\u0000 (NUL), which librdzv cannot carry";
    if (!not) {
        *reply = root;
        return 1;
    }
    cJSON_Delete(root);
    if (!*not)
        return 0;
    snprintf(why, len, "%s", not);
    return -1;
}

/* Reads the frames ready on slot i up to the first that answers id;
 * returns 1 with *reply set, 0 when none did, -1 on a socket error, -2
 * when a frame was no reply at all (call->malformed says why). Any frame
 * shows the server alive: it owes nothing more. */
static int s_drain(rdzv_transport_t *self, int i, s_call_t *call, cJSON **reply)
{
    s_server_t *s = &self->servers[i];
    for (;;) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, s->sock, ZMQ_DONTWAIT) < 0) {
            int e = zmq_errno();
            zmq_msg_close(&msg);
            return e == EAGAIN || e == EINTR ? 0 : -1;
        }
        s->owed_since_ms = 0;
        s->sent = false;
        char why[RDZV_ERR_LEN];
        int matched = s_match(&msg, call->id, reply, why, sizeof why);
        /* The rest of a multipart message is the same message. */
        while (zmq_msg_more(&msg) && zmq_msg_recv(&msg, s->sock, ZMQ_DONTWAIT) >= 0)
            ;
        zmq_msg_close(&msg);
        if (matched < 0)
            snprintf(call->malformed, sizeof call->malformed, "malformed reply from %.100s: %.120s",
                     s->endpoint, why);
        if (matched != 0)
            return matched > 0 ? 1 : -2;
    }
}

/* Tries to put the frame on the current server's wire; EAGAIN (not
 * connected) keeps it due. */
static int s_send(rdzv_transport_t *self, s_call_t *call)
{
    s_server_t *s = &self->servers[self->cur];
    if (zmq_send(s->sock, call->text, strlen(call->text), ZMQ_DONTWAIT) < 0)
        return zmq_errno() == EAGAIN || zmq_errno() == EINTR ? 0 : -1;
    self->sends++;
    s->sent = true;
    call->pending = false;
    call->next_send_ms = rdzv_now_ms() + s_jittered(call->interval_ms);
    call->interval_ms *= 2;
    if (call->interval_ms > RDZV_RESEND_CAP_MS)
        call->interval_ms = RDZV_RESEND_CAP_MS;
    return 0;
}

/* When the loop must look again: the deadline, the next resend, or the
 * moment the current server's chance runs out (s_exhausted). A server that
 * was sent copies and died holding them never makes room for the next:
 * without that wake the call would wait on it until the deadline. */
static int64_t s_wake_ms(const rdzv_transport_t *self, const s_call_t *call, int64_t deadline_ms)
{
    int64_t until = deadline_ms;
    if (!call->pending && call->next_send_ms < until)
        until = call->next_send_ms;
    const s_server_t *s = &self->servers[self->cur];
    int64_t give_up = s->owed_since_ms
                      + (s->sent ? RDZV_SERVER_SILENT_MS : RDZV_SERVER_CONNECT_MS);
    if (call->pending && s_count(self) > 1 && s->owed_since_ms && give_up < until)
        until = give_up;
    return until;
}

/* Polls every open socket for replies, and the current one for room when
 * a copy is due, until the wake time seen from now; returns 1 with *reply
 * the answer, 0 to go on, -1 on a socket error, -2 on a malformed frame. */
static int s_poll(rdzv_transport_t *self, s_call_t *call, int64_t now, int64_t deadline_ms,
                  cJSON **reply)
{
    zmq_pollitem_t items[S_SLOTS];
    int slot[S_SLOTS], n = 0;
    for (int i = 0; i < S_SLOTS; i++) {
        if (!self->servers[i].sock)
            continue;
        items[n] = (zmq_pollitem_t) { self->servers[i].sock, 0, ZMQ_POLLIN, 0 };
        if (call->pending && i == self->cur)
            items[n].events |= ZMQ_POLLOUT;
        slot[n++] = i;
    }
    /* Never negative: zmq_poll would wait for ever. */
    int64_t wait_ms = s_wake_ms(self, call, deadline_ms) - now;
    int rc = zmq_poll(items, n, (long) (wait_ms > 0 ? wait_ms : 0));
    if (rc < 0 && zmq_errno() != EINTR)
        return -1;
    for (int k = 0; k < n && rc > 0; k++) {
        if ((items[k].revents & ZMQ_POLLOUT) && s_send(self, call) != 0)
            return -1;
        if (!(items[k].revents & ZMQ_POLLIN))
            continue;
        cJSON *got = NULL;
        int drained = s_drain(self, slot[k], call, &got);
        if (drained < 0)
            return drained;
        if (drained == 0)
            continue;
        if (s_answer(self, call, slot[k], got, rdzv_now_ms())) {
            *reply = got;
            return 1;
        }
        return 0;       /* moved on: the items no longer say where to send */
    }
    return 0;
}

static int s_wait_reply(rdzv_transport_t *self, s_call_t *call, int64_t deadline_ms,
                        cJSON **reply)
{
    for (;;) {
        int64_t now = rdzv_now_ms();
        if (now >= deadline_ms && call->refusal) {
            *reply = call->refusal;     /* what the servers said is the answer */
            call->refusal = NULL;
            return RDZV_OK;
        }
        if (now >= deadline_ms)
            return RDZV_ERR_TIMEOUT;
        if (!call->pending && now >= call->next_send_ms)
            call->pending = true;
        if (call->pending)
            s_owe(self, call, now);
        int rc = s_poll(self, call, now, deadline_ms, reply);
        if (rc != 0)
            return rc > 0 ? RDZV_OK : RDZV_ERR_IO;  /* -2: call->malformed says why */
    }
}

const char *rdzv_transport_unresolved(const rdzv_transport_t *self)
{
    return self->unresolved;
}

/* Which names of the list do not resolve, after a call that put nothing on
 * the wire: libzmq retries a name at each reconnect but never says that
 * it failed, and a wait that ends in "no reply" would hide a typo or a
 * missing DNS record. Asked only then, so that calls do not load DNS. */
static void s_check_names(rdzv_transport_t *self)
{
    size_t used = 0;
    self->unresolved[0] = '\0';
    for (int i = 0; i < s_count(self) && used < sizeof self->unresolved; i++) {
        char why[RDZV_ERR_LEN];
        if (rdzv_route_resolve(self->servers[i].endpoint, why, sizeof why) == 0
            || errno != EAGAIN || strstr(self->unresolved, why))
            continue;
        int n = snprintf(self->unresolved + used, sizeof self->unresolved - used, "%s%s",
                         used ? "; " : "", why);
        used += n > 0 ? (size_t) n : 0;
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
    char id_text[24];
    snprintf(id_text, sizeof id_text, "%" PRId64, id);
    /* As an integer: cJSON prints a large double rounded. */
    if (cJSON_AddRawToObject(req, "id", id_text)
        && (!token || cJSON_AddStringToObject(req, "token", token)))
        text = cJSON_PrintUnformatted(req);
    if (!text) {
        rdzv_set_error(err, errlen, "out of memory");
        return RDZV_ERR_IO;
    }
    self->sends = 0;
    self->unresolved[0] = '\0';
    *reply_out = NULL;
    s_call_t call = { .id = id, .text = text, .pending = true,
                      .interval_ms = RDZV_RESEND_FIRST_MS,
                      .pause_ms = RDZV_RETRY_PAUSE_FIRST_MS };
    int rc = s_wait_reply(self, &call, deadline_ms, reply_out);
    cJSON_Delete(call.refusal);
    free(text);
    if (rc == RDZV_ERR_TIMEOUT && self->sends == 0)
        s_check_names(self);
    if (rc == RDZV_ERR_TIMEOUT && self->unresolved[0])
        rdzv_set_error(err, errlen, "%s", self->unresolved);
    else if (rc == RDZV_ERR_TIMEOUT)
        rdzv_set_error(err, errlen, "no reply from the server before the deadline");
    else if (rc == RDZV_ERR_IO && call.malformed[0])
        rdzv_set_error(err, errlen, "%s", call.malformed);
    else if (rc == RDZV_ERR_IO)
        rdzv_set_error(err, errlen, "ZeroMQ error: %s", zmq_strerror(zmq_errno()));
    return rc;
}
