/* The agent's conversation with rdzvd, on a thread of its own so that a
 * slow or restarting rdzvd never stalls the shims: the first join, a
 * heartbeat every interval, a resume-join when the group moved to a new
 * epoch (stale_epoch), a fatal error when rdzvd no longer knows the rank
 * (not_found), and a join with a new session when the engine was replaced. Each new assignment is handed to the main thread through a
 * descriptor that becomes readable. */
#ifndef RDZV_AGENT_CONTROL_H
#define RDZV_AGENT_CONTROL_H

#include "rdzv.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct rdzv_agent_control rdzv_agent_control_t;

typedef struct {
    const char *endpoint;
    rdzv_join_args_t join;     /* strings must outlive the control */
    int heartbeat_ms;
    const char *first_session; /* the first join's session (copied); NULL: a new one */
    const char *router;        /* the group's router, sent with each join; NULL: none */
    int drain_timeout_ms;      /* a rank a shrink dropped waits this long for its router */
} rdzv_agent_control_args_t;

/* Starts the thread, which joins at once. NULL on failure (reason in err). */
rdzv_agent_control_t *rdzv_agent_control_new(const rdzv_agent_control_args_t *args,
                                             char *err, size_t errlen);
/* Stops the thread if it is idle; a thread blocked in a request is left
 * to end with the process. */
void rdzv_agent_control_destroy(rdzv_agent_control_t **self_p);

/* Readable when an assignment or a fatal error is waiting. */
int rdzv_agent_control_fd(const rdzv_agent_control_t *self);
/* Exit status of a join rdzvd refused, or of a rank rdzvd no longer knows. */
#define RDZV_AGENT_EXIT_REFUSED 4

/* The newest assignment, owned by the caller, or NULL. A fatal failure: NULL,
 * *exit_code set and the reason in err; the first join failing (3 timeout,
 * RDZV_AGENT_EXIT_REFUSED refused, 1 other) or a heartbeat answered not_found
 * (the group was deleted: RDZV_AGENT_EXIT_REFUSED). */
rdzv_assignment_t *rdzv_agent_control_take(rdzv_agent_control_t *self,
                                           int *exit_code, char *err, size_t errlen);
/* The engine was replaced: join again with a new session id. */
void rdzv_agent_control_rejoin(rdzv_agent_control_t *self);
/* What the heartbeats say of CMD's engine from now on: 1 serving, 0 not,
 * -1 nothing; a change is sent at once rather than at the next beat. Any
 * thread. */
void rdzv_agent_control_set_serving(rdzv_agent_control_t *self, int serving);
/* A graceful stop: from now on the heartbeats say the engine does not
 * serve (whatever its health), and the thread watches rdzvd's status until
 * the group's router no longer lists this rank, or timeout_ms; then
 * rdzv_agent_control_drained says so and the descriptor becomes readable.
 * A drain asked for again goes on as it was. */
void rdzv_agent_control_drain_start(rdzv_agent_control_t *self, int timeout_ms);
bool rdzv_agent_control_drained(rdzv_agent_control_t *self);
/* The drained engine is gone and another may come (sidecar mode): the
 * heartbeats say what its health checks say again. A drain still running
 * is left to end. */
void rdzv_agent_control_undrain(rdzv_agent_control_t *self);
/* The same, waiting for its end (or a second past timeout_ms); whether it
 * ended. */
bool rdzv_agent_control_drain(rdzv_agent_control_t *self, int timeout_ms);

#endif
