#include "agent_reserve.h"
#include "agent_unixdiag.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdbool.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

static int s_reuseport_socket(int family)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, IPPROTO_TCP);
    if (fd < 0)
        return -errno;
    int on = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) < 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    return fd;
}

static int s_bind_v6(int port, int v6only)
{
    int fd = s_reuseport_socket(AF_INET6);
    if (fd < 0)
        return fd;
    struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t) port),
                                 .sin6_addr = IN6ADDR_ANY_INIT };
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only) < 0
        || bind(fd, (struct sockaddr *) &sin6, sizeof sin6) < 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    return fd;
}

static int s_bind_v4(int port)
{
    int fd = s_reuseport_socket(AF_INET);
    if (fd < 0)
        return fd;
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port),
                               .sin_addr.s_addr = htonl(INADDR_ANY) };
    if (bind(fd, (struct sockaddr *) &sin, sizeof sin) < 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    return fd;
}

/* Whether pid runs "rdzv agent" (argv[0] named rdzv*, argv[1] "agent"),
 * as far as /proc shows; its command line goes into cmd. */
static bool s_is_agent(pid_t pid, char *cmd, size_t cmdlen)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int) pid);
    snprintf(cmd, cmdlen, "?");
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *argv0 = buf, *argv1 = buf + strlen(buf) + 1;
    const char *base = strrchr(argv0, '/');
    base = base ? base + 1 : argv0;
    snprintf(cmd, cmdlen, "%.*s", (int) (cmdlen - 1), base);
    return n > 0 && argv1 < buf + n && strncmp(base, "rdzv", 4) == 0
           && strcmp(argv1, "agent") == 0;
}

/* Whether nothing at all is bound to port: a bind that asks for no sharing
 * (dual-stack where there is IPv6) gets it. */
static bool s_port_free(int port)
{
    struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t) port),
                                 .sin6_addr = IN6ADDR_ANY_INIT };
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port),
                               .sin_addr.s_addr = htonl(INADDR_ANY) };
    int off = 0, fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
    bool ok = fd >= 0 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off) == 0
              && bind(fd, (struct sockaddr *) &sin6, sizeof sin6) == 0;
    if (fd < 0) {                    /* no IPv6 here */
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
        ok = fd >= 0 && bind(fd, (struct sockaddr *) &sin, sizeof sin) == 0;
    }
    if (fd >= 0)
        close(fd);
    return ok;
}

/* What the agent could learn of the holder of a lock name. */
typedef struct {
    bool answered;             /* it took the connection: pid and uid from SO_PEERCRED */
    bool uid_known;            /* from SO_PEERCRED, or from the kernel's socket diagnostics */
    pid_t pid;                 /* 0: no answer, or a process this PID namespace cannot see */
    uid_t uid;
} s_holder_t;

/* Asks the holder of the lock name who it is. The connect does not wait:
 * a holder whose queue is full (anyone can keep one so) must not hang the
 * agent. One that does not answer is still named by uid, which the
 * kernel's socket diagnostics tell about any bound socket. */
static void s_ask_holder(const struct sockaddr_un *sun, socklen_t len, s_holder_t *h)
{
    struct ucred who = { 0 };
    socklen_t wlen = sizeof who;
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    *h = (s_holder_t) { 0 };
    h->answered = c >= 0 && connect(c, (const struct sockaddr *) sun, len) == 0
                  && getsockopt(c, SOL_SOCKET, SO_PEERCRED, &who, &wlen) == 0;
    if (c >= 0)
        close(c);
    if (h->answered) {
        h->uid_known = true;
        h->pid = who.pid;
        h->uid = who.uid;
        return;
    }
    size_t namelen = (size_t) len - offsetof(struct sockaddr_un, sun_path);
    h->uid_known = rdzv_unixdiag_owner(sun->sun_path, namelen, &h->uid) == 0;
}

/* The holder as a phrase: what it is, as far as the agent can tell. */
static void s_name_holder(const s_holder_t *h, bool agent, const char *cmd, char *out,
                          size_t outlen)
{
    if (h->answered && h->pid == 0)
        snprintf(out, outlen, "a process of uid %d in another PID namespace (its pid and "
                 "command cannot be seen from here)", (int) h->uid);
    else if (h->answered)
        snprintf(out, outlen, "pid %d (uid %d, %s)", (int) h->pid, (int) h->uid,
                 agent ? "an rdzv agent" : cmd);
    else if (h->uid_known)
        snprintf(out, outlen, "a socket of uid %d that takes no connections (an rdzv "
                 "agent's lock does)", (int) h->uid);
    else
        snprintf(out, outlen, "a socket that takes no connections (an rdzv agent's lock "
                 "does), whose owner the kernel does not say");
}

