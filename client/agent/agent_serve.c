#include "agent_serve.h"
#include "agent_reserve.h"
#include "agent_proto.h"

#include <errno.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

typedef struct {
    int fd;
    uint64_t id;
    pid_t pid;
    uid_t uid;
} s_conn_t;

typedef struct {
    uint64_t handle;
    uint64_t conn_id;          /* the connection of the process it went to */
    int fd;                    /* the agent's duplicate of the listener */
    int port;
    rdzv_lease_where_t where;
} s_handover_t;

/* A socket passed for a probe, kept so that the agent sees when it starts
 * listening behind its back (a wildcard port-0 bind followed by listen()). */
typedef struct {
    uint64_t handle;           /* the shim reports its close with it */
    uint64_t conn_id;
    int fd;
    int port;
} s_probe_t;

#define S_MAX_PROBES 256

struct rdzv_agent_serve {
    char *path;
    int listen_fd;
    rdzv_lease_t *lease;
    uid_t *allow_uids;
    size_t n_allow_uids;
    bool reset_when_idle;
    bool engine_gone;
    bool ever_served;
    int64_t engine_epoch;        /* the epoch when the engine's first process came */
    int64_t epoch;
    s_conn_t conns[RDZV_AGENT_MAX_CONNS];
    size_t nconns;
    uint64_t next_id;
    s_handover_t *handovers;
    size_t nhandovers;
    size_t cap_handovers;
    s_probe_t probes[S_MAX_PROBES];
    size_t nprobes;
};

static void s_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void s_log(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "rdzv agent: %s\n", line);
}

static int s_listen_socket(const char *path, mode_t mode, char *err, size_t errlen)
{
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    char tmp[sizeof sun.sun_path];
    int n = snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int) getpid());
    if (n < 0 || (size_t) n >= sizeof tmp) {
        snprintf(err, errlen, "socket path too long (at most %zu bytes): %s",
                 sizeof sun.sun_path - 16, path);
        return -1;
    }
    memcpy(sun.sun_path, tmp, (size_t) n + 1);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    unlink(tmp);
    if (bind(fd, (struct sockaddr *) &sun, sizeof sun) < 0 || chmod(tmp, mode) < 0
        || listen(fd, SOMAXCONN) < 0 || rename(tmp, path) < 0) {
        snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
        unlink(tmp);
        close(fd);
        return -1;
    }
    return fd;
}

rdzv_agent_serve_t *rdzv_agent_serve_new(const rdzv_agent_serve_args_t *args,
                                         rdzv_lease_t **lease_p,
                                         char *err, size_t errlen)
{
    rdzv_agent_serve_t *self = calloc(1, sizeof *self);
    if (!self)
        goto nomem;
    self->path = strdup(args->path);
    self->allow_uids = calloc(args->n_allow_uids + 1, sizeof(uid_t));
    if (!self->path || !self->allow_uids)
        goto nomem;
    memcpy(self->allow_uids, args->allow_uids, args->n_allow_uids * sizeof(uid_t));
    self->n_allow_uids = args->n_allow_uids;
    self->reset_when_idle = args->reset_when_idle;
    self->epoch = args->epoch;
    self->next_id = 1;
    /* Another uid can only reach the socket when it was allowed explicitly;
     * SO_PEERCRED is the gate then. */
    mode_t mode = args->n_allow_uids > 0 ? 0666 : 0600;
    self->listen_fd = s_listen_socket(args->path, mode, err, errlen);
    if (self->listen_fd < 0) {
        self->listen_fd = -1;
        rdzv_agent_serve_destroy(&self);
        return NULL;
    }
    self->lease = *lease_p;
    *lease_p = NULL;
    return self;
nomem:
    snprintf(err, errlen, "out of memory");
    if (self) {
        self->listen_fd = -1;
        rdzv_agent_serve_destroy(&self);
    }
    return NULL;
}

/* A listener lives as long as the process it was handed to holds it open:
 * shutdown() acts on the socket itself, so it stops listening in every
 * process that still holds a copy (a forked child), and connections queued
 * to it are reset rather than left waiting for an accept() that never comes. */
static void s_drop_handover(rdzv_agent_serve_t *self, size_t i)
{
    s_handover_t *h = &self->handovers[i];
    shutdown(h->fd, SHUT_RDWR);
    close(h->fd);
    rdzv_lease_unlisten_at(self->lease, h->port, &h->where);
    self->handovers[i] = self->handovers[--self->nhandovers];
}

static bool s_listening(int fd)
{
    int on = 0;
    socklen_t len = sizeof on;
    return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) == 0 && on;
}

/* Like a listener's, a probe socket that listens must not outlive its
 * process with connections queued to it. */
