/* close() against the shim's table of handed-over listeners, run under the
 * shim by integration.py: shim_close_race MODE PORT. Exits 0 when every
 * check of the mode holds, 1 with the reason on stderr otherwise.
 *   race   four threads, each on its own plan port from PORT, bind a
 *          listener, check it listens and close it, over and over: no
 *          thread's close() may shut down another thread's listener, and
 *          every port must take the next bind.
 *   race_dup2  the same, each listener freed by dup2() of /dev/null onto
 *          its descriptor (then that closed): dup2()'s path through the
 *          shim's table under threads. (That dup2() alone ends the
 *          listener is integration.py dup2_over_listener; here the close()
 *          after it would tell the agent even if dup2() had not.)
 *   stale  a listener closed behind the shim's back (raw syscall), its fd
 *          number reused for another managed listener: the first port must
 *          come free once the second is bound.
 *   stall  with a listener held, waits for a line on stdin (the agent is
 *          stopped meanwhile), then binds PORT + 1 in a thread: the bind
 *          fails with EADDRINUSE within a few RDZV_SHIM_AGENT_WAIT_MS, and
 *          closing a pipe meanwhile does not wait for it.
 *   pair   a listener and its dup() closed by two threads at once, over
 *          and over, with a third thread opening and closing pipes: after
 *          both closes the port must refuse connections (the agent heard
 *          CLOSE) and take the next bind.
 *   vfork  a vfork() child binds a plan port (PORT + 1) before _exit: it
 *          must not take over the parent's connection to the agent (which
 *          closed a descriptor of the parent's, and ended the listeners
 *          handed over through it: one on PORT + 3 is held across) nor its
 *          table, so a listener the parent binds on PORT + 2 and closes
 *          must end.
 *   resume with a listener held, waits for a line (the agent is stopped),
 *          binds PORT + 1 in a thread, prints "binding" and waits for
 *          another line (the agent runs again, well within the protocol's
 *          reply timeout): the bind succeeds, and the listener held from
 *          before still accepts. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent_proto.h"

#define RACE_THREADS 4
#define RACE_SECONDS 3
#define STALL_WAIT_MS_DEFAULT 10000
#define STALL_SLACK 5            /* the bind may take this many waits */
#define STALL_CLOSE_AFTER_MS 200
#define SELF_TIMEOUT_S 60

static atomic_bool s_stop;
static int s_devnull = -1;       /* race_dup2: what dup2() puts over a listener */
static atomic_long s_shut_down, s_in_use, s_rounds;

static int s_fail(const char *what)
{
    fprintf(stderr, "shim_close_race: %s: %s\n", what, strerror(errno));
    return 1;
}

/* A SO_REUSEADDR listener on port, or -1 with errno from bind(). */
static int s_listen(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), on = 1;
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port) };
    if (bind(fd, (struct sockaddr *) &sin, sizeof sin) < 0 || listen(fd, 8) < 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

static bool s_listening(int fd)
{
    int on = 0;
    socklen_t len = sizeof on;
    return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) == 0 && on;
}

static long s_ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000L + (t.tv_nsec - t0->tv_nsec) / 1000000L;
}

static void *s_race_worker(void *arg)
{
    int port = (int) (long) arg;
    while (!atomic_load(&s_stop)) {
        int fd = s_listen(port);
        if (fd < 0) {
            if (errno == EADDRINUSE)
                atomic_fetch_add(&s_in_use, 1);
            continue;
        }
        for (int i = 0; i < 3; i++)
            if (!s_listening(fd)) {
                atomic_fetch_add(&s_shut_down, 1);
                break;
            }
        atomic_fetch_add(&s_rounds, 1);
        if (s_devnull >= 0 && dup2(s_devnull, fd) < 0)
            atomic_fetch_add(&s_shut_down, 1);     /* counted as a failure */
        close(fd);
    }
    return NULL;
}

static int s_race(int port)
{
    pthread_t t[RACE_THREADS];
    for (int i = 0; i < RACE_THREADS; i++)
        pthread_create(&t[i], NULL, s_race_worker, (void *) (long) (port + i));
    sleep(RACE_SECONDS);
    atomic_store(&s_stop, true);
    for (int i = 0; i < RACE_THREADS; i++)
        pthread_join(t[i], NULL);
    int bad = 0;
    for (int i = 0; i < RACE_THREADS; i++) {
        int fd = s_listen(port + i);
        if (fd < 0)
            bad = s_fail("a port did not take a bind after the race");
        else
            close(fd);
    }
    fprintf(stderr, "shim_close_race: %ld rounds, %ld listeners shut down, %ld EADDRINUSE\n",
            atomic_load(&s_rounds), atomic_load(&s_shut_down), atomic_load(&s_in_use));
    if (atomic_load(&s_shut_down) || atomic_load(&s_in_use) || atomic_load(&s_rounds) == 0)
        bad = 1;
    return bad;
}