/* A lock's name: @rdzv-agent-port-PORT, or with -uid-UID for one that
 * only agents of that uid take (s_lock_taken). */
typedef struct {
    struct sockaddr_un sun;
    socklen_t len;
    const char *text;          /* printable, without the leading NUL */
} s_name_t;

static void s_lock_name(int port, bool own_uid, s_name_t *n)
{
    n->sun = (struct sockaddr_un) { .sun_family = AF_UNIX };
    char *path = n->sun.sun_path + 1;
    size_t room = sizeof n->sun.sun_path - 1;
    int k = own_uid ? snprintf(path, room, "rdzv-agent-port-%d-uid-%u", port, (unsigned) getuid())
                    : snprintf(path, room, "rdzv-agent-port-%d", port);
    n->len = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + 1 + (size_t) k);
    n->text = path;
}

/* The lock, or a negative errno value. */
static int s_lock_bind(const s_name_t *n)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    if (bind(fd, (const struct sockaddr *) &n->sun, n->len) < 0 || listen(fd, SOMAXCONN) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

/* Asks the holder of n, and names it in who; whether it is an rdzv agent. */
static bool s_describe(const s_name_t *n, s_holder_t *h, char *who, size_t wholen)
{
    char cmd[128] = "?";
    s_ask_holder(&n->sun, n->len, h);
    bool agent = h->answered && h->pid > 0 && s_is_agent(h->pid, cmd, sizeof cmd);
    s_name_holder(h, agent, cmd, who, wholen);
    return agent;
}

/* The holder of n stops this agent: err says who it is. Returns -1. */
static int s_stopped_by(int port, const s_name_t *n, const s_holder_t *h, bool agent,
                        const char *who, char *err, size_t errlen)
{
    if (agent)
        snprintf(err, errlen, "port %d is reserved by another rdzv agent in this network "
                 "namespace (pid %d, uid %d)", port, (int) h->pid, (int) h->uid);
    else
        snprintf(err, errlen, "port %d: this network namespace's agent lock on it (@%s) is "
                 "held by %s, %s", port, n->text, who, h->answered && h->pid == 0
                 ? "which may or may not be an rdzv agent (in another container?)"
                 : "which is not an rdzv agent");
    return -1;
}

/* Whether another agent of this uid holds port through the name of its
 * uid, having gone round a squatter of the shared one (err says so). */
static bool s_own_uid_holds(int port, char *err, size_t errlen)
{
    s_name_t n;
    s_lock_name(port, true, &n);
    int fd = s_lock_bind(&n);
    if (fd >= 0)
        close(fd);
    if (fd != -EADDRINUSE)
        return false;
    s_holder_t h;
    char who[192];
    bool agent = s_describe(&n, &h, who, sizeof who);
    if (!h.uid_known || h.uid != getuid())
        return false;              /* a squatter of this name as well: not an agent of ours */
    s_stopped_by(port, &n, &h, agent, who, err, errlen);
    return true;
}

/* Goes round the holder (who) of the shared name: takes the name of this
 * uid, or none where a process of another uid squats that too. */
static int s_lock_own_uid(int port, const char *shared, const char *who, char *err,
                          size_t errlen)
{
    s_name_t n;
    s_lock_name(port, true, &n);
    int fd = s_lock_bind(&n);
    if (fd != -EADDRINUSE) {
        fprintf(stderr, "rdzv agent: port %d: this network namespace's lock @%s is held by "
                "%s; no other uid can share a port with uid %d, so this agent %s @%s "
                "instead\n", port, shared, who, (int) getuid(), fd >= 0 ? "holds" : "cannot "
                "hold (going on without a lock)", n.text);
        return fd >= 0 ? fd : RDZV_RESERVE_NO_LOCK;
    }
    s_holder_t h;
    char who2[192];
    bool agent = s_describe(&n, &h, who2, sizeof who2);
    if (h.uid_known && h.uid == getuid())
        return s_stopped_by(port, &n, &h, agent, who2, err, errlen);
    fprintf(stderr, "rdzv agent: port %d: this network namespace's locks @%s and @%s are "
            "held by %s and %s, of other uids, which cannot share a port with uid %d: going "
            "on without it\n", port, shared, n.text, who, who2, (int) getuid());
    return RDZV_RESERVE_NO_LOCK;
}

/* The shared name is taken. A holder of another uid cannot share this
 * agent's reservation (the kernel keeps SO_REUSEPORT within one uid), so
 * it is only in the way: when nothing at all is bound to the port, the
 * agent goes round it through the name of its own uid, which every agent
 * of this uid checks too. Otherwise the holder stops it (or the agent of
 * this uid that went round it), called an rdzv agent only when its
 * command line is one. Returns the lock,
 * RDZV_RESERVE_NO_LOCK (go on without) or -1 with err set. */
static int s_lock_taken(int port, const s_name_t *n, char *err, size_t errlen)
{
    s_holder_t h;
    char who[192];
    bool agent = s_describe(n, &h, who, sizeof who);
    if (h.uid_known && h.uid != getuid() && s_port_free(port))
        return s_lock_own_uid(port, n->text, who, err, errlen);
    /* The port is taken: by an agent of this uid that went round the
     * squatter, if one holds the name of this uid. */
    if (h.uid_known && h.uid != getuid() && s_own_uid_holds(port, err, errlen))
        return -1;
    return s_stopped_by(port, n, &h, agent, who, err, errlen);
}

/* Abstract unix socket names live in the network namespace, the scope of a
 * port: binding one per port is a lock no two agents there can both hold,
 * freed by the kernel when the agent dies. It listens, so that the next
 * agent can ask who holds it (SO_PEERCRED), and the agent accepts and
 * closes what comes (rdzv_reserve_lock_answer), so its queue never fills.
 * Anyone in the namespace can bind such a name, though (s_lock_taken).
 * Returns the lock, RDZV_RESERVE_NO_LOCK, or -1 with err set. */
static int s_lock(int port, char *err, size_t errlen)
{
    s_name_t n;
    s_lock_name(port, false, &n);
    int fd = s_lock_bind(&n);
    if (fd >= 0 && s_own_uid_holds(port, err, errlen)) {
        close(fd);
        return -1;
    }
    if (fd >= 0)
        return fd;
    if (fd == -EADDRINUSE)
        return s_lock_taken(port, &n, err, errlen);
    snprintf(err, errlen, "port %d: cannot take this network namespace's lock on it: %s",
             port, strerror(-fd));
    return -1;
}

int rdzv_reserve_lock_retake(int port)
{
    s_name_t n;
    s_lock_name(port, false, &n);
    int fd = s_lock_bind(&n);
    if (fd >= 0)
        fprintf(stderr, "rdzv agent: port %d: took this network namespace's lock @%s, which "
                "its holder of another uid has let go\n", port, n.text);
    return fd;
}

void rdzv_reserve_lock_answer(int lock)
{
    for (int c; (c = accept4(lock, NULL, NULL, SOCK_CLOEXEC)) >= 0 || errno == EINTR;)
        if (c >= 0)
            close(c);
}

int rdzv_reserve_port(int port, int *lock, int *bind_errno, char *err, size_t errlen)
{
    *bind_errno = 0;
    *lock = s_lock(port, err, errlen);
    if (*lock == -1)
        return -1;
    int fd = s_bind_v6(port, 0);
    /* No IPv6 in this network namespace: 0.0.0.0 covers every address there is. */
    if (fd == -EAFNOSUPPORT || fd == -EADDRNOTAVAIL || fd == -EPROTONOSUPPORT)
        fd = s_bind_v4(port);
    if (fd < 0) {
        snprintf(err, errlen, "cannot reserve port %d: %s", port, strerror(-fd));
        *bind_errno = -fd;
        if (*lock >= 0)
            close(*lock);
        *lock = -1;
        return -1;
    }
    return fd;
}

bool rdzv_reserve_would_reuse(int port)
{
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
    struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t) port),
                                 .sin6_addr = IN6ADDR_ANY_INIT };
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port),
                               .sin_addr.s_addr = htonl(INADDR_ANY) };
    struct sockaddr *addr = (struct sockaddr *) &sin6;
    socklen_t len = sizeof sin6;
    if (fd < 0) {                    /* no IPv6 here */
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
        addr = (struct sockaddr *) &sin;
        len = sizeof sin;
    }
    if (fd < 0)
        return false;
    int on = 1, off = 0;
    if (addr->sa_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    bool ok = bind(fd, addr, len) == 0;
    close(fd);
    return ok;
}

int rdzv_reserve_handover(const struct sockaddr *addr, socklen_t addrlen,
                          bool v6only)
{
    int family = addr->sa_family;
    if ((family == AF_INET && addrlen < sizeof(struct sockaddr_in))
        || (family == AF_INET6 && addrlen < sizeof(struct sockaddr_in6))
        || (family != AF_INET && family != AF_INET6))
        return -EINVAL;
    int fd = s_reuseport_socket(family);
    if (fd < 0)
        return fd;
    int flag = v6only ? 1 : 0;
    if ((family == AF_INET6
         && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &flag, sizeof flag) < 0)
        || bind(fd, addr, addrlen) < 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    return fd;
}
