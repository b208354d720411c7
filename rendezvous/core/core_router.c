/* What the router reconciler (rendezvous/router/) reads from the core and
 * tells it back (core.h, "Routers"). Registration is soft state: the next
 * reconcile after a restart or a takeover finds it again at the router. */
#include "core_state.h"
#include "documents.h"

#include <stdlib.h>
#include <string.h>

cJSON *rdzv_core_routed_json(rdzv_core_t *self, int64_t now_ms)
{
    pthread_mutex_lock(&self->lock);
    /* A rank's --dead-after counts from the load until it is heard from
     * (state.h): from the first request, or from this first look, which
     * may come before any request after a restart or a takeover. */
    if (now_ms > 0 && !self->state.loaded_ms)
        self->state.loaded_ms = now_ms;
    cJSON *groups = rdzv_state_routed(&self->state, now_ms);
    pthread_mutex_unlock(&self->lock);
    return groups;
}

static bool s_listed(const int *ranks, int n, int rank)
{
    for (int i = 0; i < n; i++)
        if (ranks[i] == rank)
            return true;
    return false;
}

/* A leaving rank stays until the router is found without it. */
static bool s_still_listed(const rdzv_leaving_t *l, void *arg)
{
    (void) arg;
    return !l->looked || l->registered;
}

void rdzv_core_router_report(rdzv_core_t *self, const rdzv_router_report_t *rep)
{
    pthread_mutex_lock(&self->lock);
    rdzv_group_t *g = rdzv_state_group(&self->state, rep->group);
    /* The group may have gone, or moved to another router, while the
     * reconcile ran: what it found then is of no use now. */
    if (g && g->router && strcmp(g->router, rep->router) == 0) {
        rdzv_member_t *m;
        for (int r = 0; rep->known && (m = rdzv_group_next(g, &r)); r++)
            m->registered = m->draining = false;
        for (int i = 0; rep->known && i < rep->nregistered; i++) {
            int r = rep->registered[i];
            if (r >= 0 && r < g->world && (m = rdzv_group_at(g, r)))
                m->registered = true;
        }
        for (int i = 0; rep->known && i < rep->ndraining; i++) {
            int r = rep->draining[i];
            if (r >= 0 && r < g->world && (m = rdzv_group_at(g, r)))
                m->draining = true;
        }
        for (int i = 0; rep->known && i < g->nleaving; i++) {
            rdzv_leaving_t *l = &g->leaving[i];
            l->looked = true;
            l->registered = s_listed(rep->registered, rep->nregistered, l->rank)
                            || s_listed(rep->draining, rep->ndraining, l->rank);
        }
        rdzv_group_leaving_filter(g, s_still_listed, NULL);
        free(g->router_error);
        g->router_error = rep->error ? strdup(rep->error) : NULL;
        if (rep->reason >= 0 && rep->reason < RDZV_ROUTER_ERR_REASONS)
            g->router_errors[rep->reason]++;
    }
    pthread_mutex_unlock(&self->lock);
}
