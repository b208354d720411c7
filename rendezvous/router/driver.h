/* One reconcile of one group at its router: make the router's worker list
 * match the group's serving endpoints, and say which ranks it lists as
 * ready. Each driver speaks one kind of router (router_url.h); the loop in
 * router.c calls them with what the core says and reports what they found.
 * A driver blocks for at most a few seconds (its own timeouts) and never
 * touches the core. */
#ifndef RDZV_ROUTER_DRIVER_H
#define RDZV_ROUTER_DRIVER_H

#include <stdbool.h>
#include <stddef.h>

#include "router_url.h"

/* Room for "[IPv6]:PORT" of a 255-byte host. */
#define RDZV_ROUTER_ADDR_MAX 272

/* One rank of the group with a plan, whose host is an address a router can
 * be given: an IP literal (canonical, as inet_ntop writes it) or a DNS
 * name, never text that could carry a command. */
typedef struct {
    int rank;
    char host[256];
    int port;                    /* its API's: the plan's api port */
    bool ip;                     /* host is an IP literal */
    char addr[RDZV_ROUTER_ADDR_MAX];   /* HOST:PORT, [HOST]:PORT for IPv6 */
    bool want;                   /* alive and serving: the router should send it requests */
    bool alive;                  /* its agent is heard from: drained first, not cut off */
    /* Alive, but rdzvd has no word on its engine yet: a restarted or newly
     * leading rdzvd before the rank's next heartbeat. Its registration is
     * left as the router has it, neither added nor taken off. */
    bool keep;
} rdzv_router_member_t;

typedef struct {
    const char *group;
    const rdzv_router_url_t *url;
    const char *token;           /* HTTP routers: the bearer token, NULL for none */
    const rdzv_router_member_t *members;
    int nmembers;
    /* HTTP routers: worker URLs this rdzvd added for the group and has not
     * removed yet, so that a rank moved to another port is taken off too;
     * the driver updates it (http_owned_*). */
    char **owned;
    int nowned, owned_cap;
    int drain_s;                 /* HAProxy: a drained server goes after this at most */
    /* out: whether the router was read (known), and then the ranks it lists
     * as ready and those it lists still, on the way out (each at most
     * nmembers); and why the reconcile fell short */
    bool known;
    int *registered;
    int nregistered;
    int *draining;
    int ndraining;
    rdzv_router_err_t why;
    char err[256];
} rdzv_router_sync_t;

/* 0 when the router now matches; -1 with why and err set. Either way, when
 * known, registered and draining say what the router was last seen to
 * hold. A driver gives up at the first call that times out or finds no
 * router: one dead router must not hold the loop for long. */
int rdzv_router_haproxy_sync(rdzv_router_sync_t *s);
int rdzv_router_http_sync(rdzv_router_sync_t *s);

/* host as a router may be given it: an IP literal made canonical (ip
 * true) or a DNS name; -1 for anything else. */
int rdzv_router_host(const char *host, char *out, size_t len, bool *ip);

/* Sets why and err (printf-style); returns -1. */
int rdzv_router_fail(rdzv_router_sync_t *s, rdzv_router_err_t why, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
