/* One group: its members (made a chunk at a time), its KV and waiters, and
 * what can be said of it alone: who is missing, where each rank stands
 * among its node's ranks, the reply to a join that waited in vain. The
 * set of groups and the port plans are the state's (state.h). */
#ifndef RDZV_GROUP_H
#define RDZV_GROUP_H

#include <cjson/cJSON.h>
#include <czmq.h>
#include <stdbool.h>
#include <stdint.h>

#include "nccl_mode.h"
#include "ncclroot.h"
#include "plan.h"
#include "rdzv_proto.h"
#include "reply.h"
#include "router_url.h"

#define RDZV_MEMBER_CHUNK 64

typedef struct {
    char *session, *host, *node;
    rdzv_plan_node_t *plan_node; /* node's entry in the plans */
    int64_t epoch;               /* last epoch this rank joined; 0: none */
    int64_t last_seen_ms;
    /* The engine's health as the rank's heartbeats last said it
     * (RDZV_HEALTH_*), and whether it served in this epoch: soft state,
     * never journaled, reset by a join and rebuilt from heartbeats after a
     * restart or a takeover. */
    uint8_t health;
    bool served;
    /* The group's router lists this rank as a ready worker, as the last
     * reconcile found it (rendezvous/router/): soft state too. */
    bool registered;
    bool draining;               /* ... or still lists it, draining, on its way out */
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

/* A rank a shrink dropped from a group with a router: its engine goes on
 * answering what the router still sends it, and its agent waits for the
 * router to let it go (drained, then removed) before stopping it, so that
 * a shrink loses no request. Soft state, like registration: made by the
 * resize's apply, dropped once a reconcile finds the router without it. */
typedef struct {
    int rank;
    char *host;
    int api_port;
    int64_t heard_ms;            /* its last heartbeat; the shrink counts as one */
    bool looked;                 /* a reconcile has read the router since the shrink */
    bool registered;             /* ... and found it listed, ready or draining */
} rdzv_leaving_t;

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
    /* The router the group's serving endpoints register at (journaled),
     * NULL for none; and what the last reconcile with it said: NULL when
     * it went through, else why not, and its failures by reason (memory
     * only, rebuilt by the next reconcile). */
    char *router;
    char *router_error;
    uint64_t router_errors[RDZV_ROUTER_ERR_REASONS];
    /* The epoch the last resize made (journaled as the resize record, kept
     * by compaction while it is the current epoch); 0 for none. */
    int64_t resized_at;
    rdzv_leaving_t *leaving;     /* nleaving ranks a shrink dropped, on their way out */
    int nleaving;
    bool overlaps_due;           /* released since the overlaps were logged */
} rdzv_group_t;

/* A group of world ranks at epoch 1, none joined yet; NULL out of memory. */
rdzv_group_t *rdzv_group_new(const char *name, int world, rdzv_nccl_mode_t mode,
                             int nccl_count);
/* Frees *self_p with its members, KV and waiters, and NULLs it; NULL is
 * fine. */
void rdzv_group_destroy(rdzv_group_t **self_p);

/* g's world becomes world: the members of ranks at or above keep (at most
 * world) are handed to drop (before their strings are freed) and go; the
 * others stay where they are. 0, or -1 out of memory (g unchanged). */
int rdzv_group_set_world(rdzv_group_t *g, int world, int keep,
                         void (*drop)(void *arg, const rdzv_member_t *m, int rank), void *arg);

/* Adds rank to g's leaving ranks (its entry renewed if it is there); -1
 * out of memory. */
int rdzv_group_leaving_add(rdzv_group_t *g, int rank, const char *host, int api_port,
                           int64_t heard_ms);
/* rank's entry among g's leaving ranks, NULL if none. */
rdzv_leaving_t *rdzv_group_leaving_find(rdzv_group_t *g, int rank);
/* Drops the leaving ranks for which keep(entry, arg) is false. */
void rdzv_group_leaving_filter(rdzv_group_t *g, bool (*keep)(const rdzv_leaving_t *l, void *arg),
                               void *arg);

/* key's value in g's current epoch, NULL if none. */
const char *rdzv_group_kv(const rdzv_group_t *g, const char *key);

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
static inline rdzv_member_t *rdzv_group_at(const rdzv_group_t *g, int rank)
{
    rdzv_member_t *m = rdzv_group_slot(g, rank);
    return m && m->session ? m : NULL;
}

/* The first member of g at rank *r or above, *r set to its rank; NULL when
 * there is none. Empty chunks are skipped whole:
 *     for (int r = 0; (m = rdzv_group_next(g, &r)); r++) ... */
rdzv_member_t *rdzv_group_next(const rdzv_group_t *g, int *r);

/* The first max ranks (in rank order) that have not joined g's current
 * epoch, as an array; status lists RDZV_STATUS_MISSING_MAX of them beside
 * the count. NULL out of memory. */
#define RDZV_STATUS_MISSING_MAX 64
cJSON *rdzv_group_missing(const rdzv_group_t *g, int max);

/* Each rank's place among the ranks of its node (the members with one
 * plan_node), and its node's among the group's nodes, numbered by each
 * node's lowest rank: torchrun's LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK
 * and GROUP_WORLD_SIZE. */
typedef struct {
    int local_rank, local_world;
    int group_rank, group_world;
} rdzv_local_t;
/* One pass over the members; world entries, malloc'd, NULL out of memory. */
rdzv_local_t *rdzv_group_local_ranks(const rdzv_group_t *g);

/* The timeout reply to a join of g that waited in vain: how many ranks
 * joined, and which are missing (the first 8 in the message, the first
 * RDZV_STATUS_MISSING_MAX in "missing"); malloc'd, NULL out of memory. */
char *rdzv_group_timeout_reply(const rdzv_group_t *g, int64_t req_id);

#endif
