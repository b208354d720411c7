#include "records.h"
#include "reply.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <string.h>

static const char *const s_kinds[] = {
    [RDZV_REC_GROUP] = "group", [RDZV_REC_JOIN] = "join", [RDZV_REC_EPOCH] = "epoch",
    [RDZV_REC_COMPLETE] = "complete", [RDZV_REC_PLANS] = "plans", [RDZV_REC_PLAN] = "plan",
    [RDZV_REC_KV] = "kv", [RDZV_REC_DELETE] = "delete", [RDZV_REC_ROOT_DONE] = "root_done",
    [RDZV_REC_ROUTER] = "router", [RDZV_REC_RESIZE] = "resize",
};
#define S_KINDS ((int) (sizeof s_kinds / sizeof s_kinds[0]))

/* --- reading --- */

static const char *s_str(const cJSON *rec, const char *name)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(rec, name);
    return cJSON_IsString(item) ? item->valuestring : NULL;
}

/* A record's number, refused unless it is an integer a double holds
 * exactly: a damaged or hostile journal must not reach a float-to-integer
 * conversion that overflows (undefined behaviour; found by fuzz_records). */
static int s_num(const cJSON *rec, const char *name, int64_t *out)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(rec, name);
    if (!cJSON_IsNumber(item) || !(item->valuedouble >= -9007199254740992.0)
        || !(item->valuedouble <= 9007199254740992.0)
        || item->valuedouble != floor(item->valuedouble))
        return -1;
    *out = (int64_t) item->valuedouble;
    return 0;
}

static const cJSON *s_array(const cJSON *rec, const char *name)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(rec, name);
    return cJSON_IsArray(item) ? item : NULL;
}

int rdzv_record_int_item(const cJSON *item, int lo, int hi, int *out)
{
    if (!cJSON_IsNumber(item) || !(item->valuedouble >= lo) || !(item->valuedouble <= hi)
        || item->valuedouble != floor(item->valuedouble))
        return -1;
    *out = (int) item->valuedouble;
    return 0;
}

static int s_read_group(const cJSON *rec, rdzv_record_t *out)
{
    /* Journals before "nccl_ids" made one ID an epoch. */
    if (s_num(rec, "nccl_ids", &out->u.group.nccl_ids) < 0)
        out->u.group.nccl_ids = 1;
    return s_num(rec, "world", &out->u.group.world) < 0
           || rdzv_nccl_mode_parse(s_str(rec, "nccl"), &out->u.group.nccl) < 0 ? -1 : 0;
}

static int s_read_join(const cJSON *rec, rdzv_record_t *out)
{
    out->u.join.host = s_str(rec, "host");
    out->u.join.node = s_str(rec, "node");
    out->u.join.session = s_str(rec, "session");
    return s_num(rec, "rank", &out->u.join.rank) < 0 || s_num(rec, "epoch", &out->u.join.epoch) < 0
           || !out->u.join.host || !out->u.join.node || !out->u.join.session ? -1 : 0;
}

/* "plans": the blocks one release laid out, as parallel arrays of one
 * length ("nodes" only in journals written before 2026-11-30). */
static int s_read_plans(const cJSON *rec, rdzv_record_t *out)
{
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(rec, "nodes");
    out->u.plans.ranks = s_array(rec, "ranks");
    out->u.plans.starts = s_array(rec, "starts");
    out->u.plans.nodes = s_array(rec, "nodes");
    if (s_num(rec, "count", &out->u.plans.count) < 0 || !out->u.plans.ranks
        || !out->u.plans.starts || (nodes && !out->u.plans.nodes))
        return -1;
    int n = cJSON_GetArraySize(out->u.plans.ranks);
    return cJSON_GetArraySize(out->u.plans.starts) != n
           || (nodes && cJSON_GetArraySize(nodes) != n) ? -1 : 0;
}

static int s_read_plan(const cJSON *rec, rdzv_record_t *out)
{
    out->u.plan.node = s_str(rec, "node");
    return !out->u.plan.node || s_num(rec, "rank", &out->u.plan.rank) < 0
           || s_num(rec, "start", &out->u.plan.start) < 0
           || s_num(rec, "count", &out->u.plan.count) < 0 ? -1 : 0;
}

static int s_read_kv(const cJSON *rec, rdzv_record_t *out)
{
    out->u.kv.key = s_str(rec, "key");
    out->u.kv.value = s_str(rec, "value");
    return !out->u.kv.key || !out->u.kv.value || s_num(rec, "epoch", &out->u.kv.epoch) < 0 ? -1 : 0;
}

