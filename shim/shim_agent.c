#include "shim_agent.h"
#include "rdzv_proto.h"
#include "shim_owner.h"
#include "shim_rules.h"
#include "shim_syms.h"
#include "shim_wire.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* S_OFF: no agent configured (RDZV_AGENT_SOCKET unset), or none reached
 * with RDZV_SHIM_REQUIRE=0, so every call passes through. S_CLOSED: the
 * variable names an agent that could not be reached: binds in the managed
 * range fail (a bind passed through would be the very race the agent is
 * there to stop), and each managed bind tries the agent again. S_LOST: an
 * agent was reached and then went away (restarting, say); binds in its
 * range wait for it and never pass through, because the ports are its
 * plan's. */
typedef enum { S_UNKNOWN = 0, S_CONNECTED, S_OFF, S_CLOSED, S_LOST } s_state_t;

#define S_AGENT_WAIT_MS 10000
#define S_RETRY_MS 50
#define S_REPLY_MIN_MS 100
#define S_BACKLOG_RETRY_US 1000

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static char s_path[sizeof(((struct sockaddr_un *) 0)->sun_path)];
static bool s_have_path;
static s_state_t s_state;
static int s_fd = -1;
static int s_wait_ms = S_AGENT_WAIT_MS;
static bool s_require = true;    /* RDZV_SHIM_REQUIRE, not "0" */
static int s_connect_errno;      /* why the last s_connect failed; 0: the agent hung up */
/* Ports already said to be outside this rank's plan (once each). */
static _Atomic uint64_t s_told[65536 / 64];
/* What every call reads, in one word so that one load reads it whole and
 * a range is never seen half changed: S_FAST_READY once s_init has run,
 * S_FAST_OFF (state S_OFF), the range's base in bits 0-16 and its limit
 * in bits 17-33 (0: not known yet). Written under the shim's lock or in
 * s_init. */
static _Atomic uint64_t s_fast;
#define S_FAST_READY (UINT64_C(1) << 63)
#define S_FAST_OFF (UINT64_C(1) << 62)
#define S_FAST_PORT_BITS 17
#define S_FAST_PORT_MASK ((UINT64_C(1) << S_FAST_PORT_BITS) - 1)
#define S_FAST_RANGE (S_FAST_PORT_MASK | (S_FAST_PORT_MASK << S_FAST_PORT_BITS))

/* Replaces the bits of mask in s_fast with those of bits. */
static void s_fast_set(uint64_t mask, uint64_t bits)
{
    uint64_t old = atomic_load(&s_fast);
    while (!atomic_compare_exchange_weak(&s_fast, &old, (old & ~mask) | (bits & mask)))
        ;
}

static void s_set_range(int base, int limit)
{
    s_fast_set(S_FAST_RANGE, (uint64_t) base | (uint64_t) limit << S_FAST_PORT_BITS);
}

static int s_range_base(uint64_t fast)
{
    return (int) (fast & S_FAST_PORT_MASK);
}

static int s_range_limit(uint64_t fast)
{
    return (int) ((fast >> S_FAST_PORT_BITS) & S_FAST_PORT_MASK);
}

/* One line on stderr: "librdzv_shim: <what> <arg>; binds pass through". */
static void s_say(const char *what, const char *arg)
{
    char msg[256];
    int n = snprintf(msg, sizeof msg, "librdzv_shim: %s %s; binds pass through\n", what, arg);
    if (n > 0)
        (void) !write(STDERR_FILENO, msg, (size_t) n < sizeof msg ? (size_t) n : sizeof msg - 1);
}

static void s_drop_connection(void)
{
    if (s_fd >= 0)
        rdzv_shim_real()->close(s_fd);
    s_fd = -1;
}

/* The child must not share the parent's connection: the agent tells
 * processes apart by their connections. The child has one thread: no lock
 * needed. */
static void s_atfork_child(void)
{
    s_drop_connection();
    if (s_state == S_CONNECTED)
        s_state = S_UNKNOWN;
}

