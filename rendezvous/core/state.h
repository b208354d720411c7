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
#include "nccl_mode.h"
#include "ncclroot.h"
#include "plan.h"
#include "reply.h"

#define RDZV_MEMBER_CHUNK 64

typedef struct {
    char *session, *host, *node;
    rdzv_plan_node_t *plan_node; /* node's entry in the plans */
    int64_t epoch;               /* last epoch this rank joined; 0: none */
    int64_t last_seen_ms;
    int64_t joined_at_ms;        /* when this rank joined the forming epoch */
    bool waiting;                /* a join of this rank awaits the epoch */
    bool want_members;
    rdzv_peer_t peer;
    int64_t deadline_ms;
} rdzv_member_t;

typedef struct {
    rdzv_peer_t peer;
    char *key;
    int64_t deadline_ms;
} rdzv_kv_waiter_t;

typedef struct {
    char *name;
    int world;
    int64_t epoch;
    bool complete;
    int joined;                  /* ranks that joined the current epoch */
    int waiting;                 /* members with a join waiting */
    rdzv_nccl_mode_t nccl_mode;
    int nccl_count;              /* IDs per epoch */
    cJSON *nccl_ids;             /* this epoch's IDs (hex strings), NULL until complete */
    cJSON *rank0_ids;            /* rank0 mode: what rank 0 brought to this epoch */
    rdzv_ncclroot_t *root;       /* the helper hosting server-made roots */
    int64_t root_done_epoch;     /* the last epoch whose every rank reached its root */
    /* ... or whose root was retired after --nccl-root-timeout with ranks
     * still to come: the epoch stands, its server-made ID no longer works. */
    bool root_retired;
    /* The epoch's server-made root died with an earlier rdzvd before every
     * rank reached it: the next rank to ask for the IDs moves the group on. */
    bool root_lost;
    /* The members, RDZV_MEMBER_CHUNK ranks to a block made when the first
     * of them joins: a group costs a pointer per RDZV_MEMBER_CHUNK ranks of
     * its world until ranks join (a world of 65536 announced by one rank is
     * 8 KiB, not a slot per rank), and a release walks every member in rank
     * order as a stream, not a scatter. A member exists once it has a
     * session (rdzv_group_at). */
    rdzv_member_t **member_chunks;
    /* The part of every rank's assignment that is the same for all ranks of
     * the epoch, formatted once: with and without the members list. */
    rdzv_shared_t *shared[2];
    /* key -> value (rdzv_shared_t: a compaction in flight holds references
     * to the values it writes instead of copies), current epoch only. */
    zhashx_t *kv;
    zlistx_t *kv_waiters;        /* rdzv_kv_waiter_t */
    uint64_t kv_bytes;           /* keys + values of the current epoch */
    uint64_t member_bytes;       /* its members' strings (rdzv_member_text_bytes) */
    int64_t heard_ms;            /* last join or heartbeat (memory only; 0 after a load) */
    bool overlaps_due;           /* released since the overlaps were logged */
} rdzv_group_t;

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
/* key's value in g's current epoch, NULL if none. */
const char *rdzv_group_kv(const rdzv_group_t *g, const char *key);

/* A new group, held by the state; NULL if the name is taken or out of
 * memory. */
rdzv_group_t *rdzv_state_add_group(rdzv_state_t *self, const char *name, int world,
                                   rdzv_nccl_mode_t mode, int nccl_count);
/* Forgets the group and its port blocks. */
void rdzv_state_remove_group(rdzv_state_t *self, const char *name);

/* rank's slot in g, made (zeroed, in its chunk) if it has none; NULL out
 * of memory. It is a member once its session is set. */
rdzv_member_t *rdzv_group_member(rdzv_group_t *g, int rank);

/* Where rank's member of g is, or NULL if its chunk was never made; reads
 * no member, so it can name one to prefetch. */
static inline rdzv_member_t *rdzv_group_slot(const rdzv_group_t *g, int rank)
{
    rdzv_member_t *chunk = g->member_chunks[rank / RDZV_MEMBER_CHUNK];
    return chunk ? &chunk[rank % RDZV_MEMBER_CHUNK] : NULL;
}

/* rank's member of g, NULL if that rank never joined. */
/* When m was last heard from, as far as this rdzvd knows (loaded_ms). */
static inline int64_t rdzv_member_seen(const rdzv_state_t *st, const rdzv_member_t *m)
{
    return m->last_seen_ms > st->loaded_ms ? m->last_seen_ms : st->loaded_ms;
}

static inline rdzv_member_t *rdzv_group_at(const rdzv_group_t *g, int rank)
{
    rdzv_member_t *m = rdzv_group_slot(g, rank);
    return m && m->session ? m : NULL;
}

/* The first member of g at rank *r or above, *r set to its rank; NULL when
 * there is none. Empty chunks are skipped whole:
 *     for (int r = 0; (m = rdzv_group_next(g, &r)); r++) ... */
rdzv_member_t *rdzv_group_next(const rdzv_group_t *g, int *r);

#endif
