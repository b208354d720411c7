/* Replies waiting in the outbox. An assignment is kept as its parts (the
 * epoch's shared fields by reference, the rank and its ports) and turned
 * into text by the shard that sends it, outside the core's lock: in a
 * 1024-rank release that formatting was half of what every rank waited
 * for, done by one thread. */
#ifndef RDZV_REPLY_H
#define RDZV_REPLY_H

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define RDZV_PEER_MAX 256          /* a ROUTER identity's longest */
#define RDZV_PEER_INLINE 16

/* Where a reply goes: the server shard whose ROUTER socket the request came
 * in on, that socket's identity for the connection, the request id, and the
 * connection's descriptor (to drop a peer that does not read).
 * Identities of up to RDZV_PEER_INLINE bytes (libzmq's own are 5) live in
 * the peer; longer ones (a client's ZMQ_ROUTING_ID, up to 255 bytes) in
 * long_id, which the peer owns. Every member keeps its peer: 256 bytes
 * inline were most of rdzvd's memory per rank. */
typedef struct {
    size_t len;
    int64_t req;
    int shard;
    int fd;                              /* the connection's socket (conns.h); < 3: unknown */
    unsigned char id[RDZV_PEER_INLINE];  /* len <= RDZV_PEER_INLINE */
    unsigned char *long_id;              /* len > RDZV_PEER_INLINE: malloc'd */
} rdzv_peer_t;

/* The identity's bytes (len of them). */
static inline const unsigned char *rdzv_peer_id(const rdzv_peer_t *peer)
{
    return peer->len > RDZV_PEER_INLINE ? peer->long_id : peer->id;
}
/* Sets the identity (at most RDZV_PEER_MAX bytes are kept) of a peer that
 * holds none. 0, or -1 out of memory (the peer then has an empty one). */
int rdzv_peer_set_id(rdzv_peer_t *peer, const unsigned char *id, size_t len);
/* Frees a long identity; the peer holds none after. */
void rdzv_peer_clear(rdzv_peer_t *peer);

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
    int role_port;               /* the store's port: rank 0's first, shifted by the epoch */
    int local_rank, local_world;  /* among the group's ranks of this rank's node */
    int group_rank, group_world;  /* this rank's node among the group's nodes */
    rdzv_peer_t peer;
} rdzv_reply_t;

/* Replies for the connections of one shard. */
typedef struct {
    rdzv_reply_t *v;
    size_t len, cap;
} rdzv_outbox_t;

/* Every reply text rdzvd sends (docs/protocol.md), malloc'd, NULL out of
 * memory; each carries the protocol version and the request's id. */
char *rdzv_reply_error(int64_t id, const char *code, const char *message);
/* The same with detail's members added to the error object (detail is
 * consumed; NULL: none). */
char *rdzv_reply_error_detail(int64_t id, const char *code, const char *message, cJSON *detail);
char *rdzv_reply_ok(int64_t id);
/* A heartbeat's: ok, and the group's epoch. */
char *rdzv_reply_epoch(int64_t id, int64_t epoch);
/* A kv get's or wait's. */
char *rdzv_reply_value(int64_t id, const char *value);
/* A status's; takes groups (an array), also when it fails. */
char *rdzv_reply_groups(int64_t id, cJSON *groups);

/* Formats an assignment reply into text (needs no core state: any thread).
 * 0, or -1 out of memory. */
int rdzv_reply_render(rdzv_reply_t *reply);
/* *dst = *src with a copy of a long identity; dst holds none before (clear
 * it first). 0, or -1 out of memory (dst then has an empty identity). */
int rdzv_peer_copy(rdzv_peer_t *dst, const rdzv_peer_t *src);
/* The same peer gets an error with code and message instead (its records
 * were not made durable). */
void rdzv_reply_refuse(rdzv_reply_t *reply, const char *code, const char *message);
/* Frees the text, drops the shared reference and clears the peer: the
 * reply is done with. */
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
