/* The exported wrappers: bind(), and close(), dup2(), dup3() and
 * close_range(), which may free a descriptor holding a handed-over
 * listener. Everything that is not a TCP bind on the managed range (or a
 * port-0 probe), or does not free such a descriptor, goes to libc at once. */
#include "shim_agent.h"
#include "shim_handover.h"
#include "shim_rules.h"
#include "shim_syms.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RDZV_SHIM_EXPORT __attribute__((visibility("default")))

RDZV_SHIM_EXPORT int bind(int fd, __CONST_SOCKADDR_ARG arg, socklen_t len);
RDZV_SHIM_EXPORT int close(int fd);
RDZV_SHIM_EXPORT int dup2(int from, int to);
RDZV_SHIM_EXPORT int dup3(int from, int to, int flags);
RDZV_SHIM_EXPORT int close_range(unsigned int first, unsigned int last, int flags);

/* Set while the shim itself is at work in this thread: no recursion. */
static __thread int s_busy;

typedef struct {
    int level;
    int name;
    int family;                /* 0: any; else only sockets of this family */
    bool buffer;               /* the kernel reports twice what was set */
} s_option_t;

/* Options a caller may have set before bind() that the handed-over socket
 * must carry too. SO_REUSEPORT is always on there (docs/agent.md). */
static const s_option_t s_options[] = {
    { SOL_SOCKET, SO_REUSEADDR, 0, false },   { SOL_SOCKET, SO_KEEPALIVE, 0, false },
    { SOL_SOCKET, SO_RCVBUF, 0, true },       { SOL_SOCKET, SO_SNDBUF, 0, true },
    { SOL_SOCKET, SO_PRIORITY, 0, false },    { SOL_SOCKET, SO_OOBINLINE, 0, false },
    { SOL_SOCKET, SO_RCVLOWAT, 0, false },    { IPPROTO_TCP, TCP_NODELAY, 0, false },
    { IPPROTO_TCP, TCP_KEEPIDLE, 0, false },  { IPPROTO_TCP, TCP_KEEPINTVL, 0, false },
    { IPPROTO_TCP, TCP_KEEPCNT, 0, false },   { IPPROTO_TCP, TCP_USER_TIMEOUT, 0, false },
    { IPPROTO_TCP, TCP_DEFER_ACCEPT, 0, false }, { IPPROTO_TCP, TCP_FASTOPEN, 0, false },
    { IPPROTO_TCP, TCP_MAXSEG, 0, false },    { IPPROTO_IP, IP_TOS, 0, false },
    { IPPROTO_IPV6, IPV6_TCLASS, AF_INET6, false },
};
#define S_NOPTIONS (sizeof s_options / sizeof s_options[0])

/* The agent makes every handed-over socket of a family the same way
 * (agent_reserve.c), so their option values are read from the first one
 * and kept: a probe then costs one getsockopt per option, not two. No
 * lock: threads that fill it at once store the same values, and a lock
 * held by another thread across fork() would stop the child. */
static _Atomic bool s_passed_known[2];
static _Atomic int s_passed_value[2][S_NOPTIONS];

static int s_intopt(int fd, int level, int name)
{
    int v = 0;
    socklen_t len = sizeof v;
    return getsockopt(fd, level, name, &v, &len) == 0 ? v : -1;
}

/* The handed-over socket's option values, into have. */
static void s_passed_values(int to, int family, int *have)
{
    int f = family == AF_INET6;
    if (!atomic_load_explicit(&s_passed_known[f], memory_order_acquire)) {
        for (size_t i = 0; i < S_NOPTIONS; i++)
            atomic_store_explicit(&s_passed_value[f][i],
                                  s_intopt(to, s_options[i].level, s_options[i].name),
                                  memory_order_relaxed);
        atomic_store_explicit(&s_passed_known[f], true, memory_order_release);
    }
    for (size_t i = 0; i < S_NOPTIONS; i++)
        have[i] = atomic_load_explicit(&s_passed_value[f][i], memory_order_relaxed);
}

static void s_copy_options(int from, int to, int family)
{
    int have[S_NOPTIONS];
    s_passed_values(to, family, have);
    for (size_t i = 0; i < S_NOPTIONS; i++) {
        const s_option_t *o = &s_options[i];
        if (o->family && o->family != family)
            continue;
        int want = s_intopt(from, o->level, o->name);
        if (want < 0 || have[i] < 0 || want == have[i])
            continue;
        int v = o->buffer ? want / 2 : want;
        setsockopt(to, o->level, o->name, &v, sizeof v);
    }
    struct linger lg;
    socklen_t len = sizeof lg;
    if (getsockopt(from, SOL_SOCKET, SO_LINGER, &lg, &len) == 0 && lg.l_onoff)
        setsockopt(to, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    struct timeval tv[2];
    int names[2] = { SO_RCVTIMEO, SO_SNDTIMEO };
    for (int i = 0; i < 2; i++) {
        len = sizeof tv[i];
        if (getsockopt(from, SOL_SOCKET, names[i], &tv[i], &len) == 0
            && (tv[i].tv_sec || tv[i].tv_usec))
            setsockopt(to, SOL_SOCKET, names[i], &tv[i], sizeof tv[i]);
    }
}

/* The port of addr without a system call; -1 if addr is too short. */
static int s_addr_port(const struct sockaddr *addr, socklen_t len)
{
    if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in))
        return ntohs(((const struct sockaddr_in *) addr)->sin_port);
    if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6))
        return ntohs(((const struct sockaddr_in6 *) addr)->sin6_port);
    return -1;
}