/* closed: the engine closed the probe socket (or exited); else the agent
 * only lets go of its duplicate, and the port stays held for the lease. */
static void s_drop_probe(rdzv_agent_serve_t *self, size_t i, bool closed)
{
    if (s_listening(self->probes[i].fd))
        shutdown(self->probes[i].fd, SHUT_RDWR);
    close(self->probes[i].fd);
    if (closed)
        rdzv_lease_hold(self->lease, self->probes[i].port, -1);
    self->probes[i] = self->probes[--self->nprobes];
}

static void s_keep_probe(rdzv_agent_serve_t *self, uint64_t handle, uint64_t conn_id,
                         int fd, int port)
{
    if (self->nprobes == S_MAX_PROBES)
        s_drop_probe(self, 0, false);
    rdzv_lease_hold(self->lease, port, 1);
    self->probes[self->nprobes++] = (s_probe_t) {
        .handle = handle, .conn_id = conn_id, .fd = fd, .port = port };
}

/* True if a socket passed for a probe of port now listens: then a second
 * listener on the port is refused, as Linux would refuse it without us. */
static bool s_probe_listens(const rdzv_agent_serve_t *self, int port)
{
    for (size_t i = 0; i < self->nprobes; i++)
        if (self->probes[i].port == port && s_listening(self->probes[i].fd))
            return true;
    return false;
}

void rdzv_agent_serve_destroy(rdzv_agent_serve_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_agent_serve_t *self = *self_p;
    while (self->nhandovers > 0)
        s_drop_handover(self, self->nhandovers - 1);
    while (self->nprobes > 0)
        s_drop_probe(self, self->nprobes - 1, false);
    for (size_t i = 0; i < self->nconns; i++)
        close(self->conns[i].fd);
    if (self->listen_fd >= 0) {
        close(self->listen_fd);
        unlink(self->path);
    }
    rdzv_lease_destroy(&self->lease);
    free(self->handovers);
    free(self->allow_uids);
    free(self->path);
    free(self);
    *self_p = NULL;
}

size_t rdzv_agent_serve_pollfds(rdzv_agent_serve_t *self, struct pollfd *pfd,
                                size_t max)
{
    size_t n = 0;
    if (n < max && self->nconns < RDZV_AGENT_MAX_CONNS)
        pfd[n++] = (struct pollfd) { .fd = self->listen_fd, .events = POLLIN };
    for (size_t i = 0; i < self->nconns && n < max; i++)
        pfd[n++] = (struct pollfd) { .fd = self->conns[i].fd, .events = POLLIN };
    return n;
}

static bool s_uid_allowed(const rdzv_agent_serve_t *self, uid_t uid)
{
    if (uid == 0 || uid == geteuid())
        return true;
    for (size_t i = 0; i < self->n_allow_uids; i++)
        if (self->allow_uids[i] == uid)
            return true;
    return false;
}

static void s_accept(rdzv_agent_serve_t *self)
{
    int fd = accept4(self->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0
        || !s_uid_allowed(self, cred.uid) || self->nconns >= RDZV_AGENT_MAX_CONNS) {
        s_log("refused a connection from uid %d pid %d",
              len == sizeof cred ? (int) cred.uid : -1, len == sizeof cred ? (int) cred.pid : -1);
        close(fd);
        return;
    }
    self->conns[self->nconns++] = (s_conn_t) {
        .fd = fd, .id = self->next_id++, .pid = cred.pid, .uid = cred.uid };
    if (!self->ever_served)
        self->engine_epoch = self->epoch;
    self->ever_served = true;
}

static void s_close_conn(rdzv_agent_serve_t *self, size_t ci)
{
    uint64_t id = self->conns[ci].id;
    size_t i = self->nhandovers;
    while (i-- > 0)
        if (self->handovers[i].conn_id == id)
            s_drop_handover(self, i);
    i = self->nprobes;
    while (i-- > 0)
        if (self->probes[i].conn_id == id)
            s_drop_probe(self, i, true);
    close(self->conns[ci].fd);
    self->conns[ci] = self->conns[--self->nconns];
    if (self->nconns == 0 && self->reset_when_idle && self->ever_served) {
        rdzv_lease_reset(self->lease);
        self->engine_gone = true;
        self->ever_served = false;
    }
}

static int s_send(int fd, const rdzv_agent_msg_t *msg, int pass_fd)
{
    struct iovec iov = { .iov_base = (void *) msg, .iov_len = sizeof *msg };
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (pass_fd >= 0) {
        memset(&ctl, 0, sizeof ctl);
        mh.msg_control = ctl.buf;
        mh.msg_controllen = sizeof ctl.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    ssize_t n;
    do
        n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t) sizeof *msg ? 0 : -1;
}