static pthread_barrier_t s_pair_go;
static atomic_int s_pair_fds[2];

/* Closes its side of the pair each round, released with the other side. */
static void *s_pair_closer(void *arg)
{
    int side = (int) (long) arg;
    for (;;) {
        pthread_barrier_wait(&s_pair_go);
        int fd = atomic_load(&s_pair_fds[side]);
        if (fd < 0)
            return NULL;
        close(fd);
        pthread_barrier_wait(&s_pair_go);
    }
}

/* Pipes opened and closed without a break: unlocked close()s beside the
 * pair's, and fd numbers reused at once. */
static void *s_pair_churn(void *arg)
{
    (void) arg;
    while (!atomic_load(&s_stop)) {
        int p[2];
        if (pipe(p) == 0) {
            close(p[0]);
            close(p[1]);
        }
    }
    return NULL;
}

/* A socket connected to 127.0.0.1:port, or -1. */
static int s_connect_loopback(int port)
{
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c >= 0 && connect(c, (struct sockaddr *) &sin, sizeof sin) < 0) {
        close(c);
        c = -1;
    }
    return c;
}

/* Whether something still listens on port (a connect succeeds). */
static bool s_port_answers(int port)
{
    int c = s_connect_loopback(port);
    if (c >= 0)
        close(c);
    return c >= 0;
}

static int s_pair(int port)
{
    pthread_barrier_init(&s_pair_go, NULL, 3);
    pthread_t closers[2], churn;
    for (long side = 0; side < 2; side++)
        pthread_create(&closers[side], NULL, s_pair_closer, (void *) side);
    pthread_create(&churn, NULL, s_pair_churn, NULL);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long rounds = 0, leaked = 0, refused = 0;
    while (s_ms_since(&t0) < RACE_SECONDS * 1000L) {
        int fd = s_listen(port);
        if (fd < 0) {
            refused++;
            break;
        }
        atomic_store(&s_pair_fds[0], fd);
        atomic_store(&s_pair_fds[1], dup(fd));
        pthread_barrier_wait(&s_pair_go);       /* both close */
        pthread_barrier_wait(&s_pair_go);       /* both closed */
        rounds++;
        if (s_port_answers(port)) {
            leaked++;
            break;
        }
    }
    atomic_store(&s_pair_fds[0], -1);
    atomic_store(&s_pair_fds[1], -1);
    pthread_barrier_wait(&s_pair_go);
    atomic_store(&s_stop, true);
    for (int side = 0; side < 2; side++)
        pthread_join(closers[side], NULL);
    pthread_join(churn, NULL);
    fprintf(stderr, "shim_close_race: %ld pair rounds, %ld still answering after both closes, "
            "%ld binds refused\n", rounds, leaked, refused);
    return leaked || refused || rounds == 0;
}

static int s_stale(int port)
{
    int first = s_listen(port);
    if (first < 0)
        return s_fail("first listener");
    syscall(SYS_close, first);          /* the shim does not see this one */
    int second = s_listen(port + 1);
    if (second < 0)
        return s_fail("second listener");
    if (second != first) {
        fprintf(stderr, "shim_close_race: fd %d not reused (%d)\n", first, second);
        return 1;
    }
    int again = s_listen(port);
    if (again < 0)
        return s_fail("the first port after its fd was reused");
    close(again);
    close(second);
    return 0;
}

typedef struct {
    int port;
    int rc, err;
    atomic_bool done;
} s_stall_bind_t;

static void *s_stall_bind(void *arg)
{
    s_stall_bind_t *b = arg;
    int fd = s_listen(b->port);
    b->rc = fd;
    b->err = errno;
    if (fd >= 0)
        close(fd);
    atomic_store(&b->done, true);
    return NULL;
}

/* Holds a listener on port, says "ready" and waits for the go line (the
 * agent is stopped meanwhile): the listener, or -1. */
static int s_hold_then_go(int port)
{
    int held = s_listen(port);
    if (held < 0) {
        s_fail("listener");
        return -1;
    }
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) {
        s_fail("stdin");
        close(held);
        return -1;
    }
    return held;
}

