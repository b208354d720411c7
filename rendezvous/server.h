/* The ZeroMQ side of rdzvd: a ROUTER socket on a zloop feeding the core in
 * batches, so one journal fsync covers every change of a batch (group
 * commit) before any of its replies leaves. */
#ifndef RDZV_SERVER_H
#define RDZV_SERVER_H

#include "core.h"

typedef struct rdzv_server rdzv_server_t;

/* CURVE: curve_secret is rdzvd's secret certificate (zcert format) and
 * clients_dir holds the public certificates of the clients it accepts.
 * Both NULL: no encryption. */
typedef struct {
    const char *curve_secret;
    const char *clients_dir;
} rdzv_server_security_t;

rdzv_server_t *rdzv_server_new(rdzv_core_t *core, const char *endpoint,
                               const rdzv_server_security_t *security,
                               char *err, size_t errlen);
void rdzv_server_destroy(rdzv_server_t **self_p);
/* Runs until SIGINT/SIGTERM. Returns 0. */
int rdzv_server_run(rdzv_server_t *self);
/* The endpoint actually bound (with the real port for tcp://...:0 or *:!). */
const char *rdzv_server_endpoint(const rdzv_server_t *self);

#endif
