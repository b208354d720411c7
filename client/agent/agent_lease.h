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

/* Where a listener is bound on its port, as the kernel's bind conflict
 * check sees it. An IPv4-mapped IPv6 address counts as the IPv4 one. */
typedef struct {
    int family;                /* AF_INET or AF_INET6 */
    unsigned char addr[16];    /* network order; IPv4 in the first 4 bytes */
    bool v6only;               /* AF_INET6: IPV6_V6ONLY set */
} rdzv_lease_where_t;

/* A table for the managed range [range_base, range_limit) and the plan
 * (nplan ports, each inside the range). NULL on bad arguments or memory. */
rdzv_lease_t *rdzv_lease_new(int range_base, int range_limit,
                             const int *plan, size_t nplan);
void rdzv_lease_destroy(rdzv_lease_t **self_p);

int rdzv_lease_range_base(const rdzv_lease_t *self);
int rdzv_lease_range_limit(const rdzv_lease_t *self);
rdzv_port_state_t rdzv_lease_state(const rdzv_lease_t *self, int port);
/* The plan's lowest port and highest + 1 (a plan is one block); false if
 * the plan is empty. */
bool rdzv_lease_plan_span(const rdzv_lease_t *self, int *first, int *limit);

/* A probe of port: FREE -> LEASED; anything else in the range: EADDRINUSE;
 * outside the range: EINVAL. */
int rdzv_lease_probe(rdzv_lease_t *self, int port);
/* Undoes a probe whose socket could not be made: LEASED -> FREE. */
void rdzv_lease_unprobe(rdzv_lease_t *self, int port);
/* A port-0 probe: leases the first FREE port of the plan in port-0 order
 * (rdzv_lease_port0_slot) and stores it in *port_out. With none FREE, the port-0 lease taken longest
 * ago whose probe socket is closed everywhere (no holder, below) and that
 * never took a listener is leased again: a caller of vLLM's get_open_port()
 * asks for a fresh port again and again and binds few of them.
 * EADDRINUSE when there is none of either. */
int rdzv_lease_probe_any(rdzv_lease_t *self, int *port_out);
/* The k-th slot (0-based) of a plan of n ports in the order port-0 probes
 * take them: the probe pool from its bottom, then the ports below it from
 * the top down, so that the named roles (the store's and the DP RPC's two
 * places, the api port) come last: a program's probe-close-bind of port 0
 * must not take the port a later epoch's store binds. */
size_t rdzv_lease_port0_slot(size_t n, size_t k);
/* A probe socket of port was passed (delta 1) or is closed everywhere
 * (delta -1); only a port-0 lease without holders is leased again. */
void rdzv_lease_hold(rdzv_lease_t *self, int port, int delta);
/* A listener on port at where: FREE or LEASED -> TAKEN. A TAKEN port takes
 * another listener where the kernel would: on an address that overlaps no
 * listener's there (0.0.0.0 beside [::] with IPV6_V6ONLY, 127.0.0.1 beside
 * 127.0.0.2), or beside overlapping ones only if it and each of them set
 * SO_REUSEPORT. Overlapping: the same family with either address the
 * wildcard or both equal; a dual-stack [::] overlaps every IPv4 address.
 * Outside the plan: EADDRINUSE (EINVAL outside the range or for a family
 * other than AF_INET/AF_INET6); ENOMEM. */
int rdzv_lease_listen_at(rdzv_lease_t *self, int port, const rdzv_lease_where_t *where,
                         bool reuseport);
/* The listener at where on port went away; the port stays leased to the
 * Pod. */
void rdzv_lease_unlisten_at(rdzv_lease_t *self, int port, const rdzv_lease_where_t *where);
/* The engine has gone: every port of the plan is FREE again. */
void rdzv_lease_reset(rdzv_lease_t *self);

#endif
