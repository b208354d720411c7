/* The servers a client may talk to: a comma-separated list of endpoints,
 * as --server and RDZV_SERVER take it ("tcp://a:29400,b:29400"). */
#ifndef RDZV_ENDPOINTS_H
#define RDZV_ENDPOINTS_H

#include "rdzv.h"
#include "rdzv_proto.h"

#include <stddef.h>

/* One normalized endpoint: "tcp://" + a name + ":" + a port fit. */
#define RDZV_ENDPOINT_LEN (RDZV_MAX_NAME + 16)

typedef struct {
    int count;
    char endpoint[RDZV_MAX_SERVERS][RDZV_ENDPOINT_LEN];
} rdzv_endpoints_t;

/* Splits list at commas and normalizes each element (HOST, HOST:PORT,
 * [V6]:PORT and tcp://HOST become tcp://HOST:PORT endpoints, port
 * RDZV_DEFAULT_PORT where none is given; see rdzv_endpoint_normalize). 0,
 * or -1 with errno EINVAL and err naming the element at fault: empty, not
 * an endpoint, or beyond RDZV_MAX_SERVERS. */
int rdzv_endpoints_parse(const char *list, rdzv_endpoints_t *out, char *err, size_t errlen);

#endif
