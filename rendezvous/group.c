/* Applying journal records to memory. The live handlers and the replay at
 * start-up go through these same functions, so what rdzvd knows after a
 * restart is exactly what it had recorded. */
#include "core.h"
#include "rdzv_proto.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

static int s_set(char **field, const char *value)
{
    char *copy = strdup(value);
    if (!copy)
        return -1;
    free(*field);
    *field = copy;
    return 0;
}

static int s_apply_group(rdzv_core_t *self, const cJSON *rec, const char *name)
{
    int64_t world;
    if (s_num(rec, "world", &world) < 0 || world <= 0 || world > self->cfg.max_world
        || rdzv_core_group(self, name))
        return -1;
    rdzv_nccl_mode_t mode;
    int64_t count = 1;
    if (rdzv_nccl_mode_parse(s_str(rec, "nccl"), &mode) < 0
        || (s_num(rec, "nccl_ids", &count) == 0 && (count < 1 || count > 64)))
        return -1;
    rdzv_group_t *g = rdzv_group_new(name, (int) world, mode, (int) count);
    if (!g)
        return -1;
    zhashx_insert(self->groups, name, g);
    return 0;
}

static int s_apply_join(rdzv_core_t *self, rdzv_group_t *g, const cJSON *rec)
{
    int64_t rank, epoch;
    const char *host = s_str(rec, "host"), *node = s_str(rec, "node");
    const char *session = s_str(rec, "session");
    if (s_num(rec, "rank", &rank) < 0 || s_num(rec, "epoch", &epoch) < 0
        || rank < 0 || rank >= g->world || !host || !node || !session)
        return -1;
    rdzv_member_t *m = rdzv_group_member(g, (int) rank);
    if (!m)
        return -1;
    /* The node's plan entry now, while ranks trickle in, rather than all
     * of them in the release the last rank waits for. */
    if (s_set(&m->host, host) < 0 || s_set(&m->node, node) < 0
        || s_set(&m->session, session) < 0
        || !(m->plan_node = rdzv_plans_node(self->plans, node)))
        return -1;
    if (epoch == g->epoch && m->epoch < epoch)
        g->joined++;
    m->epoch = epoch;
    return 0;
}

/* A new epoch forgets the old one's ID, KV and completeness; plans stay. */
static int s_apply_epoch(rdzv_group_t *g, const cJSON *rec)
{
    int64_t epoch;
    if (s_num(rec, "epoch", &epoch) < 0 || epoch <= g->epoch)
        return -1;
    g->epoch = epoch;
    g->complete = false;
    g->joined = 0;
    for (int r = 0; r < g->world; r++)
        if (g->members[r] && g->members[r]->epoch == epoch)
            g->joined++;
    rdzv_ncclroot_destroy(&g->root);
    cJSON_Delete(g->nccl_ids);
    g->nccl_ids = NULL;
    cJSON_Delete(g->rank0_ids);
    g->rank0_ids = NULL;
    for (int i = 0; i < 2; i++)
        rdzv_shared_unref(&g->shared[i]);
    zhashx_purge(g->kv);
    g->kv_bytes = 0;
    return 0;
}

static int s_apply_complete(rdzv_group_t *g, const cJSON *rec)
{
    int64_t epoch;
    if (s_num(rec, "epoch", &epoch) < 0 || epoch != g->epoch)
        return -1;
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(rec, "nccl_ids");
    cJSON_Delete(g->nccl_ids);
    g->nccl_ids = cJSON_IsArray(ids) ? cJSON_Duplicate(ids, 1) : cJSON_CreateArray();
    g->complete = true;
    return 0;
}

static int s_apply_plan(rdzv_core_t *self, rdzv_group_t *g, const cJSON *rec)
{
    int64_t rank, start, count;
    const char *node = s_str(rec, "node");
    if (!node || s_num(rec, "rank", &rank) < 0 || s_num(rec, "start", &start) < 0
        || s_num(rec, "count", &count) < 0 || rank < 0 || rank >= g->world)
        return -1;
    return rdzv_plans_record(self->plans, node, g->name, (int) rank, (int) start, (int) count);
}

static bool s_int_item(const cJSON *item, int lo, int hi, int *out)
{
    if (!cJSON_IsNumber(item) || !(item->valuedouble >= lo) || !(item->valuedouble <= hi)
        || item->valuedouble != floor(item->valuedouble))
        return false;
    *out = (int) item->valuedouble;
    return true;
}

