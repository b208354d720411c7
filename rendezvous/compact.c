/* Compaction: the journal rewritten as the few records that rebuild the
 * current state, so replay time and disk stay bounded however long rdzvd
 * runs. The records are the same kinds the handlers write, replayed by the
 * same apply functions. */
#include "core.h"

#include <stdio.h>

static cJSON *s_rec(const char *type, const rdzv_group_t *g)
{
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddStringToObject(rec, "t", type);
    cJSON_AddStringToObject(rec, "g", g->name);
    return rec;
}

typedef struct {
    cJSON *records;
    const rdzv_group_t *group;
} s_plan_ctx_t;

static void s_add_plan(void *arg, const char *node, int rank, int start, int count)
{
    s_plan_ctx_t *ctx = arg;
    cJSON *rec = s_rec("plan", ctx->group);
    cJSON_AddNumberToObject(rec, "rank", rank);
    cJSON_AddStringToObject(rec, "node", node);
    cJSON_AddNumberToObject(rec, "start", start);
    cJSON_AddNumberToObject(rec, "count", count);
    cJSON_AddItemToArray(ctx->records, rec);
}

static void s_add_group(rdzv_core_t *self, const rdzv_group_t *g, cJSON *records)
{
    cJSON *rec = s_rec("group", g);
    cJSON_AddNumberToObject(rec, "world", g->world);
    cJSON_AddStringToObject(rec, "nccl", rdzv_nccl_mode_name(g->nccl_mode));
    cJSON_AddNumberToObject(rec, "nccl_ids", g->nccl_count);
    cJSON_AddItemToArray(records, rec);
    if (g->epoch > 1) {
        rec = s_rec("epoch", g);
        cJSON_AddNumberToObject(rec, "epoch", (double) g->epoch);
        cJSON_AddItemToArray(records, rec);
    }
    s_plan_ctx_t ctx = { .records = records, .group = g };
    rdzv_plans_foreach(self->plans, g->name, s_add_plan, &ctx);
    for (int r = 0; r < g->world; r++) {
        const rdzv_member_t *m = g->members[r];
        if (!m)
            continue;
        rec = s_rec("join", g);
        cJSON_AddNumberToObject(rec, "rank", r);
        cJSON_AddStringToObject(rec, "host", m->host);
        cJSON_AddStringToObject(rec, "node", m->node);
        cJSON_AddStringToObject(rec, "session", m->session);
        cJSON_AddNumberToObject(rec, "epoch", (double) m->epoch);
        cJSON_AddItemToArray(records, rec);
    }
    if (g->complete) {
        rec = s_rec("complete", g);
        cJSON_AddNumberToObject(rec, "epoch", (double) g->epoch);
        cJSON_AddItemToObject(rec, "nccl_ids", g->nccl_ids ? cJSON_Duplicate(g->nccl_ids, 1)
                                                           : cJSON_CreateArray());
        cJSON_AddItemToArray(records, rec);
    }
    for (const char *v = zhashx_first(g->kv); v; v = zhashx_next(g->kv)) {
        rec = s_rec("kv", g);
        cJSON_AddNumberToObject(rec, "epoch", (double) g->epoch);
        cJSON_AddStringToObject(rec, "key", zhashx_cursor(g->kv));
        cJSON_AddStringToObject(rec, "value", v);
        cJSON_AddItemToArray(records, rec);
    }
}

int rdzv_core_compact(rdzv_core_t *self)
{
    uint64_t before = rdzv_journal_size(self->journal);
    cJSON *records = cJSON_CreateArray();
    for (rdzv_group_t *g = zhashx_first(self->groups); g; g = zhashx_next(self->groups))
        s_add_group(self, g, records);
    int rc = rdzv_journal_compact(self->journal, records);
    rdzv_core_log("journal", "compaction %s: %llu bytes -> %llu bytes, %d records",
                  rc == 0 ? "done" : "FAILED (kept the old journal)",
                  (unsigned long long) before,
                  (unsigned long long) rdzv_journal_size(self->journal),
                  cJSON_GetArraySize(records));
    cJSON_Delete(records);
    if (rc == 0) {
        self->compacted_size = rdzv_journal_size(self->journal);
        self->metrics.compactions++;
    }
    return rc;
}

bool rdzv_core_wants_compaction(const rdzv_core_t *self)
{
    /* The file's own size: journal offsets (rdzv_journal_written) only grow
     * across compactions, so they would call for one at every commit. */
    uint64_t size = rdzv_journal_size(self->journal);
    return self->cfg.compact_bytes && size > self->cfg.compact_bytes
           && size > 2 * self->compacted_size;
}
