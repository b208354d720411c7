/* Default host and node of a rank.
 *
 * The host other ranks should use to reach this one is the address of the
 * interface that routes to rdzvd: on a multi-homed machine that is the
 * network the cluster shares, unlike gethostname()'s resolution. */
#include "route.h"

#include "rdzv_private.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#define S_TCP_PREFIX   "tcp://"
#define S_LOOPBACK     "127.0.0.1"

int rdzv_route_endpoint_host(const char *endpoint, char *out, size_t outlen)
{
    size_t plen = strlen(S_TCP_PREFIX);
    if (!endpoint || strncmp(endpoint, S_TCP_PREFIX, plen) != 0)
        return -1;
    const char *host = endpoint + plen;
    const char *semi = strchr(host, ';');
    if (semi)
        host = semi + 1;        /* "tcp://source;host:port" */
    const char *colon = strrchr(host, ':');
    if (!colon || colon[1] == '\0')
        return -1;
    const char *end = colon;
    if (host[0] == '[') {
        host++;
        if (end == host || end[-1] != ']')
            return -1;
        end--;
    }
    size_t n = (size_t) (end - host);
    if (n == 0 || n >= outlen)
        return -1;
    memcpy(out, host, n);
    out[n] = '\0';
    return 0;
}

/* connect() on a UDP socket sends nothing; it only asks the kernel for the
 * route, after which getsockname() names the source address. */
static int s_source_for(const struct addrinfo *ai, char *out, size_t outlen)
{
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_storage local;
    socklen_t len = sizeof local;
    int rc = -1;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0
        && getsockname(fd, (struct sockaddr *) &local, &len) == 0) {
        const void *addr = local.ss_family == AF_INET6
            ? (const void *) &((struct sockaddr_in6 *) &local)->sin6_addr
            : (const void *) &((struct sockaddr_in *) &local)->sin_addr;
        if (inet_ntop(local.ss_family, addr, out, (socklen_t) outlen))
            rc = 0;
    }
    close(fd);
    return rc;
}

/* Resolves host for socktype: 0 with *res, or -1 with err saying why
 * and errno EAGAIN (the name does not resolve, perhaps not yet). */
static int s_lookup(const char *host, int socktype, struct addrinfo **res,
                    char *err, size_t errlen)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = socktype };
    int gai = getaddrinfo(host, "9", &hints, res);
    if (gai == 0)
        return 0;
    int saved = errno;
    rdzv_set_error(err, errlen, RDZV_ROUTE_UNRESOLVED " '%s' (DNS: %s)", host,
                   gai == EAI_SYSTEM ? strerror(saved) : gai_strerror(gai));
    errno = EAGAIN;
    return -1;
}

/* endpoint's host into host; 1 when endpoint is not tcp (ipc, inproc). */
static int s_tcp_host(const char *endpoint, char *host, size_t len, char *err, size_t errlen)
{
    if (!endpoint || strncmp(endpoint, S_TCP_PREFIX, strlen(S_TCP_PREFIX)) != 0)
        return 1;
    if (rdzv_route_endpoint_host(endpoint, host, len) == 0)
        return 0;
    rdzv_set_error(err, errlen, "cannot find the host in endpoint '%s'", endpoint);
    errno = EINVAL;
    return -1;
}

int rdzv_route_resolve(const char *endpoint, char *err, size_t errlen)
{
    char host[NI_MAXHOST];
    int rc = s_tcp_host(endpoint, host, sizeof host, err, errlen);
    struct addrinfo *res = NULL;
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    if (s_lookup(host, SOCK_STREAM, &res, err, errlen) < 0)
        return -1;
    freeaddrinfo(res);
    return 0;
}

int rdzv_route_default_host(const char *endpoint, char *out, size_t outlen,
                            char *err, size_t errlen)
{
    char host[NI_MAXHOST];
    int tcp = s_tcp_host(endpoint, host, sizeof host, err, errlen);
    if (tcp < 0)
        return -1;
    if (tcp > 0) {
        if (outlen <= strlen(S_LOOPBACK))
            return -1;
        strcpy(out, S_LOOPBACK);    /* ipc, inproc: same machine */
        return 0;
    }
    struct addrinfo *res = NULL;
    if (s_lookup(host, SOCK_DGRAM, &res, err, errlen) < 0)
        return -1;
    int rc = -1;
    for (const struct addrinfo *ai = res; ai && rc != 0; ai = ai->ai_next)
        rc = s_source_for(ai, out, outlen);
    freeaddrinfo(res);
    if (rc != 0) {
        rdzv_set_error(err, errlen, "no local address routes to '%s'; pass a host", host);
        errno = EHOSTUNREACH;
    }
    return rc;
}

int rdzv_route_default_node(char *out, size_t outlen, char *err, size_t errlen)
{
    if (outlen == 0 || gethostname(out, outlen) != 0) {
        rdzv_set_error(err, errlen, "gethostname failed: %s", strerror(errno));
        return -1;
    }
    out[outlen - 1] = '\0';     /* gethostname may truncate without a NUL */
    if (out[0] == '\0') {
        rdzv_set_error(err, errlen, "the hostname is empty; pass a node name");
        return -1;
    }
    return 0;
}
