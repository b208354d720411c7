/* The agent's unix socket: serves the shims of the engine's processes
 * (protocol in common/agent_proto.h, docs/agent.md), applies the lease
 * rules and hands over bound sockets. Single-threaded: the caller polls the
 * descriptors it lists and calls rdzv_agent_serve_handle(). */
#ifndef RDZV_AGENT_SERVE_H
#define RDZV_AGENT_SERVE_H

#include "agent_lease.h"

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct rdzv_agent_serve rdzv_agent_serve_t;

typedef struct {
    const char *path;          /* where the socket appears */
    const uid_t *allow_uids;   /* peers allowed besides the agent's uid and root */
    size_t n_allow_uids;
    bool reset_when_idle;      /* sidecar: the last process gone = the engine gone */
    int64_t epoch;
} rdzv_agent_serve_args_t;

/* Creates the socket atomically at args->path (bound under a temporary name,
 * mode set, then renamed), so that it exists only once it can serve. Takes
 * ownership of *lease_p. NULL on failure with the reason in err. */
rdzv_agent_serve_t *rdzv_agent_serve_new(const rdzv_agent_serve_args_t *args,
                                         rdzv_lease_t **lease_p,
                                         char *err, size_t errlen);
/* Shuts down handed-over listeners, closes connections, unlinks the path. */
void rdzv_agent_serve_destroy(rdzv_agent_serve_t **self_p);

/* Writes the descriptors to poll into pfd (at most max); returns how many. */
size_t rdzv_agent_serve_pollfds(rdzv_agent_serve_t *self, struct pollfd *pfd,
                                size_t max);
/* Serves what poll() reported on the entries pollfds() wrote. */
void rdzv_agent_serve_handle(rdzv_agent_serve_t *self, const struct pollfd *pfd,
                             size_t n);
/* True once each time the last engine process went away while
 * reset_when_idle is set (its leases are then already reset); started_epoch
 * is then the epoch served when that engine's first process connected. */
bool rdzv_agent_serve_take_engine_gone(rdzv_agent_serve_t *self, int64_t *started_epoch);
/* A new engine replaces the old one (--restart): every connection left is
 * closed, its listeners shut down, and the whole plan is free again. */
void rdzv_agent_serve_reset(rdzv_agent_serve_t *self);
void rdzv_agent_serve_set_epoch(rdzv_agent_serve_t *self, int64_t epoch);

#endif
