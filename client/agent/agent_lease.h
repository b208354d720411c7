/* Lease rules of one rank's port plan: which bind the shim may complete on
 * which port. Pure bookkeeping, no sockets, so that the rules are unit
 * tested on their own (tests/agent/test_lease.c).
 *
 * A port of the plan is FREE (only the agent's reservation holds it),
 * LEASED (a probe of the Pod got it; it stays leased after the probe
 * closes) or TAKEN (one or more listeners were handed a socket on it).
 * Functions return 0 or a positive errno value, the one bind() fails with. */
#ifndef RDZV_AGENT_LEASE_H
#define RDZV_AGENT_LEASE_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    RDZV_PORT_OUTSIDE = 0,   /* not in the managed range */
    RDZV_PORT_FOREIGN,       /* in the range, not in this rank's plan */
    RDZV_PORT_FREE,
    RDZV_PORT_LEASED,
    RDZV_PORT_TAKEN,
} rdzv_port_state_t;

typedef struct rdzv_lease rdzv_lease_t;

/* A table for the managed range [range_base, range_limit) and the plan
 * (nplan ports, each inside the range). NULL on bad arguments or memory. */
rdzv_lease_t *rdzv_lease_new(int range_base, int range_limit,
                             const int *plan, size_t nplan);
void rdzv_lease_destroy(rdzv_lease_t **self_p);

int rdzv_lease_range_base(const rdzv_lease_t *self);
int rdzv_lease_range_limit(const rdzv_lease_t *self);
rdzv_port_state_t rdzv_lease_state(const rdzv_lease_t *self, int port);

/* A probe of port: FREE -> LEASED; anything else in the range: EADDRINUSE;
 * outside the range: EINVAL. */
int rdzv_lease_probe(rdzv_lease_t *self, int port);
/* Undoes a probe whose socket could not be made: LEASED -> FREE. */
void rdzv_lease_unprobe(rdzv_lease_t *self, int port);
/* A port-0 probe: leases the first FREE port of the plan (plan order) and
 * stores it in *port_out; EADDRINUSE when none is left. */
int rdzv_lease_probe_any(rdzv_lease_t *self, int *port_out);
/* A listener on port: FREE or LEASED -> TAKEN. A TAKEN port takes another
 * listener only if it and every listener already there set SO_REUSEPORT,
 * as the kernel would allow. Outside the plan: EADDRINUSE (EINVAL outside
 * the range). */
int rdzv_lease_listen(rdzv_lease_t *self, int port, bool reuseport);
/* One listener on port went away; the port stays leased to the Pod. */
void rdzv_lease_unlisten(rdzv_lease_t *self, int port);
/* The engine has gone: every port of the plan is FREE again. */
void rdzv_lease_reset(rdzv_lease_t *self);

#endif