/* At load, for the reason shim_owner.c gives for its own handlers. */
__attribute__((constructor)) static void s_forget_in_child(void)
{
    pthread_atfork(NULL, NULL, s_atfork_child);
}

static void s_init(void)
{
    const char *path = getenv(RDZV_AGENT_SOCKET_ENV);
    if (path && *path && strlen(path) < sizeof s_path) {
        strcpy(s_path, path);
        s_have_path = true;
    }
    const char *require = getenv("RDZV_SHIM_REQUIRE");
    s_require = !(require && strcmp(require, "0") == 0);
    int base, limit;
    if (rdzv_shim_parse_range(getenv(RDZV_PORT_RANGE_ENV), &base, &limit) == 0) {
        s_set_range(base, limit);
    } else if (s_have_path && s_require) {
        /* Without the range, rdzvd's default one: an unreachable agent
         * must still keep the engine out of the ports it would manage. */
        s_set_range(RDZV_DEFAULT_PORT_BASE, RDZV_DEFAULT_PORT_LIMIT);
    }
    const char *wait = getenv("RDZV_SHIM_AGENT_WAIT_MS");
    if (wait && *wait)
        s_wait_ms = atoi(wait);
    s_fast_set(S_FAST_READY, S_FAST_READY);
}

static int64_t s_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t) t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The end of one wait for the agent: a bind, a CLOSE, a first HELLO. */
static int64_t s_deadline(void)
{
    return s_now_ms() + s_wait_ms;
}

/* The end of a request on the connection in use. It carries the listeners
 * handed over so far, and the agent ends them all (shutdown) when it goes:
 * giving up on it early would take a stalled agent's slowness out on
 * listeners the process holds. So it gets the protocol's whole reply
 * timeout; RDZV_SHIM_AGENT_WAIT_MS bounds reconnecting. */
static int64_t s_held_deadline(void)
{
    return s_now_ms() + RDZV_AGENT_REPLY_TIMEOUT_MS;
}

/* How long the next request may wait for its reply: what is left before
 * deadline, at least S_REPLY_MIN_MS, at most the protocol's timeout. */
static int s_budget_ms(int64_t deadline)
{
    int64_t left = deadline - s_now_ms();
    if (left < S_REPLY_MIN_MS)
        return S_REPLY_MIN_MS;
    return left > RDZV_AGENT_REPLY_TIMEOUT_MS ? RDZV_AGENT_REPLY_TIMEOUT_MS : (int) left;
}

/* One request and its reply, waiting at most until deadline (within the
 * bounds of s_budget_ms). */
static int s_exchange(const rdzv_agent_msg_t *req, rdzv_agent_msg_t *rep, int *fd_out,
                      int64_t deadline)
{
    return rdzv_shim_wire_exchange(s_fd, req, rep, fd_out, s_budget_ms(deadline));
}

/* A connection that an agent that is stopped, not gone, would accept
 * into its backlog is bounded by the HELLO's wait for its reply. */
static int s_connect(int64_t deadline)
{
    s_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s_fd < 0)
        return -1;
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    strcpy(sun.sun_path, s_path);
    int rc;
    /* Non-blocking, a unix connect() to a full backlog fails with EAGAIN at
     * once: a busy agent (many processes of an engine starting together)
     * is not a missing one, so try again until the deadline. */
    for (;;) {
        rc = connect(s_fd, (struct sockaddr *) &sun, sizeof sun);
        if (rc == 0 || (errno != EINTR && errno != EAGAIN) || s_now_ms() >= deadline)
            break;
        if (errno == EAGAIN)
            usleep(S_BACKLOG_RETRY_US);
    }
    s_connect_errno = rc < 0 ? errno : 0;
    rdzv_agent_msg_t req = { .magic = RDZV_AGENT_MAGIC, .version = RDZV_AGENT_VERSION,
                             .op = RDZV_AGENT_OP_HELLO };
    rdzv_agent_msg_t rep;
    int fd = -1;
    if (rc < 0 || s_exchange(&req, &rep, &fd, deadline) < 0 || rep.status != 0
        || rep.range_base == 0 || rep.range_base >= rep.range_limit) {
        s_drop_connection();
        return -1;
    }
    s_set_range((int) rep.range_base, (int) rep.range_limit);
    return 0;
}

