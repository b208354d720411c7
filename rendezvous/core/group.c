/* One group: made, freed, and looked into (group.h). */
#include "group.h"
#include "rdzv_proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A member's own strings; the member itself lives in its chunk. */
static void s_member_clear(rdzv_member_t *m)
{
    if (!m)
        return;
    free(m->session);
    free(m->host);
    free(m->node);
    rdzv_peer_clear(&m->peer);
}

static void s_kv_waiter_free(void **item)
{
    rdzv_kv_waiter_t *w = *item;
    if (w) {
        rdzv_peer_clear(&w->peer);
        free(w->key);
        free(w);
        *item = NULL;
    }
}

static void s_free_value(void **item)
{
    rdzv_shared_unref((rdzv_shared_t **) item);
}

void rdzv_group_destroy(rdzv_group_t **self_p)
{
    rdzv_group_t *g = *self_p;
    if (!g)
        return;
    for (int c = 0; g->member_chunks && c * RDZV_MEMBER_CHUNK < g->world; c++) {
        rdzv_member_t *chunk = g->member_chunks[c];
        for (int i = 0; chunk && i < RDZV_MEMBER_CHUNK && c * RDZV_MEMBER_CHUNK + i < g->world; i++)
            s_member_clear(&chunk[i]);
        free(chunk);
    }
    free(g->member_chunks);
    rdzv_ncclroot_destroy(&g->root);
    zhashx_destroy(&g->kv);
    zlistx_destroy(&g->kv_waiters);
    cJSON_Delete(g->nccl_ids);
    cJSON_Delete(g->rank0_ids);
    rdzv_shared_unref(&g->shared[0]);
    rdzv_shared_unref(&g->shared[1]);
    for (int i = 0; i < g->nleaving; i++)
        free(g->leaving[i].host);
    free(g->leaving);
    free(g->router);
    free(g->router_error);
    free(g->name);
    free(g);
    *self_p = NULL;
}

rdzv_group_t *rdzv_group_new(const char *name, int world, rdzv_nccl_mode_t mode,
                             int nccl_count)
{
    rdzv_group_t *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->name = strdup(name);
    g->world = world;
    g->epoch = 1;
    g->nccl_mode = mode;
    g->nccl_count = nccl_count;
    g->member_chunks = calloc((size_t) (world + RDZV_MEMBER_CHUNK - 1) / RDZV_MEMBER_CHUNK,
                              sizeof *g->member_chunks);
    g->kv = zhashx_new();
    zhashx_set_destructor(g->kv, s_free_value);
    g->kv_waiters = zlistx_new();
    zlistx_set_destructor(g->kv_waiters, s_kv_waiter_free);
    if (!g->name || !g->member_chunks || !g->kv || !g->kv_waiters)
        rdzv_group_destroy(&g);
    return g;
}

/* A chunk's length as made: the last one of a world holds what is left. */
static int s_chunk_len(int world, int c)
{
    int n = world - c * RDZV_MEMBER_CHUNK;
    return n < RDZV_MEMBER_CHUNK ? n : RDZV_MEMBER_CHUNK;
}

int rdzv_group_set_world(rdzv_group_t *g, int world, int keep,
                         void (*drop)(void *arg, const rdzv_member_t *m, int rank), void *arg)
{
    int old_chunks = (g->world + RDZV_MEMBER_CHUNK - 1) / RDZV_MEMBER_CHUNK;
    int new_chunks = (world + RDZV_MEMBER_CHUNK - 1) / RDZV_MEMBER_CHUNK;
    /* Room first, so that a failure changes nothing: the array, and the
     * chunk that was the last (it may have been made short). */
    rdzv_member_t **chunks = g->member_chunks;
    if (new_chunks > old_chunks) {
        chunks = realloc(g->member_chunks, (size_t) new_chunks * sizeof *chunks);
        if (!chunks)
            return -1;
        memset(chunks + old_chunks, 0, (size_t) (new_chunks - old_chunks) * sizeof *chunks);
        g->member_chunks = chunks;
    }
    int last = (world < g->world ? world : g->world) - 1;
    int c = last >= 0 ? last / RDZV_MEMBER_CHUNK : -1;
    if (c >= 0 && chunks[c] && s_chunk_len(world, c) > s_chunk_len(g->world, c)) {
        rdzv_member_t *grown = realloc(chunks[c], RDZV_MEMBER_CHUNK * sizeof *grown);
        if (!grown)
            return -1;
        int had = s_chunk_len(g->world, c);
        memset(grown + had, 0, (size_t) (RDZV_MEMBER_CHUNK - had) * sizeof *grown);
        chunks[c] = grown;
    }
    rdzv_member_t *m;
    for (int r = keep < world ? keep : world; r < g->world && (m = rdzv_group_next(g, &r)); r++) {
        drop(arg, m, r);
        s_member_clear(m);
        memset(m, 0, sizeof *m);
    }
    for (int k = new_chunks; k < old_chunks; k++) {
        free(chunks[k]);
        chunks[k] = NULL;
    }
    g->world = world;
    return 0;
}

rdzv_leaving_t *rdzv_group_leaving_find(rdzv_group_t *g, int rank)
{
    for (int i = 0; i < g->nleaving; i++)
        if (g->leaving[i].rank == rank)
            return &g->leaving[i];
    return NULL;
}