static int s_record_handover(rdzv_agent_serve_t *self, uint64_t conn_id, int fd,
                             int port, const rdzv_lease_where_t *where,
                             uint64_t *handle_out)
{
    if (self->nhandovers == self->cap_handovers) {
        size_t cap = self->cap_handovers ? 2 * self->cap_handovers : 16;
        s_handover_t *grown = realloc(self->handovers, cap * sizeof *grown);
        if (!grown)
            return ENOMEM;
        self->handovers = grown;
        self->cap_handovers = cap;
    }
    *handle_out = self->next_id++;
    self->handovers[self->nhandovers++] = (s_handover_t) {
        .handle = *handle_out, .conn_id = conn_id, .fd = fd, .port = port,
        .where = *where };
    return 0;
}

/* The port of a BIND request's address, after checking its length. */
static int s_request_port(const rdzv_agent_msg_t *req, struct sockaddr_storage *ss)
{
    if (req->addrlen > RDZV_AGENT_ADDR_MAX || req->addrlen < sizeof(sa_family_t))
        return -1;
    memset(ss, 0, sizeof *ss);
    memcpy(ss, req->addr, req->addrlen);
    if (ss->ss_family == AF_INET && req->addrlen >= sizeof(struct sockaddr_in))
        return ntohs(((struct sockaddr_in *) ss)->sin_port);
    if (ss->ss_family == AF_INET6 && req->addrlen >= sizeof(struct sockaddr_in6))
        return ntohs(((struct sockaddr_in6 *) ss)->sin6_port);
    return -1;
}

static void s_set_port(struct sockaddr_storage *ss, int port)
{
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *) ss)->sin_port = htons((uint16_t) port);
    else
        ((struct sockaddr_in6 *) ss)->sin6_port = htons((uint16_t) port);
}

/* Where a BIND request's address lies, for the lease's overlap rules. */
static void s_request_where(const rdzv_agent_msg_t *req, const struct sockaddr_storage *ss,
                            rdzv_lease_where_t *where)
{
    memset(where, 0, sizeof *where);
    where->family = ss->ss_family;
    if (ss->ss_family == AF_INET) {
        memcpy(where->addr, &((const struct sockaddr_in *) ss)->sin_addr, 4);
        return;
    }
    where->v6only = req->flags & RDZV_AGENT_F_V6ONLY;
    memcpy(where->addr, &((const struct sockaddr_in6 *) ss)->sin6_addr, 16);
}

static int s_apply_rules(rdzv_agent_serve_t *self, const rdzv_agent_msg_t *req, int *port,
                         const rdzv_lease_where_t *where)
{
    switch (req->kind) {
    case RDZV_BIND_PROBE:
        return *port == 0 ? EINVAL : rdzv_lease_probe(self->lease, *port);
    case RDZV_BIND_PROBE0:
        return *port != 0 ? EINVAL : rdzv_lease_probe_any(self->lease, port);
    case RDZV_BIND_LISTENER:
        if (*port == 0)
            return EINVAL;
        if (s_probe_listens(self, *port))
            return EADDRINUSE;
        return rdzv_lease_listen_at(self->lease, *port, where,
                                    req->flags & RDZV_AGENT_F_REUSEPORT);
    default:
        return EINVAL;
    }
}

static void s_undo_rules(rdzv_agent_serve_t *self, uint32_t kind, int port,
                         const rdzv_lease_where_t *where)
{
    if (kind == RDZV_BIND_LISTENER)
        rdzv_lease_unlisten_at(self->lease, port, where);
    else
        rdzv_lease_unprobe(self->lease, port);
}

static int s_handle_bind(rdzv_agent_serve_t *self, const s_conn_t *conn,
                         const rdzv_agent_msg_t *req, rdzv_agent_msg_t *rep)
{
    struct sockaddr_storage ss;
    int port = s_request_port(req, &ss);
    if (port < 0)
        return rep->status = EINVAL, -1;
    rdzv_lease_where_t where;
    s_request_where(req, &ss, &where);
    int status = s_apply_rules(self, req, &port, &where);
    int first, limit;
    /* A port of the range but not of the plan: the reply names the plan,
     * which the shim tells the engine's user (agent_proto.h). */
    if (status == EADDRINUSE && rdzv_lease_state(self->lease, port) == RDZV_PORT_FOREIGN
        && rdzv_lease_plan_span(self->lease, &first, &limit)) {
        rep->range_base = (uint32_t) first;
        rep->range_limit = (uint32_t) limit;
    }
    if (status != 0)
        return rep->status = status, -1;
    s_set_port(&ss, port);
    int fd = rdzv_reserve_handover((struct sockaddr *) &ss, req->addrlen,
                                   req->flags & RDZV_AGENT_F_V6ONLY);
    if (fd >= 0 && req->kind == RDZV_BIND_LISTENER) {
        uint64_t handle = 0;
        status = s_record_handover(self, conn->id, fd, port, &where, &handle);
        rep->handle = handle;
        if (status != 0) {
            close(fd);
            fd = -status;
        }
    }
    if (fd < 0) {
        s_undo_rules(self, req->kind, port, &where);
        return rep->status = -fd, -1;
    }
    rep->port = (uint32_t) port;
    return fd;
}

