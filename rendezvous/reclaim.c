#include "reclaim.h"
#include "log.h"
#include "records.h"
#include "rdzv_proto.h"

#include <stdlib.h>
#include <string.h>

bool rdzv_reclaim_candidate(const rdzv_group_t *g)
{
    return !g->complete && g->epoch <= 1 && g->waiting == 0 && zlistx_size(g->kv_waiters) == 0;
}

static bool s_fits(const rdzv_batch_t *self, rdzv_reclaim_need_t need)
{
    const rdzv_limits_t *l = &self->cfg->limits;
    return self->state->ranks + need.ranks <= l->max_ranks
           && (!need.group || (int) zhashx_size(self->state->groups) < l->max_groups)
           && self->state->member_bytes + need.member_bytes <= l->max_member_bytes;
}

/* Least recently heard from first; never heard from since a load counts
 * as oldest. */
static int s_by_heard(const void *a, const void *b)
{
    int64_t x = (*(rdzv_group_t *const *) a)->heard_ms, y = (*(rdzv_group_t *const *) b)->heard_ms;
    return x < y ? -1 : x > y;
}

bool rdzv_reclaim_room(rdzv_batch_t *self, rdzv_reclaim_need_t need, const rdzv_group_t *keep)
{
    if (s_fits(self, need))
        return true;
    zhashx_t *groups = self->state->groups;
    size_t n = 0;
    rdzv_group_t **v = malloc(zhashx_size(groups) * sizeof *v + 1);
    if (!v)
        return false;
    for (rdzv_group_t *g = zhashx_first(groups); g; g = zhashx_next(groups))
        if (g != keep && rdzv_reclaim_candidate(g))
            v[n++] = g;
    qsort(v, n, sizeof *v, s_by_heard);
    for (size_t i = 0; i < n && !s_fits(self, need); i++) {
        char name[RDZV_MAX_NAME + 1];
        snprintf(name, sizeof name, "%s", v[i]->name);
        int world = v[i]->world, joined = v[i]->joined;
        if (rdzv_batch_record(self, rdzv_record_delete(name)) < 0)
            break;
        self->metrics->groups_reclaimed++;
        rdzv_core_log("reclaim", "group=%s world=%d joined=%d reason=\"a new group or rank "
                      "needs its place under rdzvd's limits, and nobody waits in it\"",
                      name, world, joined);
    }
    free(v);
    return s_fits(self, need);
}
