/* The shim's connection to the agent: one per process, opened on first
 * need, replaced in a forked child, serialised by a lock. Also the table of
 * descriptors that hold handed-over listeners, so that close() can tell
 * the agent. */
#ifndef RDZV_SHIM_AGENT_H
#define RDZV_SHIM_AGENT_H

#include "agent_proto.h"

#include <stdbool.h>
#include <stdint.h>

/* The managed range, from RDZV_PORT_RANGE before the agent was asked and
 * from the agent's HELLO reply after; false while unknown. */
bool rdzv_shim_agent_range(int *base, int *limit);
/* Connects (first use) and learns the range. False: the variable is unset
 * or the agent unreachable, and the shim has said so once on stderr;
 * every bind then passes through, unless the agent is required. */
bool rdzv_shim_agent_ready(void);
/* True when RDZV_AGENT_SOCKET names an agent that was not reached and
 * RDZV_SHIM_REQUIRE is not 0: binds in the managed range must fail. */
bool rdzv_shim_agent_closed(void);
/* Says once per port on stderr that the agent refused port because it is
 * in the managed range but outside this rank's plan [first, limit). */
void rdzv_shim_agent_not_in_plan(int port, int first, int limit);
/* True once the shim knows every call passes through (no agent configured,
 * or none reached at the first try); lock-free, for the fast path. */
bool rdzv_shim_agent_off(void);
/* Sends a BIND request, receives the reply and the passed descriptor
 * (*fd_out, -1 if none). Returns 0; -1 when no agent is in use (pass the
 * call through); -2 when the agent that was in use is gone and did not come
 * back within RDZV_SHIM_AGENT_WAIT_MS (default 10000): fail the bind. */
int rdzv_shim_agent_bind(const rdzv_agent_msg_t *req, rdzv_agent_msg_t *rep, int *fd_out);

/* fd now holds the listener of hand-over handle. An entry still there for
 * fd (its listener closed unseen) is reported closed first. */
void rdzv_shim_agent_track(int fd, uint64_t handle);
/* fd no longer holds its hand-over (it was never installed): tells the
 * agent; fd itself stays open. */
void rdzv_shim_agent_untrack(int fd);
/* close(fd) through libc, with errno as libc leaves it; if fd held a
 * hand-over, the entry goes and the number is freed under the lock, then
 * the agent is told (one round trip). An untracked fd takes no lock. */
int rdzv_shim_agent_close(int fd);
/* dup2(from, to) (flags -1) or dup3(from, to, flags) through libc: to is
 * freed as by close() first, when it held a hand-over. */
int rdzv_shim_agent_dup(int from, int to, int flags);
/* close_range() through libc (the system call before glibc 2.34): every
 * hand-over in [first, last] is let go as by close(), unless the flags
 * only mark them close-on-exec or close them in a copy of the table that
 * other threads do not share. In a process that shares the shim's memory
 * without owning it (a vfork() child), these, close() and the agent's
 * calls go straight to libc or pass: the table is the parent's. */
int rdzv_shim_agent_close_range(unsigned int first, unsigned int last, int flags);

#endif
