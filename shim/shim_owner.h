/* The process that owns the shim's state, and the one lock over that state.
 * The connection to the agent and the table of hand-overs share the lock
 * because they change together: a close() takes its entry out of the table
 * and tells the agent under one hold of it. */
#ifndef RDZV_SHIM_OWNER_H
#define RDZV_SHIM_OWNER_H

#include <stdbool.h>

/* Taken across fork() too, so that a forked child finds the state whole;
 * the child owns its copy from then on. */
void rdzv_shim_owner_lock(void);
void rdzv_shim_owner_unlock(void);
/* True in a process that shares the shim's memory without owning it (a
 * vfork() child, which runs no atfork handlers, or another clone that
 * skips them): it has descriptors of its own, so its calls must change
 * nothing of the owner's and go to libc. A system call: only on paths that
 * hold a hand-over or ask the agent. */
bool rdzv_shim_owner_foreign(void);

#endif
