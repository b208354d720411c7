#include "shim_agent.h"
#include "rdzv_proto.h"
#include "shim_owner.h"
#include "shim_proc.h"
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
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* <unistd.h> has them from glibc 2.34 with kernel headers of 5.9 on. */
#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

#define SHIM_MAX_TRACKED 256
#define S_FD_BITS 65536

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

typedef struct {
    int fd;
    uint64_t handle;
    dev_t dev;                 /* the socket's identity, from fstat at track */
    ino_t ino;
} s_tracked_t;

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static char s_path[sizeof(((struct sockaddr_un *) 0)->sun_path)];
static bool s_have_path;
static s_state_t s_state;
static int s_fd = -1;
static int s_wait_ms = S_AGENT_WAIT_MS;
static _Atomic bool s_off;       /* S_OFF, readable without the lock */
static bool s_require = true;    /* RDZV_SHIM_REQUIRE, not "0" */
static int s_connect_errno;      /* why the last s_connect failed; 0: the agent hung up */
/* Ports already said to be outside this rank's plan (once each). */
static _Atomic uint64_t s_told[65536 / 64];
static _Atomic int s_base, s_limit;
static s_tracked_t s_tracked[SHIM_MAX_TRACKED];
static _Atomic size_t s_ntracked;
/* Entries moved to a dup (s_let_go), counted after the new fd is marked: a
 * close() that took the unlocked path and sees this change under its feet
 * may have closed the very fd an entry just moved to (rdzv_shim_agent_close). */
static atomic_ulong s_moves;
/* One bit per fd below S_FD_BITS that is in s_tracked, and a count of the
 * tracked ones above: close() reads them without the lock. Written under
 * the lock only. */
static _Atomic uint64_t s_fd_bits[S_FD_BITS / 64];
static _Atomic size_t s_nhigh;

/* One line on stderr: "librdzv_shim: <what> <arg>; binds pass through". */
static void s_say(const char *what, const char *arg)
{
    char msg[256];
    int n = snprintf(msg, sizeof msg, "librdzv_shim: %s %s; binds pass through\n", what, arg);
    if (n > 0)
        (void) !write(STDERR_FILENO, msg, (size_t) n < sizeof msg ? (size_t) n : sizeof msg - 1);
}

/* Whether fd may be in s_tracked; false is certain, without a lock. */
static bool s_marked(int fd)
{
    if (fd < 0)
        return false;
    if (fd >= S_FD_BITS)
        return atomic_load(&s_nhigh) > 0;
    return (atomic_load(&s_fd_bits[fd / 64]) >> (fd % 64)) & 1;
}

/* Under the lock. */
static void s_mark(int fd, bool on)
{
    if (fd >= S_FD_BITS) {
        if (on)
            atomic_fetch_add(&s_nhigh, 1);
        else
            atomic_fetch_sub(&s_nhigh, 1);
    } else if (on) {
        atomic_fetch_or(&s_fd_bits[fd / 64], UINT64_C(1) << (fd % 64));
    } else {
        atomic_fetch_and(&s_fd_bits[fd / 64], ~(UINT64_C(1) << (fd % 64)));
    }
}

static void s_drop_connection(void)
{
    if (s_fd >= 0)
        rdzv_shim_real()->close(s_fd);
    s_fd = -1;
}

/* The child must not share the parent's connection: the agent tells
 * processes apart by their connections. Listeners it inherited stay the
 * parent's to report. The child has one thread: no lock needed. */
