/* The shim's connection to the agent: one per process, opened on first
 * need, replaced in a forked child, serialised by the shim's lock
 * (shim_owner.h). What the agent said of the managed range lives here too.
 * The hand-overs it made are tracked in shim_handover.h. */
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

/* Under the shim's lock: tells the agent that the listener of hand-over
 * handle is closed (one round trip), if it is connected; a failure counts
 * as the agent lost. */
void rdzv_shim_agent_report_closed(uint64_t handle);

#endif