/* Whether addr (long enough for its family) is 0.0.0.0 or ::. */
static bool s_addr_wildcard(const struct sockaddr *addr)
{
    return addr->sa_family == AF_INET
        ? ((const struct sockaddr_in *) addr)->sin_addr.s_addr == htonl(INADDR_ANY)
        : IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *) addr)->sin6_addr);
}

/* True when the bind's address alone says it passes through: the common
 * calls of an engine cost no system call and no lock. */
RDZV_SHIM_HOT static bool s_passes_at_once(const struct sockaddr *addr, socklen_t len)
{
    if (rdzv_shim_agent_off())
        return true;
    int port = s_addr_port(addr, len), base, limit;
    if (port < 0)
        return false;
    if (!rdzv_shim_agent_range(&base, &limit))
        base = limit = 0;
    return rdzv_shim_passes_on_address(port, s_addr_wildcard(addr), base, limit);
}

/* What a bind on fd would be; reads the socket, changes nothing. It stops
 * once the bind cannot be a candidate: a port-0 bind with SO_REUSEADDR or
 * SO_REUSEPORT (ZeroMQ's bind to any address and any port) costs one or
 * two reads, not six. */
static void s_describe(int fd, const struct sockaddr *addr, socklen_t len, rdzv_shim_bind_t *b)
{
    memset(b, 0, sizeof *b);
    int port = s_addr_port(addr, len);
    if (port < 0)
        return;                /* AF_UNSPEC: never a candidate */
    b->addr_family = addr->sa_family;
    b->port = port;
    b->wildcard = s_addr_wildcard(addr);
    if (port == 0) {
        b->reuseaddr = s_intopt(fd, SOL_SOCKET, SO_REUSEADDR) > 0;
        b->reuseport = !b->reuseaddr && s_intopt(fd, SOL_SOCKET, SO_REUSEPORT) > 0;
        if (b->reuseaddr || b->reuseport)
            return;            /* classify passes it, whatever the socket is */
    }
    b->domain = s_intopt(fd, SOL_SOCKET, SO_DOMAIN);
    b->type = s_intopt(fd, SOL_SOCKET, SO_TYPE);
    b->protocol = s_intopt(fd, SOL_SOCKET, SO_PROTOCOL);
    if (!rdzv_shim_is_candidate(b))
        return;
    if (port != 0) {
        b->reuseaddr = s_intopt(fd, SOL_SOCKET, SO_REUSEADDR) > 0;
        b->reuseport = s_intopt(fd, SOL_SOCKET, SO_REUSEPORT) > 0;
    }
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof ss;
    if (getsockname(fd, (struct sockaddr *) &ss, &sslen) == 0) {
        int bound = ss.ss_family == AF_INET ? ((struct sockaddr_in *) &ss)->sin_port
                  : ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *) &ss)->sin6_port : 0;
        b->already_bound = bound != 0;
    }
}

/* Puts the passed socket in place of the caller's fd with the caller's
 * descriptor flags, status flags and options. Returns 0 or an errno. */