static void s_atfork_child(void)
{
    s_drop_connection();
    if (s_state == S_CONNECTED)
        s_state = S_UNKNOWN;
    atomic_store(&s_ntracked, 0);
    for (size_t i = 0; i < S_FD_BITS / 64; i++)
        atomic_store(&s_fd_bits[i], 0);
    atomic_store(&s_nhigh, 0);
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
        atomic_store(&s_base, base);
        atomic_store(&s_limit, limit);
    } else if (s_have_path && s_require) {
        /* Without the range, rdzvd's default one: an unreachable agent
         * must still keep the engine out of the ports it would manage. */
        atomic_store(&s_base, RDZV_DEFAULT_PORT_BASE);
        atomic_store(&s_limit, RDZV_DEFAULT_PORT_LIMIT);
    }
    const char *wait = getenv("RDZV_SHIM_AGENT_WAIT_MS");
    if (wait && *wait)
        s_wait_ms = atoi(wait);
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
    atomic_store(&s_base, (int) rep.range_base);
    atomic_store(&s_limit, (int) rep.range_limit);
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
                     atomic_load(&s_base), atomic_load(&s_limit) - 1);
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
        atomic_store(&s_off, true);
        return false;
    }
    if (s_connect(s_deadline()) < 0) {
        if (s_require) {
            s_fail_closed();
            return false;
        }
        s_say("cannot reach the agent at", s_path);
        s_state = S_OFF;
        atomic_store(&s_off, true);
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

bool rdzv_shim_agent_off(void)
{
    pthread_once(&s_once, s_init);
    return atomic_load(&s_off);
}

bool rdzv_shim_agent_range(int *base, int *limit)
{
    pthread_once(&s_once, s_init);
    *base = atomic_load(&s_base);
    *limit = atomic_load(&s_limit);
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

/* Under the lock: takes fd's entry out of the table into *out; false if
 * there is none. */
static bool s_take(int fd, s_tracked_t *out)
{
    size_t n = atomic_load(&s_ntracked);
    for (size_t i = 0; i < n; i++) {
        if (s_tracked[i].fd != fd)
            continue;
        *out = s_tracked[i];
        s_tracked[i] = s_tracked[n - 1];
        atomic_store(&s_ntracked, n - 1);
        s_mark(fd, false);
        return true;
    }
    return false;
}

/* Under the lock. */
static void s_put(const s_tracked_t *e)
{
    size_t n = atomic_load(&s_ntracked);
    if (n < SHIM_MAX_TRACKED) {
        s_tracked[n] = *e;
        atomic_store(&s_ntracked, n + 1);
        s_mark(e->fd, true);
    }
}

/* Under the lock: tells the agent that the listener of handle is closed. */
static void s_report_closed(uint64_t handle)
{
    rdzv_agent_msg_t req = { .magic = RDZV_AGENT_MAGIC, .version = RDZV_AGENT_VERSION,
                             .op = RDZV_AGENT_OP_CLOSE, .handle = handle };
    rdzv_agent_msg_t rep;
    int passed = -1;
    if (s_state == S_CONNECTED && s_exchange(&req, &rep, &passed, s_held_deadline()) < 0)
        s_lose();
}

static bool s_same_socket(int fd, const s_tracked_t *e)
{
    return rdzv_shim_proc_same_socket(fd, e->dev, e->ino);
}

/* Under the lock: e's descriptor is gone, or about to be. If the process
 * still holds the socket through a dup(), the entry moves there and the
 * listener stays the process's, as it would without the shim; else the
 * agent is told. */
static void s_let_go(s_tracked_t e, int gone)
{
    for (;;) {
        int other = rdzv_shim_proc_find_socket(e.dev, e.ino, gone);
        if (other < 0)
            break;
        e.fd = other;
        s_put(&e);
        atomic_fetch_add(&s_moves, 1);
        /* Marked now, so a close() of other waits for the lock; one that came
         * in before the mark either closed other already (checked here) or
         * sees s_moves change and checks again. */
        if (s_same_socket(other, &e))
            return;
        s_take(other, &e);
    }
    s_report_closed(e.handle);
}

void rdzv_shim_agent_track(int fd, uint64_t handle)
{
    if (rdzv_shim_owner_foreign())
        return;
    s_tracked_t e = { .fd = fd, .handle = handle };
    struct stat st;
    if (fstat(fd, &st) == 0) {
        e.dev = st.st_dev;
        e.ino = st.st_ino;
    }
    rdzv_shim_owner_lock();
    /* An entry left for fd means its listener was closed where the shim
     * could not see it (raw syscall) and the number reused. */
    s_tracked_t stale;
    bool have_stale = s_take(fd, &stale);
    s_put(&e);
    if (have_stale)
        s_let_go(stale, fd);
    rdzv_shim_owner_unlock();
}

void rdzv_shim_agent_untrack(int fd)
{
    if (!s_marked(fd) || rdzv_shim_owner_foreign())
        return;
    rdzv_shim_owner_lock();
    s_tracked_t e;
    if (s_take(fd, &e))
        s_report_closed(e.handle);
    rdzv_shim_owner_unlock();
}

/* Under the lock: entries whose descriptor no longer holds their socket (an
 * unlocked close() raced their move there) are let go. Entries without a
 * recorded socket (fstat failed at tracking) cannot be checked. */
static void s_recheck_moved(void)
{
    for (size_t i = 0; i < atomic_load(&s_ntracked);) {
        s_tracked_t *t = &s_tracked[i];
        if (t->ino == 0 || s_same_socket(t->fd, t)) {
            i++;
            continue;
        }
        s_tracked_t e;
        int fd = t->fd;
        s_take(fd, &e);
        s_let_go(e, fd);
    }
}

/* Under the lock, after a call that was to free e's number (close(), or a
 * dup onto it) and returned rc: if the number still holds e's socket (the
 * call failed, or put a dup of the same socket there) the entry stays, else
 * it is let go. Entries without a recorded socket trust rc. */
static void s_settle(s_tracked_t e, int rc)
{
    if (e.ino ? s_same_socket(e.fd, &e) : rc < 0)
        s_put(&e);
    else
        s_let_go(e, e.fd);
}

/* After a call that freed descriptors without the lock: if an entry moved
 * meanwhile (s_moves no longer reads moves), it may have moved onto one of
 * them; check every entry under the lock. errno is kept. */
static void s_recheck_if_moved(unsigned long moves)
{
    if (atomic_load(&s_moves) == moves || rdzv_shim_owner_foreign())
        return;
    int saved = errno;
    rdzv_shim_owner_lock();
    s_recheck_moved();
    rdzv_shim_owner_unlock();
    errno = saved;
}

/* The call freeing number fd (close(), dup2(), dup3()) as libc makes it,
 * errno as libc leaves it. */
typedef int (*s_free_fn)(int fd, const int *args);

static int s_release(int fd, s_free_fn call, const int *args)
{
    unsigned long moves = atomic_load(&s_moves);
    if (!s_marked(fd)) {
        int rc = call(fd, args);
        s_recheck_if_moved(moves);
        return rc;
    }
    if (rdzv_shim_owner_foreign())
        return call(fd, args);
    /* The entry goes and the number is freed under the lock: a thread that
     * gets the number next and binds on it cannot be tracked in between. */
    rdzv_shim_owner_lock();
    s_tracked_t e;
    bool tracked = s_take(fd, &e);
    int rc = call(fd, args);
    int saved = errno;
    if (tracked)
        s_settle(e, rc);
    rdzv_shim_owner_unlock();
    errno = saved;
    return rc;
}

static int s_call_close(int fd, const int *args)
{
    (void) args;
    return rdzv_shim_real()->close(fd);
}

/* args: the source descriptor, then dup3's flags (-1: dup2). */
static int s_call_dup(int fd, const int *args)
{
    const rdzv_shim_real_t *real = rdzv_shim_real();
    return args[1] < 0 ? real->dup2(args[0], fd) : real->dup3(args[0], fd, args[1]);
}

int rdzv_shim_agent_close(int fd)
{
    return s_release(fd, s_call_close, NULL);
}

int rdzv_shim_agent_dup(int from, int to, int flags)
{
    /* dup2(fd, fd) closes nothing, and dup3 refuses it. */
    if (from == to)
        return flags < 0 ? rdzv_shim_real()->dup2(from, to) : rdzv_shim_real()->dup3(from, to, flags);
    int args[2] = { from, flags };
    return s_release(to, s_call_dup, args);
}

int rdzv_shim_agent_close_range(unsigned int first, unsigned int last, int flags)
{
    const rdzv_shim_real_t *real = rdzv_shim_real();
    unsigned long moves = atomic_load(&s_moves);
    /* CLOSE_RANGE_CLOEXEC only marks them, nothing is closed now. */
    if (flags & CLOSE_RANGE_CLOEXEC)
        return real->close_range(first, last, flags);
    bool unshare = flags & CLOSE_RANGE_UNSHARE;
    if (atomic_load(&s_ntracked) == 0 || rdzv_shim_owner_foreign()) {
        int rc = real->close_range(first, last, flags);
        if (!unshare)
            s_recheck_if_moved(moves);
        return rc;
    }
    /* CLOSE_RANGE_UNSHARE gives the caller a copy of the table first when
     * other threads share it (a step before exec): they keep theirs, and
     * nothing of ours changes. With one thread the kernel copies nothing
     * and closes the process's own. */
    if (unshare && rdzv_shim_proc_threads() != 1)
        return real->close_range(first, last, flags);
    rdzv_shim_owner_lock();
    s_tracked_t gone[SHIM_MAX_TRACKED];
    size_t n = 0;
    for (size_t i = 0; i < atomic_load(&s_ntracked);) {
        unsigned int fd = (unsigned int) s_tracked[i].fd;
        if (fd >= first && fd <= last)
            s_take(s_tracked[i].fd, &gone[n++]);
        else
            i++;
    }
    int rc = real->close_range(first, last, flags);
    int saved = errno;
    for (size_t i = 0; i < n; i++)
        s_settle(gone[i], rc);
    rdzv_shim_owner_unlock();
    errno = saved;
    return rc;
}
