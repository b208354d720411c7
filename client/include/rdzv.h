/* librdzv: join a rendezvous group served by rdzvd and read the assignment.
 *
 * Ownership: every object returned by a *_new or an out-parameter of type
 * T ** belongs to the caller and is released with the matching *_destroy,
 * which accepts NULL, may be called twice and NULLs the caller's pointer.
 * Strings returned by getters belong to the object they came from and live
 * as long as it does. Functions return 0 on success or a negative
 * rdzv_result_t; the reason is then in rdzv_client_error().
 *
 * The library talks to rdzvd through libzmq directly; it links libczmq only
 * to read CURVE certificates (zconfig, no zsys or actors, so czmq's
 * signal handlers are never installed). It starts no threads of its own
 * beyond libzmq's I/O thread, so it is safe to load into an engine's
 * process. One client must not be used from two threads at once; use one
 * client per thread. */
#ifndef RDZV_H
#define RDZV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rdzv_version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    RDZV_OK = 0,
    RDZV_ERR_USAGE = -1,     /* bad argument from the caller */
    RDZV_ERR_TIMEOUT = -2,   /* deadline passed */
    RDZV_ERR_REFUSED = -3,   /* the server answered with an error code */
    RDZV_ERR_IO = -4,        /* local failure: sockets, memory */
} rdzv_result_t;

typedef struct rdzv_client rdzv_client_t;
typedef struct rdzv_assignment rdzv_assignment_t;

/* What a rank says about itself when it joins. NULL host or node: the
 * defaults (the address of the interface that routes to the server; the
 * hostname). timeout_ms <= 0: 60000.
 *
 * NCCL unique IDs (docs/protocol.md, "join"); nccl_id is one of
 *   "server"  rdzvd makes the IDs; their bootstrap roots live in its helper;
 *   "rank0"   rank 0's process makes them: rdzv_join calls ncclGetUniqueId
 *             nccl_ids times through dlopen("libnccl.so.2") (the variable
 *             RDZV_NCCL_LIBRARY names another file) and sends them with the
 *             join; the other ranks' joins are answered once they are there.
 *             NCCL's root threads then live in rank 0's process, as in plain
 *             NCCL. A rank 0 join that fails (timeout, rdzvd away) keeps its
 *             IDs in the client and sends the same ones when the caller joins
 *             again; a successful join uses them up. NCCL is never unloaded.
 *   "none"    no IDs.
 * nccl_id NULL: the variable RDZV_NCCL_ID, else the server's default. The
 * group's first join decides the mode and later joins follow it, except that
 * rank 0 of a rank0 group must ask for "rank0" itself (it makes the IDs) or
 * is refused with bad_request. nccl_ids: IDs per epoch, 1..16; 0: the
 * variable RDZV_NCCL_IDS, else 1. */
typedef struct {
    const char *group;
    int world;
    int rank;
    const char *host;
    const char *node;
    int timeout_ms;
    const char *nccl_id;     /* "server", "rank0" or "none" */
    int nccl_ids;            /* IDs per epoch; 0: 1 */
} rdzv_join_args_t;

/* Most IDs a group may get per epoch. */
#define RDZV_MAX_NCCL_IDS 16

/* Most servers an endpoint list may name. */
#define RDZV_MAX_SERVERS 16

/* Connects lazily to endpoint (a ZeroMQ endpoint such as
 * "tcp://127.0.0.1:29400", or HOST:PORT, or HOST or tcp://HOST, which mean
 * port 29400; NULL: 127.0.0.1:29400).
 * endpoint may list up to RDZV_MAX_SERVERS servers separated by commas,
 * the replicas of an active/standby rdzvd: each request goes to the server
 * that answered last, moves on to the next when one does not answer,
 * follows a standby's not_leader reply to the leader it names, and waits
 * out an "unavailable" leader, all within the request's own deadline
 * (docs/protocol.md, "Several servers: failover"). session NULL: a fresh
 * random session id, which is what a new process should use; pass the old
 * one to resume. Returns NULL on failure with the reason in err (if
 * errlen > 0) and errno set: EINVAL for a malformed endpoint (err names
 * the element of a list at fault) or session, EACCES when the files named
 * by RDZV_CURVE_SERVER_PUBLIC, RDZV_CURVE_SECRET or RDZV_GROUP_TOKEN cannot
 * be used (err then starts with that variable's name; the keys and token
 * apply to every server of the list), ENOMEM or EIO. */
