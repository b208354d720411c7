#include "sendq.h"
#include "rdzv_proto.h"

#include <assert.h>
#include <czmq.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Every shard's peers together; static because libzmq may free a message
 * after the shard (and the server) that sent it is gone. */
static atomic_size_t s_total;

/* A busy error's size, as counted: its text is under 200 bytes. */
#define S_BUSY_REPLY_BYTES (256 + RDZV_SENDQ_MSG_OVERHEAD)

typedef struct {
    size_t len;
    const unsigned char *id;
} s_key_t;

/* One peer's unread bytes. The map holds a reference, and so does every
 * message of the peer's that libzmq holds: it lives until the last goes. */
typedef struct {
    s_key_t key;
    atomic_size_t bytes;
    atomic_size_t busy;          /* of those, busy errors' */
    atomic_int refs;
    unsigned char id[];
} s_account_t;

struct rdzv_sendq {
    zhashx_t *peers;             /* s_key_t * -> s_account_t * */
};

rdzv_sendq_verdict_t rdzv_sendq_decide(rdzv_sendq_load_t load, size_t len)
{
    if (load.queued == 0)
        return RDZV_SENDQ_SEND;
    size_t after = load.queued + len;
    if (after <= RDZV_SENDQ_PEER_BYTES
        && (after <= RDZV_SENDQ_FAIR_BYTES || load.total + len <= RDZV_SENDQ_TOTAL_BYTES))
        return RDZV_SENDQ_SEND;
    if (load.busy + S_BUSY_REPLY_BYTES <= RDZV_SENDQ_BUSY_BYTES)
        return RDZV_SENDQ_BUSY;
    return RDZV_SENDQ_DROP;
}

static size_t s_hash(const void *key)
{
    const s_key_t *k = key;
    size_t h = 14695981039346656037ULL;           /* FNV-1a */
    for (size_t i = 0; i < k->len; i++)
        h = (h ^ k->id[i]) * 1099511628211ULL;
    return h;
}

static int s_compare(const void *a, const void *b)
{
    const s_key_t *x = a, *y = b;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return memcmp(x->id, y->id, x->len);
}

static void s_unref(s_account_t *account)
{
    if (atomic_fetch_sub(&account->refs, 1) == 1)
        free(account);
}

rdzv_sendq_t *rdzv_sendq_new(void)
{
    rdzv_sendq_t *self = calloc(1, sizeof *self);
    if (!self || !(self->peers = zhashx_new())) {
        free(self);
        return NULL;
    }
    zhashx_set_key_duplicator(self->peers, NULL);
    zhashx_set_key_destructor(self->peers, NULL);
    zhashx_set_key_hasher(self->peers, s_hash);
    zhashx_set_key_comparator(self->peers, s_compare);
    return self;
}

void rdzv_sendq_destroy(rdzv_sendq_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_sendq_t *self = *self_p;
    for (s_account_t *a = zhashx_first(self->peers); a; a = zhashx_next(self->peers))
        s_unref(a);
    zhashx_destroy(&self->peers);
    free(self);
    *self_p = NULL;
}

static s_account_t *s_find(rdzv_sendq_t *self, const rdzv_peer_t *peer)
{
    s_key_t key = { .len = peer->len, .id = rdzv_peer_id(peer) };
    return zhashx_lookup(self->peers, &key);
}

/* The peer's account, made if it has none; NULL out of memory. */
static s_account_t *s_account(rdzv_sendq_t *self, const rdzv_peer_t *peer)
{
    s_account_t *a = s_find(self, peer);
    if (a)
        return a;
    a = malloc(sizeof *a + peer->len);
    if (!a)
        return NULL;
    memcpy(a->id, rdzv_peer_id(peer), peer->len);
    a->key = (s_key_t) { .len = peer->len, .id = a->id };
    atomic_init(&a->bytes, 0);
    atomic_init(&a->busy, 0);
    atomic_init(&a->refs, 1);
    if (zhashx_insert(self->peers, &a->key, a) != 0) {
        free(a);
        return NULL;
    }
    return a;
}