static int s_stall(int port)
{
    const char *env = getenv("RDZV_SHIM_AGENT_WAIT_MS");
    int wait_ms = env && *env ? atoi(env) : STALL_WAIT_MS_DEFAULT;
    int held = s_hold_then_go(port);
    if (held < 0)
        return 1;
    s_stall_bind_t b = { .port = port + 1 };
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_t t;
    pthread_create(&t, NULL, s_stall_bind, &b);
    usleep(STALL_CLOSE_AFTER_MS * 1000);
    int p[2];
    if (pipe(p) < 0)
        return s_fail("pipe");
    close(p[0]);
    close(p[1]);
    bool waited = atomic_load(&b.done);
    pthread_join(t, NULL);
    long took = s_ms_since(&t0);
    int bad = 0;
    if (waited) {
        fprintf(stderr, "shim_close_race: close() of a pipe waited for a managed bind\n");
        bad = 1;
    }
    if (b.rc >= 0 || b.err != EADDRINUSE) {
        fprintf(stderr, "shim_close_race: the bind gave %d (%s), not EADDRINUSE\n", b.rc,
                strerror(b.err));
        bad = 1;
    }
    if (took > RDZV_AGENT_REPLY_TIMEOUT_MS + (long) STALL_SLACK * wait_ms + 1000) {
        fprintf(stderr, "shim_close_race: the bind took %ld ms with a wait of %d ms\n", took,
                wait_ms);
        bad = 1;
    }
    close(held);
    return bad;
}

/* Whether the listener fd still takes a connection to port. */
static bool s_accepts(int fd, int port)
{
    if (!s_listening(fd))
        return false;
    int c = s_connect_loopback(port);
    /* Another socket of the port's SO_REUSEPORT group may have taken it:
     * wait for ours a while rather than block in accept(). */
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    int a = c >= 0 && poll(&pfd, 1, 5000) == 1 ? accept(fd, NULL, NULL) : -1;
    if (a >= 0)
        close(a);
    if (c >= 0)
        close(c);
    return a >= 0;
}

static int s_resume(int port)
{
    int held = s_hold_then_go(port);
    if (held < 0)
        return 1;
    s_stall_bind_t b = { .port = port + 1 };
    pthread_t t;
    pthread_create(&t, NULL, s_stall_bind, &b);
    printf("binding\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        return s_fail("stdin");
    pthread_join(t, NULL);
    int bad = 0;
    if (b.rc < 0) {
        fprintf(stderr, "shim_close_race: the bind failed (%s) though the agent came back\n",
                strerror(b.err));
        bad = 1;
    }
    if (!s_accepts(held, port)) {
        fprintf(stderr, "shim_close_race: the listener held on %d stopped accepting: %s\n",
                port, strerror(errno));
        bad = 1;
    }
    close(held);
    return bad;
}

static int s_vfork(int port)
{
    int first = s_listen(port);       /* connects to the agent; then empty */
    if (first < 0)
        return s_fail("the first listener");
    close(first);
    int held = s_listen(port + 3);    /* held across the child's life */
    if (held < 0)
        return s_fail("the held listener");
    int keep = open("/dev/null", O_RDONLY | O_CLOEXEC);
    struct stat before, after;
    if (keep < 0 || fstat(keep, &before) < 0)
        return s_fail("/dev/null");
    pid_t pid = vfork();
    if (pid == 0) {
        /* Beyond what POSIX allows a vfork() child, as some programs do. */
        (void) s_listen(port + 1);
        _exit(0);
    }
    if (pid < 0)
        return s_fail("vfork");
    waitpid(pid, NULL, 0);
    int bad = 0;
    if (fstat(keep, &after) < 0 || after.st_ino != before.st_ino
        || after.st_dev != before.st_dev) {
        fprintf(stderr, "shim_close_race: after the vfork() child's bind, descriptor %d "
                "is no longer the parent's /dev/null\n", keep);
        bad = 1;
    }
    int second = s_listen(port + 2);
    if (second < 0)
        return s_fail("the parent's listener after the child");
    close(second);
    if (s_port_answers(port + 2)) {
        fprintf(stderr, "shim_close_race: the parent's listener on %d still answers after "
                "its close(): the agent was not told\n", port + 2);
        bad = 1;
    }
    /* After the parent's next bind: a connection the child had taken over
     * would have been dropped there, and the agent ends what it carried. */
    if (!s_accepts(held, port + 3)) {
        fprintf(stderr, "shim_close_race: the parent's listener on %d stopped accepting "
                "after the vfork() child's bind\n", port + 3);
        bad = 1;
    }
    close(keep);
    close(held);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: shim_close_race race|race_dup2|stale|stall|resume|pair|vfork PORT\n");
        return 2;
    }
    alarm(SELF_TIMEOUT_S);
    int port = atoi(argv[2]);
    if (strcmp(argv[1], "race") == 0)
        return s_race(port);
    if (strcmp(argv[1], "race_dup2") == 0) {
        if ((s_devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
            return s_fail("/dev/null");
        return s_race(port);
    }
    if (strcmp(argv[1], "stale") == 0)
        return s_stale(port);
    if (strcmp(argv[1], "stall") == 0)
        return s_stall(port);
    if (strcmp(argv[1], "resume") == 0)
        return s_resume(port);
    if (strcmp(argv[1], "vfork") == 0)
        return s_vfork(port);
    if (strcmp(argv[1], "pair") == 0)
        return s_pair(port);
    fprintf(stderr, "shim_close_race: unknown mode %s\n", argv[1]);
    return 2;
}
