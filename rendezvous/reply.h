/* Replies waiting in the outbox. An assignment is kept as its parts (the
 * epoch's shared fields by reference, the rank and its ports) and turned
 * into text by the shard that sends it, outside the core's lock: in a
 * 1024-rank release that formatting was half of what every rank waited
 * for, done by one thread. */
#ifndef RDZV_REPLY_H
#define RDZV_REPLY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define RDZV_PEER_MAX 256

/* Where a reply goes: the server shard whose ROUTER socket the request came
 * in on, that socket's identity for the connection, and the request id.
 * The identity comes last: libzmq's own are 5 bytes, so a peer's used
 * bytes share one cache line and a release touches one line per rank. */
typedef struct {
    size_t len;
    int64_t req;
    int shard;
    unsigned char id[RDZV_PEER_MAX];
} rdzv_peer_t;

/* The fields every rank's assignment of one epoch shares, as JSON object
 * members without braces; reference-counted, immutable once made. */
typedef struct {
    atomic_int refs;
    size_t len;
    char text[];
} rdzv_shared_t;

rdzv_shared_t *rdzv_shared_new(const char *text, size_t len);
rdzv_shared_t *rdzv_shared_ref(rdzv_shared_t *shared);
void rdzv_shared_unref(rdzv_shared_t **shared_p);

typedef struct {
    char *text;                  /* malloc'd JSON; NULL for an assignment not yet formatted */
    rdzv_shared_t *shared;       /* that assignment's parts */
    int rank, first_port, ports;
    rdzv_peer_t peer;            /* last, for the same reason as its id */
} rdzv_reply_t;

/* Formats an assignment reply into text (needs no core state: any thread).
 * 0, or -1 out of memory. */
int rdzv_reply_render(rdzv_reply_t *reply);
/* *dst = *src, but only the identity's len bytes: a peer is ~270 bytes
 * of which a ROUTER's 5-byte identity uses a few, and a release copies
 * one per rank into the outbox. */
void rdzv_peer_copy(rdzv_peer_t *dst, const rdzv_peer_t *src);
/* Frees the text and drops the shared reference. */
void rdzv_reply_clear(rdzv_reply_t *reply);

/* Writes v in decimal at p; returns the end (snprintf per integer was most
 * of a large release's formatting time). */
char *rdzv_put_int(char *p, int v);
char *rdzv_put_i64(char *p, int64_t v);

/* A sequence of integers written in decimal, each after the one before:
 * set the first, then put each (the first too). */
typedef struct {
    char digits[16];
    size_t n;
    int v;
} rdzv_decimal_t;
void rdzv_decimal_set(rdzv_decimal_t *d, int v);
char *rdzv_decimal_put(rdzv_decimal_t *d, char *p, int v);

#endif
