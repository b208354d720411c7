/* Decoding and validating one request frame (docs/protocol.md). Nothing here
 * touches server state, so every malformed input is refused before any
 * handler runs. */
#ifndef RDZV_PROTO_DECODE_H
#define RDZV_PROTO_DECODE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rdzv_proto.h"        /* rdzv_op_t */

typedef struct {
    rdzv_op_t op;
    int64_t id;
    const char *group, *host, *node, *session, *key, *value, *nccl_id;
    int world, rank;
    int nccl_ids;              /* join: IDs per epoch, 0 if not given */
    const cJSON *rank0_ids;    /* join: rank 0's IDs in rank0 mode */
    int64_t epoch;
    int64_t timeout_ms;
    bool members;              /* join: include the members list */
    bool replace;              /* join: take the rank from a live session */
    bool fresh;                /* group_resize: no rank keeps its place (a new round) */
    const char *router;        /* join: the group's router URL (router_url.h), NULL if none */
    /* heartbeat: what the rank's agent last saw of its engine's health
     * (RDZV_HEALTH_*): RDZV_HEALTH_UNKNOWN when the heartbeat says nothing. */
    int serving;
    cJSON *root;               /* owns the strings above */
} rdzv_request_t;

/* Parses frame into req. On failure returns -1 and sets *code (a constant
 * from rdzv_proto.h) and msg; req->id is still the request's id if it had
 * one. On success the caller releases req with rdzv_request_clear. */
int rdzv_request_parse(const char *frame, size_t len, int max_world,
                       rdzv_request_t *req, const char **code,
                       char *msg, size_t msglen);
void rdzv_request_clear(rdzv_request_t *req);

#endif