int rdzv_group_leaving_add(rdzv_group_t *g, int rank, const char *host, int api_port,
                           int64_t heard_ms)
{
    char *copy = strdup(host);
    if (!copy)
        return -1;
    rdzv_leaving_t *l = rdzv_group_leaving_find(g, rank);
    if (!l) {
        rdzv_leaving_t *grown = realloc(g->leaving, (size_t) (g->nleaving + 1) * sizeof *grown);
        if (!grown) {
            free(copy);
            return -1;
        }
        g->leaving = grown;
        l = &g->leaving[g->nleaving++];
        l->host = NULL;
    }
    free(l->host);
    *l = (rdzv_leaving_t) { .rank = rank, .host = copy, .api_port = api_port,
                            .heard_ms = heard_ms };
    return 0;
}

void rdzv_group_leaving_filter(rdzv_group_t *g, bool (*keep)(const rdzv_leaving_t *l, void *arg),
                               void *arg)
{
    int n = 0;
    for (int i = 0; i < g->nleaving; i++) {
        if (keep(&g->leaving[i], arg))
            g->leaving[n++] = g->leaving[i];
        else
            free(g->leaving[i].host);
    }
    g->nleaving = n;
}

const char *rdzv_group_kv(const rdzv_group_t *g, const char *key)
{
    const rdzv_shared_t *v = zhashx_lookup(g->kv, key);
    return v ? v->text : NULL;
}

rdzv_member_t *rdzv_group_member(rdzv_group_t *g, int rank)
{
    int c = rank / RDZV_MEMBER_CHUNK;
    if (!g->member_chunks[c]) {
        int n = g->world - c * RDZV_MEMBER_CHUNK;
        g->member_chunks[c] = calloc((size_t) (n < RDZV_MEMBER_CHUNK ? n : RDZV_MEMBER_CHUNK),
                                     sizeof **g->member_chunks);
        if (!g->member_chunks[c])
            return NULL;
    }
    return &g->member_chunks[c][rank % RDZV_MEMBER_CHUNK];
}

rdzv_member_t *rdzv_group_next(const rdzv_group_t *g, int *r)
{
    while (*r < g->world) {
        rdzv_member_t *chunk = g->member_chunks[*r / RDZV_MEMBER_CHUNK];
        if (!chunk) {
            *r = (*r / RDZV_MEMBER_CHUNK + 1) * RDZV_MEMBER_CHUNK;
            continue;
        }
        rdzv_member_t *m = &chunk[*r % RDZV_MEMBER_CHUNK];
        if (m->session)
            return m;
        (*r)++;
    }
    return NULL;
}

cJSON *rdzv_group_missing(const rdzv_group_t *g, int max)
{
    cJSON *out = cJSON_CreateArray();
    for (int r = 0; out && r < g->world && cJSON_GetArraySize(out) < max; r++) {
        const rdzv_member_t *m = rdzv_group_at(g, r);
        if (!m || m->epoch != g->epoch)
            cJSON_AddItemToArray(out, cJSON_CreateNumber(r));
    }
    return out;
}

char *rdzv_group_timeout_reply(const rdzv_group_t *g, int64_t req_id)
{
    enum { NAMED = 8 };
    cJSON *missing = rdzv_group_missing(g, RDZV_STATUS_MISSING_MAX);
    int count = g->world - g->joined, named = 0;
    char ranks[160] = "";
    for (const cJSON *r = missing ? missing->child : NULL; r && named < NAMED; r = r->next) {
        size_t used = strlen(ranks);
        snprintf(ranks + used, sizeof ranks - used, "%s%d", named ? ", " : "", r->valueint);
        named++;
    }
    char more[48] = "";
    if (count > named)
        snprintf(more, sizeof more, " and %d more", count - named);
    char msg[320];
    snprintf(msg, sizeof msg, "group %s: %d of %d ranks joined epoch %lld, waiting for rank%s "
             "%s%s", g->name, g->joined, g->world, (long long) g->epoch, count > 1 ? "s" : "",
             ranks, more);
    cJSON *detail = cJSON_CreateObject();
    if (detail) {
        cJSON_AddNumberToObject(detail, "joined", g->joined);
        cJSON_AddNumberToObject(detail, "world", g->world);
        cJSON_AddNumberToObject(detail, "missing_count", count);
        if (missing)
            cJSON_AddItemToObject(detail, "missing", missing);
        missing = NULL;
    }
    cJSON_Delete(missing);
    return rdzv_reply_error_detail(req_id, RDZV_E_TIMEOUT, msg, detail);
}

/* An open-addressing set of a group's nodes, by their plans entry. */
typedef struct {
    const void *node;
    int count, index;
} s_node_slot_t;

rdzv_local_t *rdzv_group_local_ranks(const rdzv_group_t *g)
{
    size_t cap = 16;
    while (cap < (size_t) g->world * 2)
        cap *= 2;
    rdzv_local_t *local = malloc((size_t) g->world * sizeof *local);
    s_node_slot_t *t = calloc(cap, sizeof *t);
    int *slot_of = malloc((size_t) g->world * sizeof *slot_of);
    if (!local || !t || !slot_of) {
        free(local);
        free(t);
        free(slot_of);
        return NULL;
    }
    int nodes = 0;
    for (int r = 0; r < g->world; r++) {
        const rdzv_member_t *m = rdzv_group_at(g, r);
        const void *key = m ? (const void *) m->plan_node : NULL;
        size_t i = ((uintptr_t) key >> 4) * 0x9E3779B97F4A7C15ull & (cap - 1);
        while (t[i].count && t[i].node != key)
            i = (i + 1) & (cap - 1);
        if (t[i].count == 0)
            t[i] = (s_node_slot_t) { .node = key, .index = nodes++ };
        local[r].local_rank = t[i].count++;
        slot_of[r] = (int) i;
    }
    for (int r = 0; r < g->world; r++) {
        local[r].local_world = t[slot_of[r]].count;
        local[r].group_rank = t[slot_of[r]].index;
        local[r].group_world = nodes;
    }
    free(t);
    free(slot_of);
    return local;
}
