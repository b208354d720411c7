#include "listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    struct sockaddr_storage addr;
    socklen_t len;
} s_addr_t;

static int s_parse_port(const char *text, int *port)
{
    if (strcmp(text, "*") == 0) {
        *port = 0;
        return 0;
    }
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (!*text || *end || v < 0 || v > 65535)
        return -1;
    *port = (int) v;
    return 0;
}

/* Parses tcp://HOST:PORT into addr; -1 if not of the forms listen.h names. */
static int s_parse(const char *endpoint, s_addr_t *out)
{
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return -1;
    const char *host = endpoint + 6;
    const char *colon = strrchr(host, ':');
    if (!colon || colon == host)
        return -1;
    char name[64];
    size_t n = (size_t) (colon - host);
    if (n >= sizeof name)
        return -1;
    memcpy(name, host, n);
    name[n] = '\0';
    int port;
    if (s_parse_port(colon + 1, &port) < 0)
        return -1;
    memset(out, 0, sizeof *out);
    struct sockaddr_in *v4 = (struct sockaddr_in *) &out->addr;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *) &out->addr;
    if (strcmp(name, "*") == 0 || strcmp(name, "localhost") == 0) {
        /* libzmq without ZMQ_IPV6 serves "*" on IPv4 only; so do we. */
        v4->sin_addr.s_addr = htonl(strcmp(name, "*") == 0 ? INADDR_ANY : INADDR_LOOPBACK);
    } else if (name[0] == '[' && name[n - 1] == ']') {
        name[n - 1] = '\0';
        if (inet_pton(AF_INET6, name + 1, &v6->sin6_addr) != 1)
            return -1;
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t) port);
        out->len = sizeof *v6;
        return 0;
    } else if (inet_pton(AF_INET, name, &v4->sin_addr) != 1) {
        return -1;
    }
    v4->sin_family = AF_INET;
    v4->sin_port = htons((uint16_t) port);
    out->len = sizeof *v4;
    return 0;
}

int rdzv_listen_shardable(const char *endpoint)
{
    s_addr_t a;
    return s_parse(endpoint, &a) == 0;
}

static void s_set_port(s_addr_t *a, int port)
{
    if (a->addr.ss_family == AF_INET6)
        ((struct sockaddr_in6 *) &a->addr)->sin6_port = htons((uint16_t) port);
    else
        ((struct sockaddr_in *) &a->addr)->sin_port = htons((uint16_t) port);
}

static int s_get_port(int fd)
{
    s_addr_t a = { .len = sizeof a.addr };
    if (getsockname(fd, (struct sockaddr *) &a.addr, &a.len) < 0)
        return -1;
    return a.addr.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *) &a.addr)->sin6_port)
                                        : ntohs(((struct sockaddr_in *) &a.addr)->sin_port);
}

static int s_socket(const s_addr_t *a, int reuseport)
{
    int fd = socket(a->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    /* SO_REUSEADDR as libzmq sets it: a restarted rdzvd rebinds at once. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a->addr.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0) {
        close(fd);
        return -1;
    }
    if (bind(fd, (const struct sockaddr *) &a->addr, a->len) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

int rdzv_listen_group(const char *endpoint, int count, int *fds, char *err, size_t errlen)
{
    s_addr_t a;
    if (count < 1 || s_parse(endpoint, &a) < 0) {
        snprintf(err, errlen, "cannot shard %s: not tcp://ADDRESS:PORT", endpoint);
        return -1;
    }
    /* A plain bind first: it fails if anything holds the port, including a
     * SO_REUSEPORT group that our own sockets would otherwise join, and it
     * lets the kernel pick the port for tcp://HOST:0. */
    int probe = s_socket(&a, 0);
    if (probe < 0) {
        snprintf(err, errlen, "cannot bind %s: %s", endpoint, strerror(errno));
        return -1;
    }
    s_set_port(&a, s_get_port(probe));
    int opened = 0;
    for (; opened < count; opened++) {
        /* The probe holds the port while the group binds: nobody else can
         * take it in between, and it is closed once the group listens. */
        fds[opened] = s_socket(&a, 1);
        if (fds[opened] < 0 || listen(fds[opened], RDZV_LISTEN_BACKLOG) < 0)
            break;
    }
    int saved = errno;
    close(probe);
    if (opened == count)
        return 0;
    if (opened < count && fds[opened] >= 0)
        close(fds[opened]);
    while (opened-- > 0)
        close(fds[opened]);
    snprintf(err, errlen, "cannot bind %s: %s", endpoint, strerror(saved));
    return -1;
}