/* Under the lock, after the agent went away: tries to reach it again until
 * deadline (a restarted agent serves the same socket path), at least once.
 * The lock is let go between tries, so that a CLOSE or another thread's
 * bind is not held up by the sleeps; one of those may reconnect first. */
static bool s_reconnect(int64_t deadline)
{
    for (;;) {
        if (s_state == S_CONNECTED)
            return true;
        if (s_connect(deadline) == 0) {
            static const char msg[] = "librdzv_shim: reached the agent again\n";
            (void) !write(STDERR_FILENO, msg, sizeof msg - 1);
            s_state = S_CONNECTED;
            return true;
        }
        int64_t left = deadline - s_now_ms();
        if (left <= 0)
            return false;
        rdzv_shim_owner_unlock();
        usleep((useconds_t) (left < S_RETRY_MS ? left : S_RETRY_MS) * 1000);
        rdzv_shim_owner_lock();
    }
}

/* Why the agent at s_path could not be reached, in the user's terms. */
static const char *s_unreachable_why(char *buf, size_t len)
{
    switch (s_connect_errno) {
    case ENOENT:
        return "no socket there: no agent runs, or RDZV_AGENT_SOCKET is wrong";
    case ECONNREFUSED:
        return "connection refused: the agent that made it is gone";
    case EACCES:
        snprintf(buf, len, "permission denied: the agent runs as another uid; start it with "
                 "--allow-uid %d", (int) getuid());
        return buf;
    case 0:
        snprintf(buf, len, "the agent hung up: uid %d is not allowed (add --allow-uid %d), or "
                 "it is still starting", (int) getuid(), (int) getuid());
        return buf;
    default:
        snprintf(buf, len, "%s", strerror(s_connect_errno));
        return buf;
    }
}

/* Under the lock: the first try failed, with RDZV_AGENT_SOCKET set. */
static void s_fail_closed(void)
{
    char why[160], msg[512];
    const char *reason = s_unreachable_why(why, sizeof why);
    int n = snprintf(msg, sizeof msg, "librdzv_shim: cannot reach the agent at %s (%s); binds "
                     "in the managed range %d-%d fail with EADDRINUSE until it answers "
                     "(RDZV_SHIM_REQUIRE=0 lets them pass)\n", s_path, reason,
                     s_range_base(atomic_load(&s_fast)), s_range_limit(atomic_load(&s_fast)) - 1);
    if (n > 0)
        (void) !write(STDERR_FILENO, msg, (size_t) n < sizeof msg ? (size_t) n : sizeof msg - 1);
    s_state = S_CLOSED;
}

static void s_lose(void)
{
    static const char msg[] = "librdzv_shim: lost the agent; binds in its range wait for it\n";
    (void) !write(STDERR_FILENO, msg, sizeof msg - 1);
    s_drop_connection();
    s_state = S_LOST;
}

/* Under the lock: a live connection of this process, or false. */
static bool s_ensure(void)
{
    if (s_state == S_CLOSED && s_connect(s_now_ms()) == 0) {
        static const char msg[] = "librdzv_shim: reached the agent\n";
        (void) !write(STDERR_FILENO, msg, sizeof msg - 1);
        s_state = S_CONNECTED;
    }
    if (s_state != S_UNKNOWN)
        return s_state == S_CONNECTED;
    if (!s_have_path) {
        s_say("not set:", RDZV_AGENT_SOCKET_ENV);
        s_state = S_OFF;
        s_fast_set(S_FAST_OFF, S_FAST_OFF);
        return false;
    }
    if (s_connect(s_deadline()) < 0) {
        if (s_require) {
            s_fail_closed();
            return false;
        }
        s_say("cannot reach the agent at", s_path);
        s_state = S_OFF;
        s_fast_set(S_FAST_OFF, S_FAST_OFF);
        return false;
    }
    s_state = S_CONNECTED;
    return true;
}

