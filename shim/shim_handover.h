/* The table of descriptors that hold handed-over listeners (and probes):
 * the agent keeps a duplicate of each, so it must hear when the process
 * lets its own go, by close(), dup2()/dup3() onto it or close_range(). A
 * descriptor still held through a dup() keeps its entry. Serialised by
 * the shim's lock (shim_owner.h); close() of a descriptor that holds no
 * hand-over takes no lock. */
#ifndef RDZV_SHIM_HANDOVER_H
#define RDZV_SHIM_HANDOVER_H

#include <stdbool.h>
#include <stdint.h>

/* fd now holds the listener of hand-over handle. An entry still there for
 * fd (its listener closed unseen) is reported closed first. */
void rdzv_shim_handover_track(int fd, uint64_t handle);
/* fd no longer holds its hand-over (it was never installed): tells the
 * agent; fd itself stays open. */
void rdzv_shim_handover_untrack(int fd);
/* close(fd) through libc, with errno as libc leaves it; if fd held a
 * hand-over, the entry goes and the number is freed under the lock, then
 * the agent is told (one round trip). An untracked fd takes no lock. */
int rdzv_shim_handover_close(int fd);
/* The common close(): when fd holds no hand-over, closes it through libc
 * into *rc with no lock and returns true; *moved then says whether an
 * entry moved to a dup meanwhile, maybe onto fd (the caller then runs
 * rdzv_shim_handover_recheck). False, with nothing done, when fd may hold
 * one (then rdzv_shim_handover_close). */
bool rdzv_shim_handover_close_unmarked(int fd, int *rc, bool *moved);
/* Takes the lock and lets go every entry whose descriptor no longer holds
 * its socket; errno is kept. */
void rdzv_shim_handover_recheck(void);
/* dup2(from, to) (flags -1) or dup3(from, to, flags) through libc: to is
 * freed as by close() first, when it held a hand-over. */
int rdzv_shim_handover_dup(int from, int to, int flags);
/* close_range() through libc (the system call before glibc 2.34): every
 * hand-over in [first, last] is let go as by close(), unless the flags
 * only mark them close-on-exec or close them in a copy of the table that
 * other threads do not share. In a process that shares the shim's memory
 * without owning it (a vfork() child), these, close() and the agent's
 * calls go straight to libc or pass: the table is the parent's. */
int rdzv_shim_handover_close_range(unsigned int first, unsigned int last, int flags);

#endif