/* The node a "plans" record puts block i on: its "nodes" entry (journals
 * written before 2026-11-30 name each), else the rank's node as its join
 * record before this one left it. NULL if neither. */
static const char *s_plans_node(const rdzv_group_t *g, const cJSON *node_item, int rank)
{
    if (node_item)
        return cJSON_IsString(node_item) ? node_item->valuestring : NULL;
    return g->members[rank] ? g->members[rank]->node : NULL;
}

/* "plans": the blocks one release laid out, as parallel arrays (one record
 * per release rather than one per rank: a 1024-rank release wrote 1024
 * records before). All or nothing. */
static int s_apply_plans(rdzv_core_t *self, rdzv_group_t *g, const cJSON *rec)
{
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(rec, "ranks");
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(rec, "nodes");
    const cJSON *starts = cJSON_GetObjectItemCaseSensitive(rec, "starts");
    int64_t count;
    if (s_num(rec, "count", &count) < 0 || count <= 0 || count > 65536 || !cJSON_IsArray(ranks)
        || (nodes && !cJSON_IsArray(nodes)) || !cJSON_IsArray(starts))
        return -1;
    int n = cJSON_GetArraySize(ranks);
    if ((nodes && cJSON_GetArraySize(nodes) != n) || cJSON_GetArraySize(starts) != n)
        return -1;
    const cJSON *r = ranks->child, *nd = nodes ? nodes->child : NULL, *st = starts->child;
    int done = 0, rank = 0, start = 0;
    for (; done < n; done++, r = r->next, nd = nd ? nd->next : NULL, st = st->next) {
        const char *node = NULL;
        if (!s_int_item(r, 0, g->world - 1, &rank) || !(node = s_plans_node(g, nd, rank))
            || !s_int_item(st, 0, 65535, &start)
            || rdzv_plans_record(self->plans, node, g->name, rank, start, (int) count) < 0)
            break;
    }
    if (done == n)
        return 0;
    for (r = ranks->child, nd = nodes ? nodes->child : NULL; done-- > 0;
         r = r->next, nd = nd ? nd->next : NULL)
        rdzv_plans_forget(self->plans, s_plans_node(g, nd, (int) r->valuedouble), g->name,
                          (int) r->valuedouble);
    return -1;
}

static int s_apply_kv(rdzv_group_t *g, const cJSON *rec)
{
    int64_t epoch;
    const char *key = s_str(rec, "key"), *value = s_str(rec, "value");
    if (!key || !value || s_num(rec, "epoch", &epoch) < 0 || epoch != g->epoch)
        return -1;
    char *copy = strdup(value);
    if (!copy)
        return -1;
    const char *old = zhashx_lookup(g->kv, key);
    if (old)
        g->kv_bytes -= strlen(key) + strlen(old);
    g->kv_bytes += strlen(key) + strlen(value);
    zhashx_update(g->kv, key, copy);
    return 0;
}

int rdzv_core_apply(void *arg, const cJSON *rec)
{
    rdzv_core_t *self = arg;
    const char *type = s_str(rec, "t"), *name = s_str(rec, "g");
    if (!type || !name)
        return -1;
    if (strcmp(type, "group") == 0)
        return s_apply_group(self, rec, name);
    rdzv_group_t *g = rdzv_core_group(self, name);
    if (!g)
        return -1;
    if (strcmp(type, "join") == 0)
        return s_apply_join(self, g, rec);
    if (strcmp(type, "epoch") == 0)
        return s_apply_epoch(g, rec);
    if (strcmp(type, "complete") == 0)
        return s_apply_complete(g, rec);
    if (strcmp(type, "plans") == 0)
        return s_apply_plans(self, g, rec);
    /* One block per record: journals of rdzvd 0.1.0 before "plans". */
    if (strcmp(type, "plan") == 0)
        return s_apply_plan(self, g, rec);
    if (strcmp(type, "kv") == 0)
        return s_apply_kv(g, rec);
    if (strcmp(type, "delete") == 0) {
        rdzv_plans_release_group(self->plans, name);
        zhashx_delete(self->groups, name);
        return 0;
    }
    return -1;
}