rdzv_client_t *rdzv_client_new(const char *endpoint, const char *session,
                               char *err, size_t errlen);
void rdzv_client_destroy(rdzv_client_t **self_p);

const char *rdzv_client_session(const rdzv_client_t *self);
/* Reason for the last failure, one line; "" after a success. */
const char *rdzv_client_error(const rdzv_client_t *self);
/* Server error code of the last RDZV_ERR_REFUSED (e.g. "bad_rank"), else "". */
const char *rdzv_client_error_code(const rdzv_client_t *self);
/* Deadline of requests that wait on nobody (status, kv_get, kv_put,
 * heartbeat, group_delete); default 10000 ms. Join and kv_wait use their
 * own timeouts. Returns 0 or RDZV_ERR_USAGE if timeout_ms is not in
 * 1..86400000. */
int rdzv_client_set_request_timeout(rdzv_client_t *self, int timeout_ms);
/* replace true: this client's joins take their rank from a session that is
 * still alive (a process the caller knows to be gone, or a deliberate
 * takeover); without it such a join is refused with rank_taken while the
 * holder, on another node, still heartbeats. Returns 0 or RDZV_ERR_USAGE. */
int rdzv_client_set_replace(rdzv_client_t *self, bool replace);
/* members true: joins ask for the members list (every rank's host and
 * node) in the assignment. Off by default, or by the variable
 * RDZV_MEMBERS=1: the list is O(world) bytes for every rank, O(world^2)
 * for rdzvd at each release; `rdzv status --group G` has the roster once.
 * Returns 0 or RDZV_ERR_USAGE. */
int rdzv_client_set_members(rdzv_client_t *self, bool members);
/* router: the group's router, sent with each join (docs/deployment.md,
 * "Routing"): http://HOST[:PORT][/PREFIX], https://..., or
 * haproxy:///PATH#BACKEND; rdzvd registers the group's serving ranks there.
 * NULL: the joins name none (the group keeps the router it has). Returns 0,
 * or RDZV_ERR_USAGE for a malformed URL (rdzv_client_error says why). */
int rdzv_client_set_router(rdzv_client_t *self, const char *router);

/* Blocks until every rank has joined, the deadline passes or the server
 * refuses. On success *out holds a new assignment owned by the caller.
 * Rides through a rdzvd restart by resending the same join. The deadline
 * is args->timeout_ms, and up to a second more for rdzvd's own timeout
 * reply (RDZV_ERR_TIMEOUT either way). A server name that does not
 * resolve is looked up again until then: rdzv_client_error then names it
 * and getaddrinfo's reason ("cannot resolve server host 'H' (DNS: ...)"),
 * as it does for any call that timed out so. */
int rdzv_join(rdzv_client_t *self, const rdzv_join_args_t *args,
              rdzv_assignment_t **out);

/* Tells the server the rank is alive; *epoch_out (may be NULL) gets the
 * group's current epoch. RDZV_ERR_REFUSED with code "stale_epoch" when the
 * group has moved past the given epoch. */
int rdzv_heartbeat(rdzv_client_t *self, const char *group, int rank,
                   int64_t epoch, int64_t *epoch_out);
/* The same, and what the rank's engine answers its health check: serving
 * 1 (it answers 200), 0 (it does not), -1 (say nothing, as rdzv_heartbeat).
 * rdzvd shows the rank serving while it is alive and its last heartbeat
 * said 1 (docs/protocol.md, "heartbeat"). */
int rdzv_heartbeat_serving(rdzv_client_t *self, const char *group, int rank,
                           int64_t epoch, int serving, int64_t *epoch_out);

