/* The core's insides, for core.c and white-box tests; everything else goes
 * through core.h. */
#ifndef RDZV_CORE_STATE_H
#define RDZV_CORE_STATE_H

#include <pthread.h>
#include <stdatomic.h>

#include "batch.h"
#include "compact.h"
#include "core.h"
#include "quota.h"
#include "state.h"

struct rdzv_core {
    rdzv_config_t cfg;
    rdzv_journal_t *journal;
    rdzv_state_t state;
    rdzv_batch_t batch;          /* the one open batch's, between begin and end */
    rdzv_metrics_t metrics;
    uint64_t compacted_size;     /* the journal file's size after the last compaction */
    rdzv_compaction_t *compaction;   /* one in flight (journal.h), or NULL */
    rdzv_snapshot_t snapshot;    /* the values it holds, until its thread framed them */
    uint64_t compaction_from;    /* the journal's size when it started */
    rdzv_rate_t *rate;
    rdzv_tokens_t *tokens;       /* --tokens DIR; NULL without */
    int64_t last_prune_ms;
    bool in_batch;               /* between begin and end or defer */
    _Atomic unsigned long long replies_dropped[RDZV_DROP_REASONS];
    atomic_bool fds_short;
    _Atomic long connections, connection_cap;
    _Atomic unsigned long long peers_dropped[RDZV_PEER_DROP_REASONS];
    _Atomic long fds_limit;
    /* Held from begin to end; the HTTP server's readers take it too. */
    pthread_mutex_t lock;
};

/* Rewrites the journal as the records of the current state, as
 * rdzv_core_end does past --compact-mib; no other thread may use the core
 * meanwhile. 0 or -1. */
int rdzv_core_compact(rdzv_core_t *self);

#endif
