/* A drain asked for through a file: PATH.drain beside the agent's socket.
 * In a Kubernetes Pod the engine is another container, stopped before the
 * agent (a native sidecar), and its preStop hook cannot signal the agent;
 * it can create a file in the volume they share and wait until the agent
 * removes it, which the agent does once the group's router has let the
 * rank go (or --drain-timeout passed). */
#ifndef RDZV_AGENT_DRAIN_H
#define RDZV_AGENT_DRAIN_H

#include <stdbool.h>
#include <stddef.h>

#define RDZV_AGENT_DRAIN_SUFFIX ".drain"

typedef struct rdzv_agent_drain_watch rdzv_agent_drain_watch_t;

/* Watches socket_path's directory for PATH.drain (one left from an earlier
 * agent is removed first); NULL with why in err. */
rdzv_agent_drain_watch_t *rdzv_agent_drain_watch_new(const char *socket_path, char *err,
                                                     size_t errlen);
void rdzv_agent_drain_watch_destroy(rdzv_agent_drain_watch_t **self_p);
/* Readable when something was created in the directory. */
int rdzv_agent_drain_watch_fd(const rdzv_agent_drain_watch_t *self);
/* Reads what woke the descriptor; whether PATH.drain exists now. */
bool rdzv_agent_drain_watch_asked(rdzv_agent_drain_watch_t *self);
/* The drain is over: PATH.drain is removed, which its creator waits for. */
void rdzv_agent_drain_watch_done(rdzv_agent_drain_watch_t *self);

#endif
