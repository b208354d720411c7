/* What rdzvd knows: its groups, their members and the port plans. Changed
 * only by applying journal records (apply.c), live and at replay alike, and
 * by the waits a batch sets on members (handlers.c, release.c). Knows
 * nothing of sockets, the journal file or replies. */
#ifndef RDZV_STATE_H
#define RDZV_STATE_H

#include <cjson/cJSON.h>
#include <czmq.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "group.h"
#include "plan.h"

typedef struct {
    const rdzv_config_t *cfg;
    zhashx_t *groups;            /* name -> rdzv_group_t */
    rdzv_plans_t *plans;
    uint64_t kv_bytes;           /* every group's kv_bytes, summed */
    int64_t ranks;               /* every group's world, summed */
    uint64_t member_bytes;       /* every group's member_bytes, summed */
    /* host address -> the node names ranks joined with from it (a zhashx
     * used as a set): two nodes of one address share one network namespace. */
    zhashx_t *host_nodes;
    int shared_hosts;            /* addresses with more than one node */
    /* When this rdzvd first handled a request (0 until then): members
     * loaded from the journal count as heard from then, so a restart never
     * makes a live rank look dead. */
    int64_t loaded_ms;
} rdzv_state_t;

/* An empty state under cfg (which must outlive it). 0, or -1 (a bad port
 * range, or out of memory). */
int rdzv_state_init(rdzv_state_t *self, const rdzv_config_t *cfg);
void rdzv_state_clear(rdzv_state_t *self);
rdzv_group_t *rdzv_state_group(const rdzv_state_t *self, const char *name);
/* What a member's host, node and session strings cost in memory, as the
 * allocator hands them out (a header and 16-byte steps); NULLs cost 0. */
uint64_t rdzv_member_text_bytes(const char *host, const char *node, const char *session);
/* Records that ranks joined from host with node; 0 or -1. */
int rdzv_state_host_node(rdzv_state_t *self, const char *host, const char *node);
/* Joins and kv waits pending now. */
int rdzv_state_pending(const rdzv_state_t *self);
/* Applies one journal record (apply.c): the replay's callback, and what
 * every live change goes through after it is journaled. 0, or -1 for a
 * record that does not fit the state (nothing changed then). */
int rdzv_state_apply(void *self, const cJSON *record);

/* A new group, held by the state; NULL if the name is taken or out of
 * memory. */
rdzv_group_t *rdzv_state_add_group(rdzv_state_t *self, const char *name, int world,
                                   rdzv_nccl_mode_t mode, int nccl_count);
/* Forgets the group and its port blocks. */
void rdzv_state_remove_group(rdzv_state_t *self, const char *name);

/* A group's ranks as their heartbeats show them (documents.c, /metrics). */
typedef enum {
    RDZV_GROUP_FORMING, RDZV_GROUP_COMPLETE, RDZV_GROUP_SERVING, RDZV_GROUP_DEGRADED,
} rdzv_group_state_t;
typedef struct {
    rdzv_group_state_t state;
    int live, serving;           /* ranks of the epoch alive, and alive and serving */
} rdzv_serving_t;
rdzv_serving_t rdzv_state_serving(const rdzv_state_t *st, const rdzv_group_t *g,
                                  int64_t now_ms);

/* When m was last heard from, as far as this rdzvd knows (loaded_ms). */
static inline int64_t rdzv_member_seen(const rdzv_state_t *st, const rdzv_member_t *m)
{
    return m->last_seen_ms > st->loaded_ms ? m->last_seen_ms : st->loaded_ms;
}

/* Heard from within --dead-after. */
static inline bool rdzv_member_alive(const rdzv_state_t *st, const rdzv_member_t *m,
                                     int64_t now_ms)
{
    return now_ms - rdzv_member_seen(st, m) < st->cfg->dead_after_ms;
}

#endif