/* A background heartbeat for the rank of assignment: a thread with its own
 * connection to endpoint (one server or a list, as rdzv_client_new takes
 * it) under session (the session the rank joined with) that calls
 * rdzv_heartbeat every interval_ms (<= 0: $RDZV_HEARTBEAT seconds, else
 * 5 s), so rdzvd shows the rank alive while it runs. Each request waits
 * at most min(interval_ms, 2 s) for rdzvd. Returns NULL on failure, reason
 * in err. Stop it (joins the thread, so at most that long) with
 * rdzv_heartbeat_stop. */
typedef struct rdzv_heartbeat rdzv_heartbeat_t;
rdzv_heartbeat_t *rdzv_heartbeat_start(const char *endpoint, const char *session,
                                       const rdzv_assignment_t *assignment,
                                       int interval_ms, char *err, size_t errlen);
void rdzv_heartbeat_stop(rdzv_heartbeat_t **self_p);
/* True once rdzvd said the group moved past the assignment's epoch (a rank
 * restarted: the program should join again), or answered not_found (the
 * group was deleted, or another session took the rank: the assignment and
 * its ports are no longer this rank's). */
bool rdzv_heartbeat_stale(const rdzv_heartbeat_t *self);
/* Heartbeats rdzvd has acknowledged. */
uint64_t rdzv_heartbeat_count(const rdzv_heartbeat_t *self);

/* KV scoped to group and epoch; values are UTF-8 text of up to 64 KiB
 * without NUL (anything else is RDZV_ERR_USAGE; rdzvd refuses it too).
 * *value_out is malloc'd, NUL-terminated, the caller's to free. */
int rdzv_kv_put(rdzv_client_t *self, const char *group, int64_t epoch,
                const char *key, const char *value);
int rdzv_kv_get(rdzv_client_t *self, const char *group, int64_t epoch,
                const char *key, char **value_out);
int rdzv_kv_wait(rdzv_client_t *self, const char *group, int64_t epoch,
                 const char *key, int timeout_ms, char **value_out);

/* *json_out: malloc'd JSON text of the status reply's "groups" array. group
 * NULL: every group. */
int rdzv_status(rdzv_client_t *self, const char *group, char **json_out);
int rdzv_group_delete(rdzv_client_t *self, const char *group);
/* Resizes a formed group to world ranks (docs/protocol.md, "group_resize"):
 * the next epoch, of the new world, forms; the ranks below both worlds
 * keep their port plans and join it again, new ranks join with the new
 * world, ranks at or above it leave. *epoch_out (may be NULL) gets the new
 * epoch (the current one when world is the group's already).
 * A forming group whose ranks 0..world-1 have joined, and no other, closes
 * at them instead: its epoch is released to them, of world ranks.
 * RDZV_ERR_REFUSED: not_found, bad_world, limit, or bad_request while the
 * group forms otherwise. */
int rdzv_group_resize(rdzv_client_t *self, const char *group, int world, int64_t *epoch_out);
/* The same as a new round: no rank keeps its place or its plan, every
 * member's heartbeat answers not_found, and the ranks join anew (the
 * torchrun backend's --nnodes MIN:MAX); a formed group of that world
 * too. */
int rdzv_group_resize_fresh(rdzv_client_t *self, const char *group, int world,
                            int64_t *epoch_out);

/* Assignment getters. */
void rdzv_assignment_destroy(rdzv_assignment_t **self_p);
const char *rdzv_assignment_group(const rdzv_assignment_t *self);
int64_t rdzv_assignment_epoch(const rdzv_assignment_t *self);
int rdzv_assignment_rank(const rdzv_assignment_t *self);
int rdzv_assignment_world(const rdzv_assignment_t *self);
const char *rdzv_assignment_master_addr(const rdzv_assignment_t *self);
int rdzv_assignment_master_port(const rdzv_assignment_t *self);
size_t rdzv_assignment_port_count(const rdzv_assignment_t *self);
int rdzv_assignment_port(const rdzv_assignment_t *self, size_t i);
/* NULL when the group has no NCCL ID. hex: 256 lowercase characters. */
const char *rdzv_assignment_nccl_id_hex(const rdzv_assignment_t *self);
/* Copies the 128 raw bytes; returns 0, or RDZV_ERR_USAGE if there is none. */
int rdzv_assignment_nccl_id(const rdzv_assignment_t *self,
                            unsigned char out[128]);