bool rdzv_shim_agent_closed(void)
{
    rdzv_shim_owner_lock();
    bool closed = s_state == S_CLOSED;
    rdzv_shim_owner_unlock();
    return closed;
}

void rdzv_shim_agent_not_in_plan(int port, int first, int limit)
{
    if (port <= 0 || port > 65535)
        return;
    uint64_t bit = (uint64_t) 1 << (port % 64);
    if (atomic_fetch_or(&s_told[port / 64], bit) & bit)
        return;
    char msg[192];
    int n = snprintf(msg, sizeof msg, "librdzv_shim: port %d is managed by rdzvd but not in "
                     "this rank's plan %d-%d\n", port, first, limit - 1);
    if (n > 0)
        (void) !write(STDERR_FILENO, msg, (size_t) n < sizeof msg ? (size_t) n : sizeof msg - 1);
}

/* s_fast, read once s_init has run. */
RDZV_SHIM_HOT static uint64_t s_fast_word(void)
{
    uint64_t fast = atomic_load_explicit(&s_fast, memory_order_acquire);
    if (fast & S_FAST_READY)
        return fast;
    pthread_once(&s_once, s_init);
    return atomic_load_explicit(&s_fast, memory_order_acquire);
}

RDZV_SHIM_HOT bool rdzv_shim_agent_off(void)
{
    return s_fast_word() & S_FAST_OFF;
}

RDZV_SHIM_HOT bool rdzv_shim_agent_range(int *base, int *limit)
{
    uint64_t fast = s_fast_word();
    *base = s_range_base(fast);
    *limit = s_range_limit(fast);
    return *base > 0;
}

bool rdzv_shim_agent_ready(void)
{
    if (rdzv_shim_owner_foreign())
        return false;
    pthread_once(&s_once, s_init);
    rdzv_shim_owner_lock();
    /* A lost agent's range stays managed; rdzv_shim_agent_bind waits for it. */
    bool ok = s_state == S_LOST || s_ensure();
    rdzv_shim_owner_unlock();
    return ok;
}

int rdzv_shim_agent_bind(const rdzv_agent_msg_t *req, rdzv_agent_msg_t *rep, int *fd_out)
{
    if (rdzv_shim_owner_foreign())
        return -1;
    pthread_once(&s_once, s_init);
    rdzv_shim_owner_lock();
    int rc = -1;
    int64_t deadline = s_deadline();
    if (s_state == S_LOST) {
        rc = s_reconnect(deadline) ? s_exchange(req, rep, fd_out, deadline) : -2;
    } else if (s_ensure()) {
        rc = s_exchange(req, rep, fd_out, s_held_deadline());
        /* The connection may be to an agent that has since restarted. */
        if (rc < 0) {
            s_lose();
            rc = s_reconnect(deadline) ? s_exchange(req, rep, fd_out, deadline) : -2;
        }
    }
    if (rc == -1 && s_state == S_CONNECTED)
        s_lose();
    if (rc == -1 && s_state == S_LOST)
        rc = -2;
    rdzv_shim_owner_unlock();
    return rc;
}

void rdzv_shim_agent_report_closed(uint64_t handle)
{
    rdzv_agent_msg_t req = { .magic = RDZV_AGENT_MAGIC, .version = RDZV_AGENT_VERSION,
                             .op = RDZV_AGENT_OP_CLOSE, .handle = handle };
    rdzv_agent_msg_t rep;
    int passed = -1;
    if (s_state == S_CONNECTED && s_exchange(&req, &rep, &passed, s_held_deadline()) < 0)
        s_lose();
}
