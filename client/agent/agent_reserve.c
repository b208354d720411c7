#include "agent_reserve.h"

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

/* Abstract unix socket names live in the network namespace, the scope of a
 * port: binding one per port is a lock no two agents there can both hold,
 * freed by the kernel when the agent dies. It listens, so that the next
 * agent can ask who holds it (SO_PEERCRED).
 *
 * Anyone in the namespace can bind such a name, though. A holder of
 * another uid cannot share this agent's reservation (the kernel keeps
 * SO_REUSEPORT within one uid), so it is only in the way: the agent goes
 * on without the lock when nothing at all is bound to the port, and says
 * so. A holder is called an rdzv agent only when its command line is one.
 * Returns the lock, -2 for none needed, or -1 with err set. */
static int s_lock(int port, char *err, size_t errlen)
{
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    int n = snprintf(sun.sun_path + 1, sizeof sun.sun_path - 1, "rdzv-agent-port-%d", port);
    socklen_t len = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + 1 + (size_t) n);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && bind(fd, (struct sockaddr *) &sun, len) == 0 && listen(fd, 1) == 0)
        return fd;
    int e = errno;
    if (fd >= 0)
        close(fd);
    struct ucred who = { 0 };
    socklen_t wlen = sizeof who;
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool asked = e == EADDRINUSE && c >= 0 && connect(c, (struct sockaddr *) &sun, len) == 0
                 && getsockopt(c, SOL_SOCKET, SO_PEERCRED, &who, &wlen) == 0;
    if (c >= 0)
        close(c);
    char cmd[128];
    bool agent = asked && who.pid > 0 && s_is_agent(who.pid, cmd, sizeof cmd);
    if (asked && who.uid != getuid() && s_port_free(port)) {
        fprintf(stderr, "rdzv agent: port %d: this network namespace's lock @rdzv-agent-port-%d "
                "is held by pid %d (uid %d, %s), which cannot share a port with uid %d: going "
                "on without it\n", port, port, (int) who.pid, (int) who.uid,
                agent ? "an rdzv agent" : "not an rdzv agent", (int) getuid());
        return -2;
    }
    if (agent)
        snprintf(err, errlen, "port %d is reserved by another rdzv agent in this network "
                 "namespace (pid %d, uid %d)", port, (int) who.pid, (int) who.uid);
    else if (asked)
        snprintf(err, errlen, "port %d: this network namespace's agent lock on it "
                 "(@rdzv-agent-port-%d) is held by pid %d (uid %d, %s), which is not an rdzv "
                 "agent", port, port, (int) who.pid, (int) who.uid, who.pid > 0 ? cmd
                 : "in another PID namespace");
    else if (e == EADDRINUSE)
        snprintf(err, errlen, "port %d: this network namespace's agent lock on it "
                 "(@rdzv-agent-port-%d) is held by a socket that takes no connections, so not "
                 "by an rdzv agent", port, port);
    else
        snprintf(err, errlen, "port %d: cannot take this network namespace's lock on it: %s",
                 port, strerror(e));
    return -1;
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