/* How many NCCL IDs the epoch has (0 without NCCL), and the i-th of them as
 * 256 lowercase hex characters (NULL when i is out of range). The first is
 * the one rdzv_assignment_nccl_id_hex returns. */
size_t rdzv_assignment_nccl_id_count(const rdzv_assignment_t *self);
const char *rdzv_assignment_nccl_id_hex_at(const rdzv_assignment_t *self, size_t i);
/* This rank's place among the group's ranks on its node (those that
 * joined with its node name), in rank order, and how many there are: what
 * a rank needs of the roster to start. -1 and 0 from an rdzvd too old to
 * send them. */
int rdzv_assignment_local_rank(const rdzv_assignment_t *self);
int rdzv_assignment_local_world(const rdzv_assignment_t *self);
/* This rank's node among the group's nodes, numbered by each node's lowest
 * rank, and how many nodes there are (torchrun's GROUP_RANK and
 * GROUP_WORLD_SIZE). -1 and 0 from an rdzvd too old to send them. */
int rdzv_assignment_group_rank(const rdzv_assignment_t *self);
int rdzv_assignment_group_world(const rdzv_assignment_t *self);
/* The named ports (docs/concepts.md): the group's store (MASTER_PORT,
 * VLLM_DP_MASTER_PORT; the master port) and DP RPC port (vLLM's
 * --data-parallel-rpc-port), both on rank 0's plan, and this rank's probe
 * pool [*lo, *hi], where VLLM_PORT starts. The DP RPC port is 0 from an
 * rdzvd too old to name it, whose probe pool is the whole plan. */
int rdzv_assignment_store_port(const rdzv_assignment_t *self);
int rdzv_assignment_dp_rpc_port(const rdzv_assignment_t *self);
/* This rank's engine's HTTP API port (named_ports.api, in its own plan);
 * 0 from an rdzvd that plans none. */
int rdzv_assignment_api_port(const rdzv_assignment_t *self);
int rdzv_assignment_probe_ports(const rdzv_assignment_t *self, int *lo, int *hi);
/* The flags an external data-parallel `vllm serve` rank needs, as shell
 * words: "--data-parallel-size N --data-parallel-rank R
 * --data-parallel-address A --data-parallel-rpc-port P". malloc'd; NULL
 * without a DP RPC port (an older rdzvd) or out of memory. */
char *rdzv_assignment_vllm_args(const rdzv_assignment_t *self);
/* The members list (every rank's host and node): only in an assignment
 * asked for with it (rdzv_client_set_members); count 0 otherwise. */
size_t rdzv_assignment_member_count(const rdzv_assignment_t *self);
const char *rdzv_assignment_member_host(const rdzv_assignment_t *self, size_t i);
const char *rdzv_assignment_member_node(const rdzv_assignment_t *self, size_t i);
/* The assignment as the server sent it: JSON text owned by self. */
const char *rdzv_assignment_json(const rdzv_assignment_t *self);
/* Parses assignment JSON (as printed by `rdzv join`); NULL if malformed. */
rdzv_assignment_t *rdzv_assignment_from_json(const char *json);

/* The environment a rank's program gets: "KEY=VALUE" lines, one per
 * variable (RDZV_*, torch's MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
 * LOCAL_*, GROUP_*, and VLLM_*; docs/torchrun-lws.md lists them). A value
 * that a shell would misread is in single quotes (RDZV_VLLM_ARGS always
 * is), so the text can be sourced. RDZV_NCCL_UNIQUE_ID is the first NCCL
 * ID, RDZV_NCCL_UNIQUE_IDS all of them, comma-separated (both empty
 * without NCCL). malloc'd; the caller frees it. */
char *rdzv_assignment_env(const rdzv_assignment_t *self);

#ifdef __cplusplus
}
#endif
#endif
