#include "quota.h"
#include "rdzv_util.h"

#include <czmq.h>
#include <stdlib.h>

typedef struct {
    double tokens;
    int64_t last_ms;
} s_bucket_t;

struct rdzv_rate {
    int max_rps;
    zhashx_t *buckets;           /* hex identity -> s_bucket_t */
};

rdzv_rate_t *rdzv_rate_new(int max_rps)
{
    rdzv_rate_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->max_rps = max_rps;
    self->buckets = zhashx_new();
    zhashx_set_destructor(self->buckets, (zhashx_destructor_fn *) zstr_free);
    return self;
}

void rdzv_rate_destroy(rdzv_rate_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zhashx_destroy(&(*self_p)->buckets);
    free(*self_p);
    *self_p = NULL;
}

bool rdzv_rate_allow(rdzv_rate_t *self, int shard, const unsigned char *id, size_t len,
                     int64_t now_ms)
{
    if (self->max_rps <= 0)
        return true;
    /* Each shard's ROUTER numbers its connections on its own: the shard is
     * part of which connection this is. */
    char key[16 + 2 * 256 + 1];
    int n = snprintf(key, 16, "%d/", shard);
    rdzv_hex_encode(id, len > 256 ? 256 : len, key + n);
    s_bucket_t *b = zhashx_lookup(self->buckets, key);
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b)
            return true;
        b->tokens = self->max_rps;
        b->last_ms = now_ms;
        zhashx_insert(self->buckets, key, b);
    }
    b->tokens += (double) (now_ms - b->last_ms) * self->max_rps / 1000.0;
    if (b->tokens > self->max_rps)
        b->tokens = self->max_rps;
    b->last_ms = now_ms;
    if (b->tokens < 1)
        return false;
    b->tokens -= 1;
    return true;
}

void rdzv_rate_prune(rdzv_rate_t *self, int64_t now_ms, int64_t idle_ms)
{
    zlistx_t *keys = zhashx_keys(self->buckets);
    for (const char *k = zlistx_first(keys); k; k = zlistx_next(keys)) {
        s_bucket_t *b = zhashx_lookup(self->buckets, k);
        if (now_ms - b->last_ms > idle_ms)
            zhashx_delete(self->buckets, k);
    }
    zlistx_destroy(&keys);
}
