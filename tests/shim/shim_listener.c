/* A C program that binds listeners the way engines do, run under the shim
 * by integration.py: shim_listener MODE PORT. Exits 0 when every check of
 * the mode holds, 1 with the reason on stderr otherwise. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define TOKEN_LEN 8
#define THREADS 4
#define WAIT_MS 5000

static int s_fail(const char *what)
{
    fprintf(stderr, "shim_listener: %s: %s\n", what, strerror(errno));
    return -1;
}

static int s_intopt(int fd, int level, int name)
{
    int v = -1;
    socklen_t len = sizeof v;
    getsockopt(fd, level, name, &v, &len);
    return v;
}

/* A listener bound like PyTorch/libzmq bind: SO_REUSEADDR, non-blocking,
 * close-on-exec, TCP_NODELAY and SO_KEEPALIVE, plus a traffic class (IP_TOS,
 * which Linux keeps on IPv6 sockets too, and IPV6_TCLASS), all of which the
 * hand-over keeps. */
static int s_listen(int family, const char *addr, int port, int v6only)
{
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    int tos = 0x10, tclass = 0x20;
    setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
    if (family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tclass, sizeof tclass);
    struct sockaddr_storage ss = { 0 };
    socklen_t len;
    if (family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *) &ss;
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t) port);
        inet_pton(AF_INET, addr, &sin->sin_addr);
        len = sizeof *sin;
    } else {
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *) &ss;
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t) port);
        inet_pton(AF_INET6, addr, &sin6->sin6_addr);
        len = sizeof *sin6;
    }
    if (bind(fd, (struct sockaddr *) &ss, len) < 0 || listen(fd, 16) < 0) {
        s_fail("bind/listen");
        close(fd);
        return -1;
    }
    if (!(fcntl(fd, F_GETFL) & O_NONBLOCK) || !(fcntl(fd, F_GETFD) & FD_CLOEXEC)
        || s_intopt(fd, IPPROTO_TCP, TCP_NODELAY) != 1
        || s_intopt(fd, SOL_SOCKET, SO_KEEPALIVE) != 1 || s_intopt(fd, IPPROTO_IP, IP_TOS) != tos
        || (family == AF_INET6 && s_intopt(fd, IPPROTO_IPV6, IPV6_V6ONLY) != v6only)
        || (family == AF_INET6 && s_intopt(fd, IPPROTO_IPV6, IPV6_TCLASS) != tclass)) {
        fprintf(stderr, "shim_listener: the bound socket lost the caller's flags or options\n");
        close(fd);
        return -1;
    }
    return fd;
}

/* Connects to addr:port, and checks the listener accepts it and reads the
 * token sent. Returns 0, or -1 (errno from connect when refused). */
static int s_roundtrip(int lfd, int family, const char *addr, int port)
{
    struct sockaddr_storage ss = { 0 };
    socklen_t len;
    if (family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *) &ss;
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t) port);
        inet_pton(AF_INET, addr, &sin->sin_addr);
        len = sizeof *sin;
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *) &ss;
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t) port);
        inet_pton(AF_INET6, addr, &sin6->sin6_addr);
        len = sizeof *sin6;
    }
    int c = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(c, (struct sockaddr *) &ss, len) < 0) {
        int err = errno;
        close(c);
        errno = err;
        return -1;
    }
    char token[TOKEN_LEN + 1], got[TOKEN_LEN + 1] = "";
    snprintf(token, sizeof token, "%08d", port);
    struct pollfd pfd = { .fd = lfd, .events = POLLIN };
    int a = poll(&pfd, 1, WAIT_MS) == 1 ? accept(lfd, NULL, NULL) : -1;
    bool ok = a >= 0 && write(c, token, TOKEN_LEN) == TOKEN_LEN
              && read(a, got, TOKEN_LEN) == TOKEN_LEN && memcmp(token, got, TOKEN_LEN) == 0;
    if (a >= 0)
        close(a);
    close(c);
    if (!ok)
        fprintf(stderr, "shim_listener: no round trip through port %d\n", port);
    return ok ? 0 : -2;
}

