/* An assignment inside librdzv: its fields (assignment.c parses them,
 * assignment_env.c writes them out as an environment), and the internal
 * constructor from an already parsed reply. */
#ifndef RDZV_ASSIGNMENT_H
#define RDZV_ASSIGNMENT_H

#include "rdzv.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *host;
    char *node;
} rdzv_assignment_member_t;

struct rdzv_assignment {
    char *group;
    int64_t epoch;
    int rank;
    int world;
    char *master_addr;
    int master_port;
    int local_rank, local_world;    /* -1, 0: an rdzvd that does not send them */
    int group_rank, group_world;    /* -1, 0: likewise */
    int store_port, dp_rpc_port;    /* the named ports; dp_rpc 0: an older rdzvd */
    int api_port;                   /* this rank's engine's HTTP API; 0: an older rdzvd */
    int probe_lo, probe_hi;         /* this rank's probe pool, VLLM_PORT its first */
    int *ports;
    size_t port_count;
    char *nccl_hex;             /* NULL: the group has no NCCL ID; else nccl_ids[0] */
    char **nccl_ids;            /* every ID of the epoch, nccl_count entries */
    size_t nccl_count;
    rdzv_assignment_member_t *members;        /* indexed by rank, world entries */
    char *json;
};

/* Validates obj (the "assignment" object of a join reply) and copies it
 * into a new assignment; NULL if any field is missing or malformed. obj
 * stays the caller's. */
rdzv_assignment_t *rdzv_assignment_from_cjson(const cJSON *obj);

#endif
