/* One connection to an etcd cluster through its JSON gateway (POST /v3/...,
 * keys and values in base64), made with libcurl. A connection is one thread's:
 * each of the etcd journal's threads holds its own. A call goes to the
 * member that answered last and moves on to the next of --etcd's endpoints
 * when that one cannot be reached. */
#ifndef RDZV_ETCD_HTTP_H
#define RDZV_ETCD_HTTP_H

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What rdzvd's --etcd options say. */
typedef struct {
    const char *endpoints;       /* "http[s]://host:2379,..." */
    const char *prefix;          /* every key rdzvd writes starts with it */
    const char *ca, *cert, *key; /* TLS files; NULL: none */
    int ttl_s;                   /* the leader's lease */
} rdzv_etcd_config_t;

typedef struct rdzv_etcd rdzv_etcd_t;

/* NULL on failure (no endpoint in the list, out of memory), reason in err. */
rdzv_etcd_t *rdzv_etcd_new(const rdzv_etcd_config_t *cfg, char *err, size_t errlen);
void rdzv_etcd_destroy(rdzv_etcd_t **self_p);

/* How a call ended. */
enum {
    RDZV_ETCD_OK = 0,
    RDZV_ETCD_UNREACHABLE = -1,  /* no member answered within the time */
    RDZV_ETCD_REFUSED = -2,      /* a member answered with an error (err says it) */
};

/* POSTs body (the caller's) to path ("/v3/kv/txn") and parses the answer
 * into *reply (the caller's to free). timeout_ms bounds each member's try.
 * Returns one of the codes above. */
int rdzv_etcd_call(rdzv_etcd_t *self, const char *path, const cJSON *body, long timeout_ms,
                   cJSON **reply, char *err, size_t errlen);

/* A streaming call (/v3/watch): fn gets each JSON object of the answer as
 * it arrives (borrowed) and returns 0 to go on, else the stream ends. Ends
 * too when *stop becomes true (checked about once a second) or the member
 * goes away, or after timeout_ms (0: never). Returns fn's last non-zero
 * value, 0 when stopped, or a code above. */
typedef int (rdzv_etcd_stream_fn)(void *arg, const cJSON *message);
int rdzv_etcd_stream(rdzv_etcd_t *self, const char *path, const cJSON *body, long timeout_ms,
                     rdzv_etcd_stream_fn *fn, void *arg, const atomic_bool *stop,
                     char *err, size_t errlen);

/* Whether the last call failed for a reason that passes by itself: etcd
 * answered err (its text, as a call wrote it) while it elects a leader or
 * has no quorum, or a member took the connection and did not answer in
 * time (what a member without quorum does). A wrong address or TLS
 * setting is no such reason. */
bool rdzv_etcd_transient(const rdzv_etcd_t *self, const char *err);

/* The endpoint the last call used. */
const char *rdzv_etcd_endpoint(const rdzv_etcd_t *self);

/* base64 of len bytes, malloc'd (NULL: out of memory). */
char *rdzv_etcd_b64(const void *data, size_t len);
/* The bytes base64 text stands for, NUL-terminated, malloc'd, with their
 * length in *len_out; NULL if text is not base64. */
char *rdzv_etcd_unb64(const char *text, size_t *len_out);
/* Adds name: base64(text) to obj. */
void rdzv_etcd_add_b64(cJSON *obj, const char *name, const char *text, size_t len);
/* An int64 the gateway sends as a string (or a number); 0 when missing. */
int64_t rdzv_etcd_int(const cJSON *obj, const char *name);

#endif