static rdzv_sendq_load_t s_load(const s_account_t *a)
{
    return (rdzv_sendq_load_t) { .queued = atomic_load(&a->bytes), .busy = atomic_load(&a->busy),
                                 .total = atomic_load(&s_total) };
}

rdzv_sendq_verdict_t rdzv_sendq_intake(rdzv_sendq_t *self, const rdzv_peer_t *peer)
{
    s_account_t *a = s_find(self, peer);
    return a ? rdzv_sendq_decide(s_load(a), 0) : RDZV_SENDQ_SEND;
}

/* libzmq is done with a message: it is on the wire, or the peer is gone.
 * Runs on libzmq's I/O thread, or on the shard's when a send fails. */
static void s_release(void *data, void *hint)
{
    s_account_t *a = hint;
    size_t n = strlen(data) + RDZV_SENDQ_MSG_OVERHEAD;
    atomic_fetch_sub(&a->bytes, n);
    atomic_fetch_sub(&s_total, n);
    free(data);
    s_unref(a);
}

static void s_release_busy(void *data, void *hint)
{
    s_account_t *a = hint;
    atomic_fetch_sub(&a->busy, S_BUSY_REPLY_BYTES);
    s_release(data, hint);
}

static int s_send(void *sock, const rdzv_peer_t *peer, s_account_t *a, char *text, bool busy)
{
    size_t len = strlen(text), n = len + RDZV_SENDQ_MSG_OVERHEAD;
    zmq_msg_t body;
    atomic_fetch_add(&a->refs, 1);
    atomic_fetch_add(&a->bytes, n);
    atomic_fetch_add(&s_total, n);
    if (busy)
        atomic_fetch_add(&a->busy, S_BUSY_REPLY_BYTES);
    int rc = zmq_msg_init_data(&body, text, len, busy ? s_release_busy : s_release, a);
    assert(rc == 0);                 /* with a buffer given, it cannot fail */
    /* The body after the identity at once: an identity frame sent alone
     * would make the next reply part of this message. */
    if (zmq_send(sock, rdzv_peer_id(peer), peer->len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0
        || zmq_msg_send(&body, sock, ZMQ_DONTWAIT) < 0) {
        int saved = errno;
        zmq_msg_close(&body);        /* its release gives the bytes back */
        errno = saved;
        return -1;
    }
    return 0;
}

int rdzv_sendq_send(rdzv_sendq_t *self, void *sock, const rdzv_peer_t *peer, char *text)
{
    s_account_t *a = s_account(self, peer);
    if (!a) {
        free(text);
        errno = ENOMEM;
        return -1;
    }
    size_t queued = atomic_load(&a->bytes);
    rdzv_sendq_verdict_t v = rdzv_sendq_decide(s_load(a), strlen(text) + RDZV_SENDQ_MSG_OVERHEAD);
    if (v != RDZV_SENDQ_SEND) {
        free(text);
        text = NULL;
    }
    if (v == RDZV_SENDQ_DROP)
        return v;
    if (v == RDZV_SENDQ_BUSY) {
        char msg[160];
        snprintf(msg, sizeof msg, "%zu bytes of replies to this connection are unread: read "
                 "them before asking more", queued);
        text = rdzv_reply_error(peer->req, RDZV_E_BUSY, msg);
        if (!text) {
            errno = ENOMEM;
            return -1;
        }
    }
    return s_send(sock, peer, a, text, v == RDZV_SENDQ_BUSY) < 0 ? -1 : (int) v;
}

void rdzv_sendq_sweep(rdzv_sendq_t *self)
{
    size_t n = zhashx_size(self->peers), idle = 0;
    if (n == 0)
        return;
    s_account_t **v = malloc(n * sizeof *v);
    if (!v)
        return;
    for (s_account_t *a = zhashx_first(self->peers); a; a = zhashx_next(self->peers))
        if (atomic_load(&a->bytes) == 0)
            v[idle++] = a;
    for (size_t i = 0; i < idle; i++) {
        zhashx_delete(self->peers, &v[i]->key);
        s_unref(v[i]);
    }
    free(v);
}

size_t rdzv_sendq_total(void)
{
    return atomic_load(&s_total);
}