int rdzv_record_read(const cJSON *rec, rdzv_record_t *out)
{
    const char *kind = s_str(rec, "t");
    memset(out, 0, sizeof *out);
    out->group = s_str(rec, "g");
    if (!kind || !out->group)
        return -1;
    int k = 0;
    while (k < S_KINDS && strcmp(kind, s_kinds[k]) != 0)
        k++;
    out->kind = (rdzv_record_kind_t) k;
    /* A kind this rdzvd does not know (a newer one's journal) is refused
     * here, so the switch below sees only values of the enum. */
    if (k == S_KINDS)
        return -1;
    switch (out->kind) {
    case RDZV_REC_GROUP: return s_read_group(rec, out);
    case RDZV_REC_JOIN: return s_read_join(rec, out);
    case RDZV_REC_EPOCH: return s_num(rec, "epoch", &out->u.complete.epoch);
    case RDZV_REC_ROOT_DONE:
        out->u.complete.retired = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "retired"));
        return s_num(rec, "epoch", &out->u.complete.epoch);
    case RDZV_REC_COMPLETE:
        /* The IDs are optional: records of groups without any. */
        out->u.complete.nccl_ids = s_array(rec, "nccl_ids");
        return s_num(rec, "epoch", &out->u.complete.epoch);
    case RDZV_REC_PLANS: return s_read_plans(rec, out);
    case RDZV_REC_PLAN: return s_read_plan(rec, out);
    case RDZV_REC_KV: return s_read_kv(rec, out);
    case RDZV_REC_DELETE: return 0;
    case RDZV_REC_ROUTER:
        out->u.router.url = s_str(rec, "url");
        return out->u.router.url ? 0 : -1;
    case RDZV_REC_RESIZE: {
        const char *how = s_str(rec, "how");
        int how_kind = !how ? RDZV_RESIZE_KEEP
                   : strcmp(how, "fresh") == 0 ? RDZV_RESIZE_FRESH
                   : strcmp(how, "close") == 0 ? RDZV_RESIZE_CLOSE : -1;
        out->u.resize.how = (rdzv_resize_how_t) (how_kind < 0 ? 0 : how_kind);
        return how_kind < 0 || s_num(rec, "world", &out->u.resize.world) < 0
               || s_num(rec, "epoch", &out->u.resize.epoch) < 0 ? -1 : 0;
    }
    }
    return -1;                   /* no kind: refused above */
}

/* --- writing --- */

static cJSON *s_new(rdzv_record_kind_t kind, const char *group)
{
    cJSON *rec = cJSON_CreateObject();
    if (rec && (!cJSON_AddStringToObject(rec, "t", s_kinds[kind])
                || !cJSON_AddStringToObject(rec, "g", group))) {
        cJSON_Delete(rec);
        return NULL;
    }
    return rec;
}

/* rec, or NULL (rec freed) if any of the adds before failed. */
static cJSON *s_done(cJSON *rec, bool ok)
{
    if (ok)
        return rec;
    cJSON_Delete(rec);
    return NULL;
}

cJSON *rdzv_record_group(const char *group, int world, rdzv_nccl_mode_t nccl, int nccl_ids)
{
    cJSON *rec = s_new(RDZV_REC_GROUP, group);
    return rec ? s_done(rec, cJSON_AddNumberToObject(rec, "world", world)
                             && cJSON_AddStringToObject(rec, "nccl", rdzv_nccl_mode_name(nccl))
                             && cJSON_AddNumberToObject(rec, "nccl_ids", nccl_ids)) : NULL;
}

cJSON *rdzv_record_join(const char *group, int rank, const char *host, const char *node,
                        const char *session, int64_t epoch)
{
    cJSON *rec = s_new(RDZV_REC_JOIN, group);
    return rec ? s_done(rec, cJSON_AddNumberToObject(rec, "rank", rank)
                             && cJSON_AddStringToObject(rec, "host", host)
                             && cJSON_AddStringToObject(rec, "node", node)
                             && cJSON_AddStringToObject(rec, "session", session)
                             && cJSON_AddNumberToObject(rec, "epoch", (double) epoch)) : NULL;
}

