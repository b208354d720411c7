/* The router reconciler: a thread of rdzvd that, while this rdzvd leads,
 * makes each group's router list exactly the group's serving endpoints
 * (driver.h), and tells the core what it found (registration is soft state,
 * rebuilt by the next pass after a restart or a takeover). It reads the
 * core through core.h only and never holds its lock while it talks to a
 * router, so a slow or dead router delays nothing but registration. */
#ifndef RDZV_ROUTER_H
#define RDZV_ROUTER_H

#include <stddef.h>

#include "core.h"

typedef struct {
    const char *token_file;      /* --router-token: bearer token for HTTP routers */
    int interval_ms;             /* a pass every this often (--router-interval) */
    int drain_s;                 /* a draining server goes after this at most */
    /* --router-allow, checked again before each call: a router taken off
     * the list is no longer driven (its registrations are left as they are). */
    const char *const *allow;
    int nallow;
} rdzv_router_opts_t;

typedef struct rdzv_router rdzv_router_t;

/* Starts the thread; NULL with why in err. */
rdzv_router_t *rdzv_router_start(rdzv_core_t *core, const rdzv_router_opts_t *opts, char *err,
                                 size_t errlen);
/* Stops it (a pass in flight finishes its call first) and frees *self_p. */
void rdzv_router_stop(rdzv_router_t **self_p);

#endif
