/* A stand-in for the journal's fdatasync (rdzv_journal_set_sync_fn) that
 * tests can hold back: every call counts itself on entry, then waits while
 * held_sync_hold is set, then syncs. Used to show what rdzvd does while its
 * disk is slow or stalled. */
#ifndef RDZV_HELD_SYNC_H
#define RDZV_HELD_SYNC_H

#include <stdatomic.h>
#include <unistd.h>

static atomic_int held_sync_hold;     /* set: calls wait */
static atomic_int held_sync_entered;  /* calls so far, counted on entry */
static atomic_int held_sync_done;     /* calls that returned */

static int held_sync(int fd)
{
    atomic_fetch_add(&held_sync_entered, 1);
    while (atomic_load(&held_sync_hold))
        usleep(500);
    int rc = fd >= 0 ? fdatasync(fd) : 0;
    atomic_fetch_add(&held_sync_done, 1);
    return rc;
}

/* Waits up to ms for held_sync_entered to reach n; returns whether it did. */
static inline int held_sync_wait_entered(int n, int ms)
{
    for (int i = 0; i < ms && atomic_load(&held_sync_entered) < n; i++)
        usleep(1000);
    return atomic_load(&held_sync_entered) >= n;
}

#endif