cJSON *rdzv_record_epoch(const char *group, int64_t epoch)
{
    cJSON *rec = s_new(RDZV_REC_EPOCH, group);
    return rec ? s_done(rec, cJSON_AddNumberToObject(rec, "epoch", (double) epoch)) : NULL;
}

cJSON *rdzv_record_root_done(const char *group, int64_t epoch, bool retired)
{
    cJSON *rec = s_new(RDZV_REC_ROOT_DONE, group);
    return rec ? s_done(rec, cJSON_AddNumberToObject(rec, "epoch", (double) epoch)
                                 && (!retired || cJSON_AddTrueToObject(rec, "retired")))
               : NULL;
}

cJSON *rdzv_record_complete(const char *group, int64_t epoch, cJSON *nccl_ids)
{
    cJSON *rec = s_new(RDZV_REC_COMPLETE, group);
    if (!nccl_ids)
        nccl_ids = cJSON_CreateArray();
    if (!rec || !nccl_ids || !cJSON_AddNumberToObject(rec, "epoch", (double) epoch)) {
        cJSON_Delete(nccl_ids);
        return s_done(rec, false);
    }
    cJSON_AddItemToObject(rec, "nccl_ids", nccl_ids);
    return rec;
}

/* An int array as JSON text for cJSON_AddRawToObject: cJSON prints each
 * number through "%1.15g" and reads it back, 0.3 us a number here (a
 * release of 16384 ranks writes two such arrays). */
static char *s_int_array_json(const int *v, int n)
{
    char *text = malloc((size_t) n * 12 + 3);
    if (!text)
        return NULL;
    char *p = text;
    *p++ = '[';
    rdzv_decimal_t d;
    rdzv_decimal_set(&d, n ? v[0] : 0);
    for (int i = 0; i < n; i++) {
        if (i)
            *p++ = ',';
        p = rdzv_decimal_put(&d, p, v[i]);
    }
    memcpy(p, "]", 2);
    return text;
}

cJSON *rdzv_record_plans(const char *group, int count, const int *ranks, const int *starts,
                         const char *const *nodes, int n)
{
    cJSON *rec = s_new(RDZV_REC_PLANS, group);
    char *r = s_int_array_json(ranks, n), *s = s_int_array_json(starts, n);
    bool ok = rec && r && s && cJSON_AddNumberToObject(rec, "count", count)
              && cJSON_AddRawToObject(rec, "ranks", r)
              && (!nodes || cJSON_AddItemToObject(rec, "nodes", cJSON_CreateStringArray(nodes, n)))
              && cJSON_AddRawToObject(rec, "starts", s);
    free(r);
    free(s);
    return rec ? s_done(rec, ok) : NULL;
}

static cJSON *s_kv(const char *group, int64_t epoch, const char *key, cJSON *value)
{
    cJSON *rec = value ? s_new(RDZV_REC_KV, group) : NULL;
    if (!rec) {
        cJSON_Delete(value);
        return NULL;
    }
    return s_done(rec, cJSON_AddNumberToObject(rec, "epoch", (double) epoch)
                       && cJSON_AddStringToObject(rec, "key", key)
                       && cJSON_AddItemToObject(rec, "value", value));
}

cJSON *rdzv_record_kv(const char *group, int64_t epoch, const char *key, const char *value)
{
    return s_kv(group, epoch, key, cJSON_CreateString(value));
}

cJSON *rdzv_record_kv_ref(const char *group, int64_t epoch, const char *key, const char *value)
{
    return s_kv(group, epoch, key, cJSON_CreateStringReference(value));
}

cJSON *rdzv_record_delete(const char *group)
{
    return s_new(RDZV_REC_DELETE, group);
}

cJSON *rdzv_record_router(const char *group, const char *url)
{
    cJSON *rec = s_new(RDZV_REC_ROUTER, group);
    return rec ? s_done(rec, cJSON_AddStringToObject(rec, "url", url) != NULL) : NULL;
}

cJSON *rdzv_record_resize(const char *group, int world, int64_t epoch, rdzv_resize_how_t how)
{
    cJSON *rec = s_new(RDZV_REC_RESIZE, group);
    return rec ? s_done(rec, cJSON_AddNumberToObject(rec, "world", world)
                                 && cJSON_AddNumberToObject(rec, "epoch", (double) epoch)
                                 && (how == RDZV_RESIZE_KEEP
                                     || cJSON_AddStringToObject(rec, "how", how == RDZV_RESIZE_FRESH
                                                                ? "fresh" : "close")))
               : NULL;
}
