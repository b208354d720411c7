/* The journal in etcd (rdzvd --etcd): the records of a batch are one value
 * under PREFIX/log/SEQ, put by a transaction that holds only while this
 * rdzvd leads etcd's election; replicas that do not lead follow the log by
 * watch and answer no request. etcd_backend.c puts these behind the
 * journal's interface (journal_backend.h); the layout of the keys is in
 * docs/deployment.md.
 *
 * Threads: the committer (the role thread once it leads) puts the queued
 * values one after another; the keeper renews the lease; the watcher
 * follows the leader's log while this replica stands by. Each holds its own
 * connection to etcd. */
#ifndef RDZV_ETCD_JOURNAL_H
#define RDZV_ETCD_JOURNAL_H

#include "etcd_http.h"
#include "journal.h"
#include "metrics.h"

typedef struct rdzv_etcdj rdzv_etcdj_t;

/* Checks that etcd answers (a range of the prefix). NULL on failure. */
rdzv_etcdj_t *rdzv_etcdj_new(const rdzv_etcd_config_t *cfg, char *err, size_t errlen);
/* Stops the threads; a leader gives up its lease, so that a standby takes
 * over at once instead of after the TTL. */
void rdzv_etcdj_destroy(rdzv_etcdj_t **self_p);

/* The snapshot and every record after it, as of one revision. */
long rdzv_etcdj_replay(rdzv_etcdj_t *self, rdzv_journal_apply_fn *apply, void *arg,
                       char *err, size_t errlen);

int rdzv_etcdj_append(rdzv_etcdj_t *self, const cJSON *record);
bool rdzv_etcdj_pending(const rdzv_etcdj_t *self);
/* Hands what is queued to the committer. 0 or -1 (out of memory). */
int rdzv_etcdj_write(rdzv_etcdj_t *self);
/* The sequence number of the last value handed to the committer. */
uint64_t rdzv_etcdj_written(const rdzv_etcdj_t *self);
/* 0 once every value up to upto is committed and the lease is known to
 * hold; -1 if that did not happen within timeout_ms (etcd is unreachable
 * or has no quorum). */
int rdzv_etcdj_wait(rdzv_etcdj_t *self, uint64_t upto, long timeout_ms);
void rdzv_etcdj_latency(rdzv_etcdj_t *self, rdzv_histogram_t *out);
/* Bytes of the snapshot and the values after it. */
uint64_t rdzv_etcdj_size(const rdzv_etcdj_t *self);

/* Compaction: records (taken) go to a new snapshot, written by a thread;
 * the committer then points the head at it and deletes the values it
 * covers, in order with the appends. */
typedef struct rdzv_etcdj_compaction rdzv_etcdj_compaction_t;
rdzv_etcdj_compaction_t *rdzv_etcdj_compact_start(rdzv_etcdj_t *self, cJSON *records,
                                                  void (*release)(void *), void *arg);
/* 1 done, 0 still running (only without wait), -1 failed; *c freed unless 0. */
int rdzv_etcdj_compact_finish(rdzv_etcdj_t *self, rdzv_etcdj_compaction_t **c, bool wait);

/* Takes a lease and campaigns in etcd's election with advertise (the
 * endpoint clients reach this rdzvd at) as its value; follows the log
 * meanwhile. 0 or -1. */
int rdzv_etcdj_campaign(rdzv_etcdj_t *self, const char *advertise, rdzv_journal_follow_fn *fn,
                        void *arg, char *err, size_t errlen);
bool rdzv_etcdj_leading(const rdzv_etcdj_t *self);
/* The leader's advertised endpoint as last read ("" when none is known). */
void rdzv_etcdj_leader(rdzv_etcdj_t *self, char *buf, size_t len);

typedef struct {
    bool leading;
    uint64_t db_bytes;           /* etcd's database, as its member reports it */
    uint64_t db_quota_bytes;     /* what etcd refuses writes past, by default */
    uint64_t log_bytes;          /* rdzv_etcdj_size */
    uint64_t applied_seq;        /* the last log value replayed, followed or put */
    uint64_t unavailable;        /* waits that ran out */
} rdzv_journal_etcd_stats_t;
void rdzv_etcdj_stats(rdzv_etcdj_t *self, rdzv_journal_etcd_stats_t *out);

#endif
