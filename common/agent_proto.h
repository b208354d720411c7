/* The agent <-> shim protocol (docs/agent.md): one SOCK_SEQPACKET unix
 * connection per engine process, one fixed-size rdzv_agent_msg_t per
 * packet in each direction, strictly request then reply. A reply to a
 * successful BIND carries one socket descriptor (SCM_RIGHTS). */
#ifndef RDZV_AGENT_PROTO_H
#define RDZV_AGENT_PROTO_H

#include <stdint.h>

#define RDZV_AGENT_MAGIC        0x52445a41u      /* "RDZA" */
#define RDZV_AGENT_VERSION      1
#define RDZV_AGENT_ADDR_MAX     28               /* sizeof (struct sockaddr_in6) */
#define RDZV_AGENT_MAX_CONNS    1024             /* engine processes served at once */

/* Environment shared by the agent, the shim and the engine. */
#define RDZV_AGENT_SOCKET_ENV   "RDZV_AGENT_SOCKET"
#define RDZV_PORT_RANGE_ENV     "RDZV_PORT_RANGE"
#define RDZV_SHIM_ENV           "RDZV_SHIM"
#define RDZV_AGENT_ENV_SUFFIX   ".env"
/* Beside the socket too: the session of a join whose agent never served
 * (agent_main.c), so that the next agent resumes it. */
#define RDZV_AGENT_SESSION_SUFFIX ".session"

/* How long the shim waits for one reply before it gives up on the agent. */
#define RDZV_AGENT_REPLY_TIMEOUT_MS 10000

typedef enum {
    RDZV_AGENT_OP_HELLO = 1,   /* shim -> agent: first packet; reply: range, epoch */
    RDZV_AGENT_OP_BIND = 2,    /* shim -> agent: a managed bind; reply: status (+ fd) */
    RDZV_AGENT_OP_CLOSE = 3,   /* shim -> agent: a handed-over listener was closed */
} rdzv_agent_op_t;

typedef enum {
    RDZV_BIND_PROBE = 1,       /* port P, no SO_REUSEADDR/SO_REUSEPORT */
    RDZV_BIND_PROBE0 = 2,      /* port 0, no SO_REUSEADDR/SO_REUSEPORT */
    RDZV_BIND_LISTENER = 3,    /* port P, SO_REUSEADDR or SO_REUSEPORT set */
} rdzv_bind_kind_t;

#define RDZV_AGENT_F_V6ONLY     0x1u             /* caller's AF_INET6 socket has IPV6_V6ONLY */
#define RDZV_AGENT_F_REUSEPORT  0x2u             /* caller set SO_REUSEPORT */

/* Every packet, both directions. Fields a given op does not use are zero. */
typedef struct {
    uint32_t magic;            /* RDZV_AGENT_MAGIC */
    uint16_t version;          /* RDZV_AGENT_VERSION */
    uint16_t op;               /* rdzv_agent_op_t, echoed in the reply */
    int32_t status;            /* reply: 0, or the positive errno bind() should fail with */
    uint32_t kind;             /* BIND: rdzv_bind_kind_t */
    uint32_t flags;            /* BIND: RDZV_AGENT_F_* */
    uint32_t port;             /* BIND reply: the port the passed socket is bound to */
    uint64_t handle;           /* BIND reply (listener): id of the hand-over; CLOSE: that id */
    uint32_t range_base;       /* HELLO reply: managed range [range_base, range_limit); */
    uint32_t range_limit;      /* BIND refused (a port of the range outside the plan): the plan's */
    int64_t epoch;             /* HELLO reply: the group's epoch the agent holds */
    uint32_t addrlen;          /* BIND: length of addr */
    uint8_t addr[RDZV_AGENT_ADDR_MAX]; /* BIND: the sockaddr the caller passed */
} rdzv_agent_msg_t;

#endif
