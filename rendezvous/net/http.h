/* rdzvd's HTTP endpoint for operators (libmicrohttpd, one internal thread):
 * /healthz, /readyz, /metrics (Prometheus text 0.0.4), /v1/groups and
 * /v1/groups/NAME. It only reads the core, through core.h. NCCL IDs are
 * never served (the groups' documents show how many there are); with a
 * bearer token everything but the two probes asks for it. */
#ifndef RDZV_HTTP_H
#define RDZV_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "core.h"

typedef struct rdzv_http rdzv_http_t;

/* Starts serving on addr_port: "PORT" (loopback), "IPV4:PORT" or
 * "[IPV6]:PORT", numeric addresses only; port 0 lets the kernel choose.
 * bearer (copied; NULL: none) is the token every request but /healthz and
 * /readyz must carry as "Authorization: Bearer TOKEN". Until
 * rdzv_http_set_core, /healthz answers 200 and /readyz 503. NULL on failure
 * with the reason, naming --http, in err. */
rdzv_http_t *rdzv_http_new(const char *addr_port, const char *bearer, char *err, size_t errlen);
/* Whether addr_port (as rdzv_http_new takes it) is a loopback address. */
bool rdzv_http_is_loopback(const char *addr_port);
/* Serves core's state from now on (it has been replayed: /readyz turns
 * 200). core stays the caller's and must outlive the server, or be
 * detached first with core NULL. */
void rdzv_http_set_core(rdzv_http_t *self, rdzv_core_t *core);
/* The port actually bound (useful after port 0). */
int rdzv_http_port(const rdzv_http_t *self);
/* Stops the thread and closes the socket; NULLs *self_p; NULL is fine. */
void rdzv_http_destroy(rdzv_http_t **self_p);

/* Splits "PORT", "HOST:PORT" or "[HOST]:PORT" into a numeric socket address
 * (loopback when no host is given). 0 or -1 with the reason in err.
 * Exposed for the tests. */
struct sockaddr_storage;
int rdzv_http_parse_addr(const char *addr_port, struct sockaddr_storage *out,
                         char *err, size_t errlen);

#endif
