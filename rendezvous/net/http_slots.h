/* Which connections rdzvd's HTTP server keeps, oldest first, so that the
 * kubelet's tokenless probes are answered while others trickle requests a
 * byte at a time (a slowloris).
 *
 * libmicrohttpd's own timeout is an idle one: any byte resets it, so a
 * connection that sends a header line every few seconds holds its place
 * for ever, and with every place held a probe is refused. Here a request's
 * header must be complete within RDZV_HTTP_HEADER_DEADLINE_MS of the
 * connection's start (or of its previous response, for a connection kept
 * alive), whatever it trickles; and once RDZV_HTTP_SLOTS_KEEP connections
 * are open, each new one costs the oldest its place, whether it is still
 * sending its header or reading its response (slowly). A probe sends its
 * request at once and reads a short answer, so it is never the oldest.
 * Every call happens on libmicrohttpd's one thread. */
#ifndef RDZV_HTTP_SLOTS_H
#define RDZV_HTTP_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RDZV_HTTP_HEADER_DEADLINE_MS 5000
#define RDZV_HTTP_SLOTS_KEEP 192
/* libmicrohttpd's own cap, above the keep so that it never refuses first. */
#define RDZV_HTTP_CONNECTION_LIMIT 256

typedef struct rdzv_http_slot {
    void *conn;                  /* the caller's (an MHD_Connection) */
    int64_t since_ms;            /* waiting for a header since */
    bool in_request;             /* its header is complete */
    bool evicted;                /* handed out by evict, not closed yet */
    struct rdzv_http_slot *prev, *next;
} rdzv_http_slot_t;

typedef struct {
    rdzv_http_slot_t *head, *tail;     /* by since_ms, oldest first */
    size_t count;                /* not evicted */
} rdzv_http_slots_t;

/* A connection opened: its slot, NULL out of memory (then it is not
 * watched, and libmicrohttpd's own timeout still applies). */
rdzv_http_slot_t *rdzv_http_slots_open(rdzv_http_slots_t *self, void *conn, int64_t now_ms);
/* The connection closed (slot may be NULL). */
void rdzv_http_slots_close(rdzv_http_slots_t *self, rdzv_http_slot_t *slot);
/* Its request's header is complete: it is being answered. */
void rdzv_http_slots_request(rdzv_http_slots_t *self, rdzv_http_slot_t *slot);
/* Its response is done and it stays open for the next request, whose
 * header has RDZV_HTTP_HEADER_DEADLINE_MS from now. */
void rdzv_http_slots_response(rdzv_http_slots_t *self, rdzv_http_slot_t *slot, int64_t now_ms);

/* Puts into conns (room for max) the connections to close now: those past
 * the header deadline, and the oldest ones, answered or not, while more
 * than RDZV_HTTP_SLOTS_KEEP are open. Their slots stay until closed.
 * Returns how many. */
size_t rdzv_http_slots_evict(rdzv_http_slots_t *self, int64_t now_ms, void **conns, size_t max);

#endif
