/* The agent's look at its engine: GET http://127.0.0.1:PORT/PATH every
 * interval on a thread of its own (libcurl), each answer handed on as
 * serving (200) or not (anything else: another status, a refused or reset
 * connection, no answer within min(interval, 2 s)). A hung engine never
 * holds the agent up: the request gives up, and the engine counts as not
 * serving. */
#ifndef RDZV_AGENT_HEALTH_H
#define RDZV_AGENT_HEALTH_H

#include <stddef.h>

typedef struct rdzv_agent_health rdzv_agent_health_t;

/* fn(arg, serving) after each check, on the checker's thread: 1 or 0. */
typedef void (rdzv_agent_health_fn)(void *arg, int serving);

/* NULL on failure (reason in err). path starts with '/'. */
rdzv_agent_health_t *rdzv_agent_health_start(int port, const char *path, int interval_ms,
                                             rdzv_agent_health_fn *fn, void *arg,
                                             char *err, size_t errlen);
/* Stops the thread (within one check's timeout) and frees. */
void rdzv_agent_health_stop(rdzv_agent_health_t **self_p);

#endif
