#include "shim_handover.h"
#include "shim_agent.h"
#include "shim_owner.h"
#include "shim_proc.h"
#include "shim_syms.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/stat.h>
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

typedef struct {
    int fd;
    uint64_t handle;
    dev_t dev;                 /* the socket's identity, from fstat at track */
    ino_t ino;
} s_tracked_t;

static s_tracked_t s_tracked[SHIM_MAX_TRACKED];
static _Atomic size_t s_ntracked;
/* What close() reads without the lock, side by side so that a close of a
 * low descriptor touches one page of it. Written under the lock only.
 * moves: entries moved to a dup (s_let_go), counted after the new fd is
 * marked: a close() that took the unlocked path and sees this change under
 * its feet may have closed the very fd an entry just moved to
 * (rdzv_shim_handover_close_unmarked). fd_bits: one bit per fd below
 * S_FD_BITS that is in s_tracked; nhigh: a count of the tracked ones above. */
static struct {
    atomic_ulong moves;
    _Atomic size_t nhigh;
    _Atomic uint64_t fd_bits[S_FD_BITS / 64];
} s_unlocked;

/* Whether fd may be in s_tracked; false is certain, without a lock. */
RDZV_SHIM_HOT static bool s_marked(int fd)
{
    if (fd < 0)
        return false;
    if (fd >= S_FD_BITS)
        return atomic_load(&s_unlocked.nhigh) > 0;
    return (atomic_load(&s_unlocked.fd_bits[fd / 64]) >> (fd % 64)) & 1;
}

/* Under the lock. */
static void s_mark(int fd, bool on)
{
    if (fd >= S_FD_BITS) {
        if (on)
            atomic_fetch_add(&s_unlocked.nhigh, 1);
        else
            atomic_fetch_sub(&s_unlocked.nhigh, 1);
    } else if (on) {
        atomic_fetch_or(&s_unlocked.fd_bits[fd / 64], UINT64_C(1) << (fd % 64));
    } else {
        atomic_fetch_and(&s_unlocked.fd_bits[fd / 64], ~(UINT64_C(1) << (fd % 64)));
    }
}

/* Listeners a forked child inherited stay the parent's to report. The
 * child has one thread: no lock needed. */
static void s_atfork_child(void)
{
    atomic_store(&s_ntracked, 0);
    for (size_t i = 0; i < S_FD_BITS / 64; i++)
        atomic_store(&s_unlocked.fd_bits[i], 0);
    atomic_store(&s_unlocked.nhigh, 0);
}

/* At load, for the reason shim_owner.c gives for its own handlers. */
__attribute__((constructor)) static void s_forget_in_child(void)
{
    pthread_atfork(NULL, NULL, s_atfork_child);
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
        atomic_fetch_add(&s_unlocked.moves, 1);
        /* Marked now, so a close() of other waits for the lock; one that came
         * in before the mark either closed other already (checked here) or
         * sees the moves change and checks again. */
        if (s_same_socket(other, &e))
            return;
        s_take(other, &e);
    }
    rdzv_shim_agent_report_closed(e.handle);
}

void rdzv_shim_handover_track(int fd, uint64_t handle)
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

void rdzv_shim_handover_untrack(int fd)
{
    if (!s_marked(fd) || rdzv_shim_owner_foreign())
        return;
    rdzv_shim_owner_lock();
    s_tracked_t e;
    if (s_take(fd, &e))
        rdzv_shim_agent_report_closed(e.handle);
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

void rdzv_shim_handover_recheck(void)
{
    if (rdzv_shim_owner_foreign())
        return;
    int saved = errno;
    rdzv_shim_owner_lock();
    s_recheck_moved();
    rdzv_shim_owner_unlock();
    errno = saved;
}

/* After a call that freed descriptors without the lock: if an entry moved
 * meanwhile (s_unlocked.moves no longer reads moves), it may have moved
 * onto one of them; check every entry under the lock. errno is kept. */
static void s_recheck_if_moved(unsigned long moves)
{
    if (atomic_load(&s_unlocked.moves) != moves)
        rdzv_shim_handover_recheck();
}

/* The call freeing number fd (close(), dup2(), dup3()) as libc makes it,
 * errno as libc leaves it. */
typedef int (*s_free_fn)(int fd, const int *args);

static int s_release(int fd, s_free_fn call, const int *args)
{
    unsigned long moves = atomic_load(&s_unlocked.moves);
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

RDZV_SHIM_HOT bool rdzv_shim_handover_close_unmarked(int fd, int *rc, bool *moved)
{
    unsigned long moves = atomic_load(&s_unlocked.moves);
    if (s_marked(fd))
        return false;
    *rc = rdzv_shim_real()->close(fd);
    *moved = atomic_load(&s_unlocked.moves) != moves;
    return true;
}

int rdzv_shim_handover_close(int fd)
{
    return s_release(fd, s_call_close, NULL);
}

int rdzv_shim_handover_dup(int from, int to, int flags)
{
    /* dup2(fd, fd) closes nothing, and dup3 refuses it. */
    if (from == to)
        return flags < 0 ? rdzv_shim_real()->dup2(from, to) : rdzv_shim_real()->dup3(from, to, flags);
    int args[2] = { from, flags };
    return s_release(to, s_call_dup, args);
}

int rdzv_shim_handover_close_range(unsigned int first, unsigned int last, int flags)
{
    const rdzv_shim_real_t *real = rdzv_shim_real();
    unsigned long moves = atomic_load(&s_unlocked.moves);
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
