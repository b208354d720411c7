/* Constants of the rdzv wire protocol (docs/protocol.md), shared by rdzvd,
 * librdzv, the agent and the shim so that no side hard-codes a number. */
#ifndef RDZV_PROTO_H
#define RDZV_PROTO_H

#include <stddef.h>

#define RDZV_PROTO_VERSION        1
/* The same as text, for replies formatted without a JSON library. */
#define RDZV_PROTO_STR_(v)        #v
#define RDZV_PROTO_STR(v)         RDZV_PROTO_STR_(v)
#define RDZV_PROTO_VERSION_TEXT   RDZV_PROTO_STR(RDZV_PROTO_VERSION)
#define RDZV_MAX_VALUE            65536          /* KV value bytes */
#define RDZV_MAX_FRAME            (RDZV_MAX_VALUE + 4096)
#define RDZV_HARD_MAX_FRAME       (1 << 20)      /* ZMQ_MAXMSGSIZE: dropped unread */
#define RDZV_MAX_NAME             255            /* group, key, host, node, session */
#define RDZV_NCCL_ID_BYTES        128
#define RDZV_NCCL_ID_HEX          (2 * RDZV_NCCL_ID_BYTES)
#define RDZV_MAX_NCCL_IDS         16             /* IDs per epoch */
#define RDZV_DEFAULT_TIMEOUT_MS   60000
#define RDZV_MAX_TIMEOUT_MS       86400000

/* The operations, listed once for rdzvd's parser and librdzv's requests:
 * X(NAME, wire) gives enum value RDZV_OP_NAME and its "op" on the wire.
 * A new op added here makes -Wswitch name every switch that must handle it. */
#define RDZV_OPS(X)                     \
    X(JOIN, "join")                     \
    X(HEARTBEAT, "heartbeat")           \
    X(STATUS, "status")                 \
    X(KV_PUT, "kv_put")                 \
    X(KV_GET, "kv_get")                 \
    X(KV_WAIT, "kv_wait")               \
    X(GROUP_DELETE, "group_delete")     \
    X(GROUP_RESIZE, "group_resize")

#define RDZV_OP_ENUM_(name, wire) RDZV_OP_##name,
typedef enum { RDZV_OPS(RDZV_OP_ENUM_) } rdzv_op_t;
#undef RDZV_OP_ENUM_

/* Outside rdzv_op_t, so that no switch over ops has to name it. */
#define RDZV_OP_ONE_(name, wire) +1
enum { RDZV_OP_COUNT = 0 RDZV_OPS(RDZV_OP_ONE_) };
#undef RDZV_OP_ONE_

/* op's wire name; NULL for a value that is no op. */
static inline const char *rdzv_op_name(rdzv_op_t op)
{
#define RDZV_OP_NAME_(name, wire) [RDZV_OP_##name] = wire,
    static const char *const names[RDZV_OP_COUNT] = { RDZV_OPS(RDZV_OP_NAME_) };
#undef RDZV_OP_NAME_
    return (unsigned) op < RDZV_OP_COUNT ? names[op] : NULL;
}

#define RDZV_DEFAULT_ENDPOINT     "tcp://127.0.0.1:29400"
#define RDZV_DEFAULT_PORT         29400          /* of an endpoint given as a bare host */
#define RDZV_DEFAULT_BIND         "tcp://*:29400"
#define RDZV_DEFAULT_PORT_BASE    19500
#define RDZV_DEFAULT_PORTS_PER_RANK 32
#define RDZV_DEFAULT_PORT_LIMIT   32768
#define RDZV_DEFAULT_MAX_WORLD    65536

/* Named ports: the fixed place of each role in a plan of K ports from P
 * (docs/concepts.md). The group's store and DP RPC ports are those of
 * rank 0's plan; every rank serves its engine's HTTP API on its own plan's
 * api port and probes in its own plan from the probe offset. P+3..P+9 stay
 * unnamed because vLLM's get_open_port() skips the ten ports from
 * VLLM_DP_MASTER_PORT (the store): a scan that started there would never
 * return. Plans too short for that put the probe pool after the three
 * roles (rdzvd warns). */
#define RDZV_ROLE_STORE           0
#define RDZV_ROLE_DP_RPC          1
#define RDZV_ROLE_API             2
#define RDZV_PROBE_OFFSET         10
#define RDZV_MIN_PORTS_PER_RANK   4       /* the three roles and one probe port */

static inline int rdzv_probe_offset(int ports_per_rank)
{
    return ports_per_rank >= RDZV_PROBE_OFFSET + 2 ? RDZV_PROBE_OFFSET : RDZV_ROLE_API + 1;
}

/* The group's store and DP RPC ports alternate between two places in rank
 * 0's plan, P and P+1 in odd epochs, P+3 and P+4 in even ones, so that a
 * new epoch (a resize above all) binds its bootstrap ports while the last
 * epoch's are still held: an elastic engine tearing its old groups down, a
 * store's port in TIME_WAIT. Both places are inside the ten ports vLLM's
 * scans skip. Plans too short for that keep P and P+1. */
#define RDZV_ROLE_ALT_SHIFT       3

static inline int rdzv_role_shift(int ports_per_rank, long long epoch)
{
    return ports_per_rank >= RDZV_PROBE_OFFSET + 2 && epoch % 2 == 0 ? RDZV_ROLE_ALT_SHIFT : 0;
}

/* A rank's engine as its agent's health checks see it (the heartbeat's
 * "serving"): not said yet, answering 200, or not. */
#define RDZV_HEALTH_UNKNOWN       0
#define RDZV_HEALTH_SERVING       1
#define RDZV_HEALTH_DOWN          2

/* Error codes, as they appear in {"error":{"code":...}}. */
#define RDZV_E_BAD_JSON        "bad_json"
#define RDZV_E_BAD_VERSION     "bad_version"
#define RDZV_E_UNKNOWN_OP      "unknown_op"
#define RDZV_E_BAD_REQUEST     "bad_request"
#define RDZV_E_TOO_LARGE       "too_large"
#define RDZV_E_BAD_WORLD       "bad_world"
#define RDZV_E_BAD_RANK        "bad_rank"
#define RDZV_E_WORLD_MISMATCH  "world_mismatch"
#define RDZV_E_RANK_TAKEN      "rank_taken"
#define RDZV_E_STALE_EPOCH     "stale_epoch"
#define RDZV_E_NOT_FOUND       "not_found"
#define RDZV_E_PORTS_EXHAUSTED "ports_exhausted"
#define RDZV_E_TIMEOUT         "timeout"
#define RDZV_E_INTERNAL        "internal"
#define RDZV_E_FORBIDDEN       "forbidden"
#define RDZV_E_LIMIT           "limit"
/* A standby of an --etcd cluster: the error names the leader ("leader"). */
#define RDZV_E_NOT_LEADER      "not_leader"
/* The journal's store (etcd) cannot commit now: try again. */
#define RDZV_E_UNAVAILABLE     "unavailable"
/* The connection leaves too many bytes of replies unread: read, then ask
 * again (docs/protocol.md, "Requests in flight"). */
#define RDZV_E_BUSY            "busy"

#endif
