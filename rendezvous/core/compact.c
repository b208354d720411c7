/* Compaction's records: the few that rebuild the current state, so replay
 * time and disk stay bounded however long rdzvd runs. They are the ones the
 * handlers and the release write (records.c), replayed by the same apply
 * functions; core.c writes them in place of the journal. */
#include "compact.h"
#include "records.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A group's blocks, gathered for one "plans" record like a release's, with
 * each block's node named: a block stays on the node it was laid out on
 * even after its rank rejoined from another. */
typedef struct {
    int *ranks, *starts, n, cap, count;
    const char **nodes;
    bool failed;
} s_blocks_t;

static void s_add_block(void *arg, const char *node, int rank, int start, int count)
{
    s_blocks_t *b = arg;
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 64;
        int *ranks = realloc(b->ranks, (size_t) cap * sizeof *ranks);
        if (ranks)
            b->ranks = ranks;
        int *starts = realloc(b->starts, (size_t) cap * sizeof *starts);
        if (starts)
            b->starts = starts;
        const char **nodes = realloc(b->nodes, (size_t) cap * sizeof *nodes);
        if (nodes)
            b->nodes = nodes;
        if (!ranks || !starts || !nodes) {
            b->failed = true;
            return;
        }
        b->cap = cap;
    }
    /* The node's name lives only for the call. */
    if (!(b->nodes[b->n] = strdup(node))) {
        b->failed = true;
        return;
    }
    b->ranks[b->n] = rank;
    b->starts[b->n] = start;
    b->count = count;
    b->n++;
}

/* Appends rec to records; false (rec freed) when it is NULL. */
static bool s_add(cJSON *records, cJSON *rec)
{
    return rec && cJSON_AddItemToArray(records, rec);
}

static bool s_add_plans(const rdzv_state_t *st, const rdzv_group_t *g, cJSON *records)
{
    s_blocks_t b = { 0 };
    rdzv_plans_foreach(st->plans, g->name, s_add_block, &b);
    bool ok = !b.failed && (b.n == 0 || s_add(records, rdzv_record_plans(
                  g->name, b.count, b.ranks, b.starts, b.nodes, b.n)));
    for (int i = 0; i < b.n; i++)
        free((char *) b.nodes[i]);
    free(b.ranks);
    free(b.starts);
    free(b.nodes);
    return ok;
}

/* values: where to hold a reference to each value a KV record points at. */
static bool s_add_group(const rdzv_state_t *st, const rdzv_group_t *g, cJSON *records,
                        rdzv_snapshot_t *snap)
{
    bool ok = s_add(records, rdzv_record_group(g->name, g->world, g->nccl_mode, g->nccl_count));
    /* An epoch a resize made is written as that resize (of the world it
     * already has), so that a rank resuming with its old world is still
     * taken after a compaction and a restart. */
    bool resized = g->resized_at == g->epoch && g->epoch > 1;
    if (ok && g->epoch > 1 + resized)
        ok = s_add(records, rdzv_record_epoch(g->name, g->epoch - resized));
    if (ok && resized)
        ok = s_add(records, rdzv_record_resize(g->name, g->world, g->epoch, RDZV_RESIZE_KEEP));
    if (ok && g->router)
        ok = s_add(records, rdzv_record_router(g->name, g->router));
    ok = ok && s_add_plans(st, g, records);
    const rdzv_member_t *m;
    for (int r = 0; ok && (m = rdzv_group_next(g, &r)); r++)
        ok = s_add(records, rdzv_record_join(g->name, r, m->host, m->node, m->session, m->epoch));
    if (ok && g->complete)
        ok = s_add(records, rdzv_record_complete(g->name, g->epoch, g->nccl_ids
                                                 ? cJSON_Duplicate(g->nccl_ids, 1) : NULL));
    if (ok && g->complete && g->root_done_epoch == g->epoch)
        ok = s_add(records, rdzv_record_root_done(g->name, g->epoch, g->root_retired));
    for (rdzv_shared_t *v = zhashx_first(g->kv); ok && v; v = zhashx_next(g->kv)) {
        ok = s_add(records, rdzv_record_kv_ref(g->name, g->epoch, zhashx_cursor(g->kv), v->text));
        if (ok)
            snap->values[snap->nvalues++] = rdzv_shared_ref(v);
    }
    return ok;
}

int rdzv_compact_snapshot(const rdzv_state_t *st, rdzv_snapshot_t *out)
{
    size_t values = 0;
    for (rdzv_group_t *g = zhashx_first(st->groups); g; g = zhashx_next(st->groups))
        values += zhashx_size(g->kv);
    *out = (rdzv_snapshot_t) { .records = cJSON_CreateArray(),
                               .values = malloc((values ? values : 1) * sizeof *out->values) };
    bool ok = out->records && out->values;
    for (rdzv_group_t *g = zhashx_first(st->groups); ok && g; g = zhashx_next(st->groups))
        ok = s_add_group(st, g, out->records, out);
    if (!ok) {
        cJSON_Delete(out->records);
        out->records = NULL;
        rdzv_snapshot_release(out);
        return -1;
    }
    return 0;
}

void rdzv_snapshot_release(void *arg)
{
    rdzv_snapshot_t *snap = arg;
    for (size_t i = 0; i < snap->nvalues; i++)
        rdzv_shared_unref(&snap->values[i]);
    free(snap->values);
    snap->values = NULL;
    snap->nvalues = 0;
}