static int s_mode_v4(int port)
{
    int fd = s_listen(AF_INET, "0.0.0.0", port, 0);
    return fd < 0 || s_roundtrip(fd, AF_INET, "127.0.0.1", port) < 0 ? 1 : 0;
}

static int s_mode_v6only(int port)
{
    int fd = s_listen(AF_INET6, "::", port, 1);
    if (fd < 0 || s_roundtrip(fd, AF_INET6, "::1", port) < 0)
        return 1;
    if (s_roundtrip(fd, AF_INET, "127.0.0.1", port) != -1 || errno != ECONNREFUSED) {
        fprintf(stderr, "shim_listener: an IPv6-only listener took an IPv4 client\n");
        return 1;
    }
    return 0;
}

static int s_mode_dual(int port)
{
    int fd = s_listen(AF_INET6, "::", port, 0);
    return fd < 0 || s_roundtrip(fd, AF_INET, "127.0.0.1", port) < 0
        || s_roundtrip(fd, AF_INET6, "::1", port) < 0 ? 1 : 0;
}

static int s_mode_addr(int port)
{
    int fd = s_listen(AF_INET, "127.0.0.1", port, 0);
    if (fd < 0)
        return 1;
    struct sockaddr_in sin;
    socklen_t len = sizeof sin;
    getsockname(fd, (struct sockaddr *) &sin, &len);
    if (sin.sin_addr.s_addr != htonl(INADDR_LOOPBACK) || ntohs(sin.sin_port) != port) {
        fprintf(stderr, "shim_listener: bound to the wrong address\n");
        return 1;
    }
    return s_roundtrip(fd, AF_INET, "127.0.0.1", port) < 0 ? 1 : 0;
}

static void *s_thread(void *arg)
{
    int port = (int) (intptr_t) arg;
    int fd = s_listen(AF_INET, "0.0.0.0", port, 0);
    intptr_t rc = fd < 0 || s_roundtrip(fd, AF_INET, "127.0.0.1", port) < 0;
    return (void *) rc;
}

static int s_mode_threads(int port)
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, s_thread, (void *) (intptr_t) (port + i));
    int failed = 0;
    for (int i = 0; i < THREADS; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        failed += rc != NULL;
    }
    return failed ? 1 : 0;
}

/* The parent binds before fork, the child binds after it (through its own
 * connection to the agent); both listeners serve. */
static int s_mode_fork(int port)
{
    int fd = s_listen(AF_INET, "0.0.0.0", port, 0);
    if (fd < 0)
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd);
        int cfd = s_listen(AF_INET, "0.0.0.0", port + 1, 0);
        _exit(cfd < 0 || s_roundtrip(cfd, AF_INET, "127.0.0.1", port + 1) < 0 ? 1 : 0);
    }
    int status = 1;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "shim_listener: the child's listener failed\n");
        return 1;
    }
    int again = s_listen(AF_INET, "0.0.0.0", port + 2, 0);
    return s_roundtrip(fd, AF_INET, "127.0.0.1", port) < 0 || again < 0
        || s_roundtrip(again, AF_INET, "127.0.0.1", port + 2) < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: shim_listener v4|v6only|dual|addr|threads|fork PORT\n");
        return 2;
    }
    int port = atoi(argv[2]);
    static const struct {
        const char *name;
        int (*run)(int);
    } modes[] = {
        { "v4", s_mode_v4 }, { "v6only", s_mode_v6only }, { "dual", s_mode_dual },
        { "addr", s_mode_addr }, { "threads", s_mode_threads }, { "fork", s_mode_fork },
    };
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (strcmp(argv[1], modes[i].name) == 0)
            return modes[i].run(port);
    fprintf(stderr, "shim_listener: unknown mode %s\n", argv[1]);
    return 2;
}
