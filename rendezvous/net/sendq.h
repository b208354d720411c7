/* What each peer of a shard leaves unread, in bytes, and what rdzvd does
 * about it.
 *
 * Every reply goes to libzmq as a message whose buffer libzmq frees through
 * a callback of ours once it has written it to the kernel (or dropped it).
 * Counting bytes up at the send and down in that callback gives, per peer,
 * exactly what libzmq still holds for it: a reader's count falls back to
 * nothing as it reads, however many requests it keeps in flight; one that
 * does not read keeps it. libzmq's own high-water mark counts messages, and
 * counts them as read only every few dozen, so it cannot tell the two apart.
 *
 * A peer is never disconnected for not reading (libzmq gives a ROUTER no
 * supported call for that): it is no longer fed. Past RDZV_SENDQ_PEER_BYTES
 * unread, or past RDZV_SENDQ_FAIR_BYTES once every peer together holds
 * RDZV_SENDQ_TOTAL_BYTES, a reply becomes a short "busy" error; once its busy errors unread reach
 * RDZV_SENDQ_BUSY_BYTES the peer has not read even those, and its replies
 * are dropped and counted. A peer with nothing unread always gets
 * its reply, so readers are answered under any load. Used by shard.c. */
#ifndef RDZV_SENDQ_H
#define RDZV_SENDQ_H

#include "reply.h"

#include <stddef.h>

#define RDZV_SENDQ_PEER_BYTES  (1 << 20)
#define RDZV_SENDQ_BUSY_BYTES  (16 << 10)        /* of busy errors, on top */
#define RDZV_SENDQ_TOTAL_BYTES ((size_t) 64 << 20)
/* What any peer may leave unread even when the total is spent: readers
 * keep their requests in flight while others hoard. */
#define RDZV_SENDQ_FAIR_BYTES  (128 << 10)
/* What libzmq keeps beside a message's bytes (its pipe entry, the frame
 * of the identity): counted so that many tiny replies add up too. */
#define RDZV_SENDQ_MSG_OVERHEAD 128

typedef enum {
    RDZV_SENDQ_SEND,             /* the reply goes out */
    RDZV_SENDQ_BUSY,             /* a "busy" error goes out instead */
    RDZV_SENDQ_DROP,             /* nothing goes out: the peer reads nothing */
} rdzv_sendq_verdict_t;

/* What a peer leaves unread: all of it, the busy errors among it; and
 * what every peer together does. */
typedef struct {
    size_t queued, busy, total;
} rdzv_sendq_load_t;

/* The rule above, for a reply of len bytes (len 0: a request arriving,
 * refused where any reply to it would be). */
rdzv_sendq_verdict_t rdzv_sendq_decide(rdzv_sendq_load_t load, size_t len);

typedef struct rdzv_sendq rdzv_sendq_t;

rdzv_sendq_t *rdzv_sendq_new(void);
/* Peers' counts still referenced by messages in libzmq live on until
 * libzmq frees those messages. */
void rdzv_sendq_destroy(rdzv_sendq_t **self_p);

/* The verdict on a request that peer just sent, from what it leaves unread. */
rdzv_sendq_verdict_t rdzv_sendq_intake(rdzv_sendq_t *self, const rdzv_peer_t *peer);

/* Sends text (taken, freed whatever happens) to peer on the ROUTER sock, or
 * the busy error for request id instead, per the verdict it returns.
 * Returns the verdict, or -1 with errno as libzmq left it if the send
 * failed (EHOSTUNREACH: the peer is gone). */
int rdzv_sendq_send(rdzv_sendq_t *self, void *sock, const rdzv_peer_t *peer, char *text);

/* Forgets peers that hold nothing unread; call now and then. */
void rdzv_sendq_sweep(rdzv_sendq_t *self);

/* Bytes every peer of every shard leaves unread, now. */
size_t rdzv_sendq_total(void);

#endif
