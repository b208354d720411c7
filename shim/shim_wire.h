/* One request to the agent and its reply on a connected SOCK_SEQPACKET
 * socket, with the descriptor the reply may pass (docs/agent.md). No state:
 * the caller holds the connection and its lock. */
#ifndef RDZV_SHIM_WIRE_H
#define RDZV_SHIM_WIRE_H

#include "agent_proto.h"

/* Sends req on fd and receives its reply and the descriptor passed with it
 * (*fd_out, -1 if none), within about ms. Returns 0; -1 if either way
 * failed or the reply is not the answer to req, and then nothing passed is
 * left open. */
int rdzv_shim_wire_exchange(int fd, const rdzv_agent_msg_t *req, rdzv_agent_msg_t *rep,
                            int *fd_out, int ms);

#endif
