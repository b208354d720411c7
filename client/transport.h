/* DEALER sockets to rdzvd, one per server of the client's list: send a
 * request, wait for the reply with its id, moving between servers. */
#ifndef RDZV_TRANSPORT_H
#define RDZV_TRANSPORT_H

#include "endpoints.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rdzv_transport rdzv_transport_t;

/* Creates a DEALER connected to each server of the list (in the process's
 * shared zmq context). NULL on failure with the reason in err; errno is
 * EINVAL when an endpoint is malformed, EACCES when the CURVE or token
 * files cannot be used (err then starts with the variable that names the
 * file: "RDZV_GROUP_TOKEN: ..."). */
rdzv_transport_t *rdzv_transport_new(const rdzv_endpoints_t *servers, char *err, size_t errlen);
void rdzv_transport_destroy(rdzv_transport_t **self_p);
/* Whether a tcp:// endpoint needs libzmq's IPv6 resolution: an IPv6
 * literal, or a name that has IPv6 addresses and no IPv4 one. */
bool rdzv_endpoint_wants_ipv6(const char *endpoint);

/* Gives req a fresh "id", sends it and waits until deadline_ms (rdzv_now_ms
 * clock) for the reply carrying that id; resends the same frame with
 * backoff meanwhile, and drops replies to any other id. With several
 * servers, a server that cannot be reached or stays silent is left for the
 * next, a not_leader reply is followed to the leader it names and an
 * unavailable one is asked again after a pause; neither is an answer
 * unless the deadline passes after one (it is then *reply_out). On
 * success *reply_out is the parsed reply object, the caller's to
 * cJSON_Delete. Returns 0, RDZV_ERR_TIMEOUT or RDZV_ERR_IO; req stays the
 * caller's. */
int rdzv_transport_call(rdzv_transport_t *self, cJSON *req, int64_t deadline_ms,
                        cJSON **reply_out, char *err, size_t errlen);

/* The server calls go to now: the last that answered (at first the
 * list's first). Owned by self, valid until its next call. */
const char *rdzv_transport_endpoint(const rdzv_transport_t *self);
/* Why the last call's servers could not be reached by name: "cannot
 * resolve server host 'H' (DNS: reason)" for each name of the list that
 * did not resolve when the call timed out without sending a frame; ""
 * otherwise. Owned by self. */
const char *rdzv_transport_unresolved(const rdzv_transport_t *self);
/* How many frames the last call put on the wire (1 + resends); for tests. */
int rdzv_transport_sends(const rdzv_transport_t *self);

#endif