static void s_handle_close(rdzv_agent_serve_t *self, const s_conn_t *conn,
                           const rdzv_agent_msg_t *req)
{
    for (size_t i = 0; i < self->nhandovers; i++) {
        if (self->handovers[i].handle == req->handle
            && self->handovers[i].conn_id == conn->id) {
            s_drop_handover(self, i);
            return;
        }
    }
    for (size_t i = 0; i < self->nprobes; i++) {
        if (self->probes[i].handle == req->handle && self->probes[i].conn_id == conn->id) {
            s_drop_probe(self, i, true);
            return;
        }
    }
}

/* Serves one packet; returns -1 when the connection must close. */
static int s_serve_conn(rdzv_agent_serve_t *self, size_t ci)
{
    const s_conn_t *conn = &self->conns[ci];
    rdzv_agent_msg_t req;
    ssize_t n;
    do
        n = recv(conn->fd, &req, sizeof req, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (n != (ssize_t) sizeof req || req.magic != RDZV_AGENT_MAGIC
        || req.version != RDZV_AGENT_VERSION)
        return -1;
    rdzv_agent_msg_t rep = { .magic = RDZV_AGENT_MAGIC, .version = RDZV_AGENT_VERSION,
                             .op = req.op };
    int pass_fd = -1;
    /* The op comes off the socket: one the agent does not know is refused
     * here, so that the switch names every op and -Wswitch lists each
     * place a new one touches. */
    if (req.op < RDZV_AGENT_OP_HELLO || req.op > RDZV_AGENT_OP_CLOSE) {
        rep.status = EINVAL;
        return s_send(conn->fd, &rep, -1);
    }
    switch ((rdzv_agent_op_t) req.op) {
    case RDZV_AGENT_OP_HELLO:
        rep.range_base = (uint32_t) rdzv_lease_range_base(self->lease);
        rep.range_limit = (uint32_t) rdzv_lease_range_limit(self->lease);
        rep.epoch = self->epoch;
        break;
    case RDZV_AGENT_OP_BIND:
        pass_fd = s_handle_bind(self, conn, &req, &rep);
        if (pass_fd >= 0 && req.kind != RDZV_BIND_LISTENER)
            rep.handle = self->next_id++;
        break;
    case RDZV_AGENT_OP_CLOSE:
        s_handle_close(self, conn, &req);
        break;
    }
    int rc = s_send(conn->fd, &rep, pass_fd);
    /* The agent keeps a duplicate of every socket it passes: a listener's to
     * end it with its process, a probe's to see whether it starts listening. */
    if (pass_fd >= 0 && req.kind != RDZV_BIND_LISTENER)
        s_keep_probe(self, rep.handle, conn->id, pass_fd, (int) rep.port);
    return rc;
}

void rdzv_agent_serve_handle(rdzv_agent_serve_t *self, const struct pollfd *pfd,
                             size_t n)
{
    for (size_t i = n; i-- > 0;) {
        if (!pfd[i].revents)
            continue;
        if (pfd[i].fd == self->listen_fd) {
            s_accept(self);
            continue;
        }
        for (size_t ci = 0; ci < self->nconns; ci++) {
            if (self->conns[ci].fd != pfd[i].fd)
                continue;
            if ((pfd[i].revents & POLLIN) ? s_serve_conn(self, ci) < 0 : true)
                s_close_conn(self, ci);
            break;
        }
    }
}

void rdzv_agent_serve_reset(rdzv_agent_serve_t *self)
{
    while (self->nconns > 0)
        s_close_conn(self, self->nconns - 1);
    rdzv_lease_reset(self->lease);
    self->ever_served = false;
    self->engine_gone = false;
}

bool rdzv_agent_serve_take_engine_gone(rdzv_agent_serve_t *self, int64_t *started_epoch)
{
    bool gone = self->engine_gone;
    self->engine_gone = false;
    *started_epoch = self->engine_epoch;
    return gone;
}

void rdzv_agent_serve_set_epoch(rdzv_agent_serve_t *self, int64_t epoch)
{
    self->epoch = epoch;
}
