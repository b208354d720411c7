/* Defaults a rank reports about itself when the caller gives none. */
#ifndef RDZV_ROUTE_H
#define RDZV_ROUTE_H

#include <stddef.h>

/* The host part of a ZeroMQ tcp endpoint ("tcp://[src;]HOST:PORT", HOST
 * possibly in brackets) into out. Returns 0, or -1 if endpoint is not tcp
 * or has no host and port. */
int rdzv_route_endpoint_host(const char *endpoint, char *out, size_t outlen);

/* How a message about a server name that does not resolve starts:
 * "cannot resolve server host 'H' (DNS: getaddrinfo's reason)". */
#define RDZV_ROUTE_UNRESOLVED "cannot resolve server host"

/* Whether endpoint's host name resolves now (getaddrinfo): 0, also for an
 * endpoint that is not tcp; -1 with the reason in err and errno EAGAIN
 * when the name does not resolve, EINVAL when endpoint names no host. */
int rdzv_route_resolve(const char *endpoint, char *err, size_t errlen);

/* The address of the local interface that routes to endpoint's host, as
 * text, into out. Endpoints that are not tcp (ipc, inproc) give
 * "127.0.0.1". Returns 0, or -1 with the reason in err and errno EAGAIN
 * when the host name does not resolve (see rdzv_route_resolve). */
int rdzv_route_default_host(const char *endpoint, char *out, size_t outlen,
                            char *err, size_t errlen);

/* This machine's hostname into out. Returns 0, or -1 with reason in err. */
int rdzv_route_default_node(char *out, size_t outlen, char *err, size_t errlen);

#endif
