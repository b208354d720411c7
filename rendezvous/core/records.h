/* Journal records: the one place that knows their kinds and fields. Every
 * writer (handlers, release, compaction) builds its records here, and
 * replay reads them back here (rdzv_record_read), so a record can only be
 * written the way it is read. Each is a JSON object {"t": KIND, "g": GROUP,
 * ...}; docs/architecture.md lists them. */
#ifndef RDZV_RECORDS_H
#define RDZV_RECORDS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "nccl_mode.h"

typedef enum {
    RDZV_REC_GROUP,              /* a group is made: world, NCCL mode and count */
    RDZV_REC_JOIN,               /* a rank joined an epoch: host, node, session */
    RDZV_REC_EPOCH,              /* the group moved to a new epoch */
    RDZV_REC_COMPLETE,           /* the epoch formed: its NCCL IDs */
    RDZV_REC_PLANS,              /* port blocks laid out, as parallel arrays */
    RDZV_REC_PLAN,               /* one block (journals of rdzvd 0.1.0 before "plans") */
    RDZV_REC_KV,                 /* a key put in an epoch */
    RDZV_REC_DELETE,             /* the group was deleted */
    RDZV_REC_ROOT_DONE,          /* every rank reached the epoch's server-made NCCL root */
    RDZV_REC_ROUTER,             /* the group names the router its endpoints register at */
    RDZV_REC_RESIZE,             /* the group's world changed, at a new epoch */
} rdzv_record_kind_t;

/* A record as read: every field present with its type; ranges that depend
 * on the group (rank < world, epoch order) are the applier's to check. The
 * strings and arrays point into the cJSON record. */
/* What a resize record does with the ranks (docs/protocol.md,
 * "group_resize"): those below the new world keep their members and plans
 * in the next epoch; none does (a fresh round: every rank joins anew); or
 * the forming epoch closes at the ranks 0..world-1 that joined it, the
 * epoch unchanged. Written as the record's "how": absent, "fresh",
 * "close". */
typedef enum { RDZV_RESIZE_KEEP, RDZV_RESIZE_FRESH, RDZV_RESIZE_CLOSE } rdzv_resize_how_t;

typedef struct {
    rdzv_record_kind_t kind;
    const char *group;
    union {
        struct { int64_t world, nccl_ids; rdzv_nccl_mode_t nccl; } group;
        struct { int64_t rank, epoch; const char *host, *node, *session; } join;
        /* epoch, complete, root_done (retired: the root was stopped with
         * ranks still to come, rather than reached by all) */
        struct { int64_t epoch; const cJSON *nccl_ids; bool retired; } complete;
        struct { int64_t count; const cJSON *ranks, *nodes, *starts; } plans;  /* nodes may be NULL */
        struct { int64_t rank, start, count; const char *node; } plan;
        struct { int64_t epoch; const char *key, *value; } kv;
        struct { const char *url; } router;
        struct { int64_t world, epoch; rdzv_resize_how_t how; } resize;
    } u;
} rdzv_record_t;

/* Reads rec into out; 0, or -1 when it is no record this rdzvd knows. */
int rdzv_record_read(const cJSON *rec, rdzv_record_t *out);
/* The integer item of a record's array, checked to lie in [lo, hi]. */
int rdzv_record_int_item(const cJSON *item, int lo, int hi, int *out);

/* Builders: a new record the caller owns; NULL out of memory. */
cJSON *rdzv_record_group(const char *group, int world, rdzv_nccl_mode_t nccl, int nccl_ids);
cJSON *rdzv_record_join(const char *group, int rank, const char *host, const char *node,
                        const char *session, int64_t epoch);
cJSON *rdzv_record_epoch(const char *group, int64_t epoch);
/* Takes nccl_ids (an array of hex strings; NULL: none). */
cJSON *rdzv_record_complete(const char *group, int64_t epoch, cJSON *nccl_ids);
/* n blocks of count ports: rank ranks[i] starts at starts[i], on nodes[i],
 * or with nodes NULL on the node its last join record named. */
cJSON *rdzv_record_plans(const char *group, int count, const int *ranks, const int *starts,
                         const char *const *nodes, int n);
cJSON *rdzv_record_kv(const char *group, int64_t epoch, const char *key, const char *value);
/* The same pointing at value, not copying it: value must outlive the record. */
cJSON *rdzv_record_kv_ref(const char *group, int64_t epoch, const char *key, const char *value);
cJSON *rdzv_record_delete(const char *group);
cJSON *rdzv_record_router(const char *group, const char *url);
cJSON *rdzv_record_resize(const char *group, int world, int64_t epoch, rdzv_resize_how_t how);
cJSON *rdzv_record_root_done(const char *group, int64_t epoch, bool retired);

#endif
