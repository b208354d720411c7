/* Internal to librdzv: export macro and tuning constants shared by its files. */
#ifndef RDZV_PRIVATE_H
#define RDZV_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The project builds with -fvisibility=hidden; only API functions carry this. */
#define RDZV_EXPORT __attribute__((visibility("default")))

/* First resend after 1 s, doubling up to 5 s: fast enough to ride through a
 * rdzvd restart, slow enough not to flood a busy server. */
#define RDZV_RESEND_FIRST_MS      1000
#define RDZV_RESEND_CAP_MS        5000
#define RDZV_RESEND_JITTER_PCT    20

/* With several servers (an endpoint list): a server is left for the next
 * when a copy due for it could not go on the wire for CONNECT (nothing
 * accepts the connection: a live rdzvd on the network takes milliseconds),
 * or when copies sent to it drew no frame back for SILENT (longer: a join
 * or kv_wait is answered only once the others are there, and a leader
 * answers after etcd commits). A leader that is still waiting is asked
 * again through the standby, which names it. */
#define RDZV_SERVER_CONNECT_MS    1000
#define RDZV_SERVER_SILENT_MS     4000
/* Pause before asking again after "unavailable" (the leader already waited
 * for etcd) or a not_leader naming no leader to go to (an election under
 * way), doubling up to the cap so that standbys are not flooded. */
#define RDZV_RETRY_PAUSE_FIRST_MS 250
#define RDZV_RETRY_PAUSE_CAP_MS   2000

/* Deadline of a request that does not wait on other ranks (status, kv_get...). */
#define RDZV_REQUEST_TIMEOUT_MS   10000
/* join, kv_wait: the server answers "timeout" at timeout_ms (checked every
 * 100 ms), and its reply says more than the client could; a second is
 * time enough for it to arrive, and keeps the caller's timeout close. */
#define RDZV_WAIT_MARGIN_MS       1000
/* A join whose server name does not resolve looks it up again this often
 * until its timeout: a Service or DNS record may be on its way. */
#define RDZV_RESOLVE_RETRY_MS     1000

/* ZeroMQ reconnect backoff while rdzvd is down. */
#define RDZV_RECONNECT_IVL_MS     100
#define RDZV_RECONNECT_IVL_MAX_MS 1000
/* ZMTP heartbeats notice a server host that vanished without closing TCP. */
#define RDZV_HEARTBEAT_IVL_MS     2000
#define RDZV_HEARTBEAT_TIMEOUT_MS 6000

/* Room for a no-reply reason: a list of servers, the causes to check,
 * names that did not resolve and the timeout. */
#define RDZV_ERR_LEN              512
#define RDZV_CODE_LEN             64
#define RDZV_SESSION_BYTES        16

/* Writes a formatted one-line reason into err (if errlen > 0). */
void rdzv_set_error(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Why no reply came from where (the server, or "any of A, B"), causes
 * to check, CURVE keys before the network ("no reply from
 * WHERE (...)"); curve: this client has CURVE keys configured. The one
 * wording of librdzv's no-reply errors (join, heartbeat, status, kv...),
 * which the CLI's progress lines show through rdzv_client_error. */
void rdzv_no_reply_why(char *out, size_t len, const char *where, bool curve);

#endif
