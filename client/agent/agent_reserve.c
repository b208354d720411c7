#include "agent_reserve.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
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

/* Abstract unix socket names live in the network namespace, the scope of a
 * port: binding one per port is a lock no two agents there can both hold,
 * freed by the kernel when the agent dies. It listens, so that the next
 * agent can ask it for its pid (SO_PEERCRED). */
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
    if (e == EADDRINUSE && c >= 0 && connect(c, (struct sockaddr *) &sun, len) == 0
        && getsockopt(c, SOL_SOCKET, SO_PEERCRED, &who, &wlen) == 0 && who.pid > 0)
        snprintf(err, errlen, "port %d is reserved by another rdzv agent in this network "
                 "namespace (pid %d, uid %d)", port, (int) who.pid, (int) who.uid);
    else
        snprintf(err, errlen, "port %d: cannot take this network namespace's lock on it: %s",
                 port, strerror(e));
    if (c >= 0)
        close(c);
    return -1;
}

int rdzv_reserve_port(int port, int *lock, int *bind_errno, char *err, size_t errlen)
{
    *bind_errno = 0;
    *lock = s_lock(port, err, errlen);
    if (*lock < 0)
        return -1;
    int fd = s_bind_v6(port, 0);
    /* No IPv6 in this network namespace: 0.0.0.0 covers every address there is. */
    if (fd == -EAFNOSUPPORT || fd == -EADDRNOTAVAIL || fd == -EPROTONOSUPPORT)
        fd = s_bind_v4(port);
    if (fd < 0) {
        snprintf(err, errlen, "cannot reserve port %d: %s", port, strerror(-fd));
        *bind_errno = -fd;
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
