/* What every part of the etcd journal uses: key names, the leader's
 * compare, transactions, and the stop of a deposed leader
 * (etcd_journal_private.h). */
#include "etcd_journal_private.h"
#include "log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int64_t rdzv_etcdj_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

char *rdzv_etcdj_key(const rdzv_etcdj_t *self, char *buf, size_t len, const char *what)
{
    snprintf(buf, len, "%s/%s", self->prefix, what);
    return buf;
}

char *rdzv_etcdj_log_key(const rdzv_etcdj_t *self, char *buf, size_t len, uint64_t seq)
{
    snprintf(buf, len, "%s/log/%016" PRIx64, self->prefix, seq);
    return buf;
}

char *rdzv_etcdj_snap_key(const rdzv_etcdj_t *self, char *buf, size_t len, uint64_t gen,
                          unsigned chunk)
{
    snprintf(buf, len, "%s/snap/%016" PRIx64 "/%08x", self->prefix, gen, chunk);
    return buf;
}

uint64_t rdzv_etcdj_key_seq(const rdzv_etcdj_t *self, const char *key)
{
    char start[512];
    size_t n = strlen(rdzv_etcdj_key(self, start, sizeof start, "log/"));
    if (strncmp(key, start, n) != 0 || strlen(key + n) != 16)
        return 0;
    return strtoull(key + n, NULL, 16);
}

void rdzv_etcdj_add_range(cJSON *obj, const char *key, const char *end)
{
    rdzv_etcd_add_b64(obj, "key", key, strlen(key));
    if (end)
        rdzv_etcd_add_b64(obj, "range_end", end, strlen(end));
}

cJSON *rdzv_etcdj_leader_compare(const rdzv_etcdj_t *self)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "key", self->leader_key);
    cJSON_AddStringToObject(c, "target", "CREATE");
    cJSON_AddStringToObject(c, "result", "EQUAL");
    char rev[32];
    snprintf(rev, sizeof rev, "%" PRId64, self->leader_rev);
    cJSON_AddStringToObject(c, "create_revision", rev);
    return c;
}

void rdzv_etcdj_fenced(rdzv_etcdj_t *self, const char *why)
{
    rdzv_core_log("fenced", "this rdzvd no longer leads (%s); it stops without writing or "
                  "answering anything more, and the leader elected in its place serves",
                  why);
    atomic_store(&self->leading, false);
    fflush(stderr);
    /* No destructor: another thread may hold the core's lock mid-batch. */
    _exit(3);
}

int rdzv_etcdj_txn(rdzv_etcd_t *conn, cJSON *compares, cJSON *success, cJSON *failure,
                   cJSON **reply, char *err, size_t errlen)
{
    cJSON *body = cJSON_CreateObject();
    cJSON_AddItemToObject(body, "compare", compares);
    cJSON_AddItemToObject(body, "success", success);
    if (failure)
        cJSON_AddItemToObject(body, "failure", failure);
    int rc = rdzv_etcd_call(conn, "/v3/kv/txn", body, RDZV_ETCDJ_CALL_MS, reply, err, errlen);
    cJSON_Delete(body);
    if (rc != RDZV_ETCD_OK)
        return rc;
    /* proto3 leaves out a false "succeeded". */
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(*reply, "succeeded")) ? 1 : 0;
}
