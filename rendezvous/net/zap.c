/* rdzvd's ZAP handler (zap.h). czmq's zauth would do for a fixed set of
 * keys, but it cannot say when its store changed or what it now holds,
 * and its store aborts rdzvd on two files with one key. */
#include "zap.h"
#include "log.h"

#include <string.h>

#define S_ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define S_ZAP_VERSION "1.0"
/* How often an idle handler looks at DIR, so that a rotation is logged
 * when it happens rather than at the next handshake. */
#define S_IDLE_CHECK_MS 1000

static void s_reply(zsock_t *handler, const char *request_id, const char *status,
                    const char *text, const char *user)
{
    zmsg_t *reply = zmsg_new();
    zmsg_addstr(reply, S_ZAP_VERSION);
    zmsg_addstr(reply, request_id);
    zmsg_addstr(reply, status);
    zmsg_addstr(reply, text);
    zmsg_addstr(reply, user);
    zmsg_addmem(reply, NULL, 0);                 /* no metadata */
    zmsg_send(&reply, handler);
}

typedef struct {
    char *id, *address;          /* the request's id (echoed), the peer's address */
    bool curve;                  /* a CURVE handshake with a key of the right size */
    uint8_t key[RDZV_CURVE_KEY_BYTES];
} s_request_t;

/* Frames: version, id, domain, address, identity, mechanism, then CURVE's
 * one credential, the client's public key. */
static void s_parse(zmsg_t *msg, s_request_t *r)
{
    char *version = zmsg_popstr(msg);
    r->id = zmsg_popstr(msg);
    char *domain = zmsg_popstr(msg);
    r->address = zmsg_popstr(msg);
    zframe_t *identity = zmsg_pop(msg);
    char *mechanism = zmsg_popstr(msg);
    zframe_t *key = zmsg_pop(msg);
    r->curve = version && streq(version, S_ZAP_VERSION) && mechanism && streq(mechanism, "CURVE")
               && key && zframe_size(key) == RDZV_CURVE_KEY_BYTES && zmsg_size(msg) == 0;
    if (r->curve)
        memcpy(r->key, zframe_data(key), RDZV_CURVE_KEY_BYTES);
    zstr_free(&version);
    zstr_free(&domain);
    zstr_free(&mechanism);
    zframe_destroy(&identity);
    zframe_destroy(&key);
}

/* One handshake's question: let in a key DIR holds now. */
static void s_answer(zsock_t *handler, rdzv_clientkeys_t *keys)
{
    zmsg_t *msg = zmsg_recv(handler);
    if (!msg)
        return;
    s_request_t r = { 0 };
    s_parse(msg, &r);
    zmsg_destroy(&msg);
    rdzv_clientkeys_refresh(keys);
    const char *file = r.curve ? rdzv_clientkeys_lookup(keys, r.key) : NULL;
    char z85[41] = "none";
    if (r.curve)
        zmq_z85_encode(z85, r.key, RDZV_CURVE_KEY_BYTES);
    if (rdzv_log_enabled("auth"))
        rdzv_core_log("auth", "key=%s from=%s %s%s", z85, r.address ? r.address : "?",
                      file ? "allowed file=" : "denied: not in --clients", file ? file : "");
    s_reply(handler, r.id ? r.id : "", file ? "200" : "400", file ? "OK" : "No access",
            file ? z85 : "");
    zstr_free(&r.id);
    zstr_free(&r.address);
}

typedef struct {
    rdzv_clientkeys_t *keys;     /* the actor's from its start */
    bool bound;                  /* set by the actor before zactor_new returns */
} s_start_t;

/* The actor: answers until $TERM. Interrupts do not end it: a CURVE socket
 * without a ZAP handler lets every client in. */
static void s_actor(zsock_t *pipe, void *args)
{
    s_start_t *start = args;
    rdzv_clientkeys_t *keys = start->keys;
    zsock_t *handler = zsock_new_rep("@" S_ZAP_ENDPOINT);
    zpoller_t *poller = handler ? zpoller_new(pipe, handler, NULL) : NULL;
    start->bound = poller != NULL;
    zsock_signal(pipe, 0);       /* zactor_new returns: start is the caller's again */
    if (poller)
        zpoller_set_nonstop(poller, true);
    while (poller) {
        void *which = zpoller_wait(poller, S_IDLE_CHECK_MS);
        if (which == handler) {
            s_answer(handler, keys);
        } else if (which == pipe) {
            char *command = zstr_recv(pipe);
            bool term = !command || streq(command, "$TERM");
            zstr_free(&command);
            if (term)
                break;
        } else {
            rdzv_clientkeys_refresh(keys);
        }
    }
    zpoller_destroy(&poller);
    zsock_destroy(&handler);
    rdzv_clientkeys_destroy(&keys);
}

zactor_t *rdzv_zap_start(rdzv_clientkeys_t **keys_p)
{
    s_start_t start = { .keys = *keys_p };
    zactor_t *actor = zactor_new(s_actor, &start);
    if (!actor) {
        rdzv_clientkeys_destroy(keys_p);
        return NULL;
    }
    *keys_p = NULL;              /* the actor's, whatever comes next */
    if (!start.bound)
        zactor_destroy(&actor);
    return actor;
}