static int s_install(int fd, int passed, int family)
{
    int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
    if (fl < 0 || fdfl < 0)
        return errno;
    s_copy_options(fd, passed, family);
    if (fcntl(passed, F_SETFL, fl) < 0)
        return errno;
    if (rdzv_shim_real()->dup3(passed, fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0)
        return errno;
    return 0;
}

/* For a bind that s_passes_at_once could not settle. */
static rdzv_shim_action_t s_decide(int fd, const struct sockaddr *addr, socklen_t len,
                                   rdzv_shim_bind_t *b)
{
    s_describe(fd, addr, len, b);
    if (!rdzv_shim_is_candidate(b))
        return RDZV_SHIM_PASS;
    int base, limit;
    /* With the range known, ports outside it pass without asking the agent. */
    if (rdzv_shim_agent_range(&base, &limit)
        && rdzv_shim_classify(b, base, limit) == RDZV_SHIM_PASS)
        return RDZV_SHIM_PASS;
    if (!rdzv_shim_agent_ready() || !rdzv_shim_agent_range(&base, &limit)) {
        /* Fail closed: a managed port no agent hands over is refused; a
         * port-0 probe passes, the kernel gives it a port outside the range. */
        rdzv_shim_action_t action = rdzv_shim_agent_closed() && rdzv_shim_agent_range(&base, &limit)
                                    ? rdzv_shim_classify(b, base, limit) : RDZV_SHIM_PASS;
        return action == RDZV_SHIM_PASS || action == RDZV_SHIM_PROBE0 ? RDZV_SHIM_PASS
                                                                      : RDZV_SHIM_REFUSE;
    }
    return rdzv_shim_classify(b, base, limit);
}

/* Asks the agent; returns 0 done, an errno for bind() to fail with, or -1
 * to pass the call through (agent gone). */
static int s_managed_bind(int fd, const struct sockaddr *addr, socklen_t len,
                          rdzv_shim_action_t action, const rdzv_shim_bind_t *b)
{
    rdzv_agent_msg_t req = { .magic = RDZV_AGENT_MAGIC, .version = RDZV_AGENT_VERSION,
                             .op = RDZV_AGENT_OP_BIND, .addrlen = len };
    req.kind = action == RDZV_SHIM_PROBE ? RDZV_BIND_PROBE
             : action == RDZV_SHIM_PROBE0 ? RDZV_BIND_PROBE0 : RDZV_BIND_LISTENER;
    if (b->reuseport)
        req.flags |= RDZV_AGENT_F_REUSEPORT;
    if (b->domain == AF_INET6 && s_intopt(fd, IPPROTO_IPV6, IPV6_V6ONLY) > 0)
        req.flags |= RDZV_AGENT_F_V6ONLY;
    if (req.addrlen > RDZV_AGENT_ADDR_MAX)
        req.addrlen = RDZV_AGENT_ADDR_MAX;
    memcpy(req.addr, addr, req.addrlen);
    rdzv_agent_msg_t rep;
    int passed = -1;
    int rc = rdzv_shim_agent_bind(&req, &rep, &passed);
    if (rc == -2)
        return EADDRINUSE;       /* the plan's agent is gone: never pass through */
    if (rc < 0)
        return -1;
    if (rep.status != 0 || passed < 0) {
        if (passed >= 0)
            rdzv_shim_real()->close(passed);
        /* The agent names the plan when the port is in the range but not in it. */
        if (rep.status == EADDRINUSE && rep.range_limit > rep.range_base && rep.range_base > 0)
            rdzv_shim_agent_not_in_plan(b->port, (int) rep.range_base, (int) rep.range_limit);
        return rep.status != 0 ? rep.status : EADDRINUSE;
    }
    int err = s_install(fd, passed, b->domain);
    rdzv_shim_real()->close(passed);
    /* Listeners and probes alike: the agent keeps a duplicate of each and
     * must hear when the process closes its own. */
    if (rep.handle) {
        rdzv_shim_handover_track(fd, rep.handle);
        if (err)
            rdzv_shim_handover_untrack(fd);
    }
    return err;
}

RDZV_SHIM_HOT int bind(int fd, __CONST_SOCKADDR_ARG arg, socklen_t len)
{
    const struct sockaddr *addr = arg.__sockaddr__;
    const rdzv_shim_real_t *real = rdzv_shim_real();
    /* s_busy last: the address alone settles most binds, and reading the
     * thread-local costs a page of the GOT and one of TLS. */
    if (!addr || len < sizeof(sa_family_t)
        || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)
        || s_passes_at_once(addr, len) || s_busy)
        return real->bind(fd, arg, len);
    int saved = errno;
    s_busy = 1;
    rdzv_shim_bind_t b;
    rdzv_shim_action_t action = s_decide(fd, addr, len, &b);
    int err = action == RDZV_SHIM_PASS ? -1
            : action == RDZV_SHIM_REFUSE ? EADDRINUSE : s_managed_bind(fd, addr, len, action, &b);
    s_busy = 0;
    errno = saved;
    if (err < 0)
        return real->bind(fd, arg, len);
    if (err > 0) {
        errno = err;
        return -1;
    }
    return 0;
}

RDZV_SHIM_HOT int close(int fd)
{
    int rc;
    bool moved = false;
    /* Before s_busy, whose read costs a page of the GOT and one of TLS:
     * the unmarked path takes no lock and calls nothing but libc. */
    if (rdzv_shim_handover_close_unmarked(fd, &rc, &moved)) {
        if (moved && !s_busy) {
            s_busy = 1;
            rdzv_shim_handover_recheck();
            s_busy = 0;
        }
        return rc;
    }
    if (s_busy)
        return rdzv_shim_real()->close(fd);
    s_busy = 1;
    rc = rdzv_shim_handover_close(fd);
    s_busy = 0;
    return rc;
}

int dup2(int from, int to)
{
    if (s_busy)
        return rdzv_shim_real()->dup2(from, to);
    s_busy = 1;
    int rc = rdzv_shim_handover_dup(from, to, -1);
    s_busy = 0;
    return rc;
}

int dup3(int from, int to, int flags)
{
    if (s_busy || flags < 0)
        return rdzv_shim_real()->dup3(from, to, flags);
    s_busy = 1;
    int rc = rdzv_shim_handover_dup(from, to, flags);
    s_busy = 0;
    return rc;
}

int close_range(unsigned int first, unsigned int last, int flags)
{
    if (s_busy)
        return rdzv_shim_real()->close_range(first, last, flags);
    s_busy = 1;
    int rc = rdzv_shim_handover_close_range(first, last, flags);
    s_busy = 0;
    return rc;
}
