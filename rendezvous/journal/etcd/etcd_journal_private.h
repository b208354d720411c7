/* The etcd journal's insides, shared by etcd_journal.c (appends, the
 * committer), etcd_replay.c (replay, the watcher), etcd_role.c (lease,
 * election) and etcd_compact.c.
 *
 * Keys, under --etcd-prefix P:
 *   P/log/SEQ            a piece of one batch's records; SEQ 16 hex digits
 *   P/head               {"gen","chunks","through","bytes"}: the snapshot
 *   P/snap/GEN/I         piece I of snapshot GEN
 *   P/election           etcd's election (the keys under it are etcd's)
 * A value is a marker byte and a piece of JSON text: '+' more pieces of the
 * same text follow under the next SEQs (or I), '=' this one ends it. A
 * batch's text is a JSON array of records; pieces keep each value under
 * etcd's request limit (1.5 MiB) whatever the size of one record. */
#ifndef RDZV_ETCD_JOURNAL_PRIVATE_H
#define RDZV_ETCD_JOURNAL_PRIVATE_H

#include "etcd_journal.h"

#include <pthread.h>
#include <stdatomic.h>

/* The bytes of JSON text in one value. */
#define RDZV_ETCDJ_PIECE ((1u << 20) - 4096)
/* How long a call to etcd may take before the next member is tried. */
#define RDZV_ETCDJ_CALL_MS 2000L
/* What etcd refuses writes past unless --quota-backend-bytes says more. */
#define RDZV_ETCDJ_DEFAULT_QUOTA (2ull << 30)

typedef enum { RDZV_ETCDJ_JOB_LOG, RDZV_ETCDJ_JOB_HEAD } rdzv_etcdj_job_kind_t;

/* A value for the committer to put, in order. */
typedef struct rdzv_etcdj_job {
    rdzv_etcdj_job_kind_t kind;
    uint64_t seq;                /* LOG: its key */
    char *value;                 /* marker and text */
    size_t len;
    rdzv_etcdj_compaction_t *compaction;   /* HEAD: whose */
    struct rdzv_etcdj_job *next;
} rdzv_etcdj_job_t;

struct rdzv_etcdj_compaction {
    rdzv_etcdj_t *journal;
    pthread_t thread;
    cJSON *records;
    void (*release)(void *);
    void *release_arg;
    uint64_t gen, through, bytes;
    uint64_t log_bytes_at_start; /* the log it covers, for rdzv_journal_size */
    unsigned chunks;
    bool written;                /* the thread put every piece */
    atomic_bool done;            /* the committer moved the head (or it failed) */
    bool ok;
};

struct rdzv_etcdj {
    rdzv_etcd_config_t cfg;      /* strings owned */
    char *prefix;
    pthread_mutex_t lock;
    pthread_cond_t cond;         /* commits, lease renewals, jobs queued */
    /* The batch being appended: "[" and records, not yet a job. */
    char *buf;
    size_t len, cap;
    rdzv_etcdj_job_t *head, *tail;
    /* Last SEQ handed to the committer: the core reads it for its gates
     * while an elected role thread sets where it starts. */
    _Atomic uint64_t queued_seq;
    uint64_t committed_seq;      /* last SEQ etcd took */
    uint64_t applied_seq;        /* last SEQ replayed or followed */
    int64_t revision;            /* etcd's, as of the last replay or event */
    uint64_t snap_gen, snap_bytes, log_bytes;
    /* Following: pieces of a text whose last piece has not come yet. */
    char *partial;
    size_t partial_len;
    /* The lease and the election. */
    int64_t lease_id;
    int64_t lease_deadline_ms;   /* monotonic: our lease surely holds until then */
    char *advertise;
    char *leader_key;            /* base64, as the campaign answered it */
    int64_t leader_rev;
    char leader_addr[512];       /* whom a standby names */
    atomic_bool leading;
    atomic_bool stop;
    atomic_bool watch_stop;
    /* Held by the watcher while it hands records over: once the elected
     * role thread has set watch_stop under it, the watcher hands nothing
     * more, and the role thread need not wait for it to end. */
    pthread_mutex_t follow_lock;
    rdzv_journal_follow_fn *follow;
    void *follow_arg;
    pthread_t role_thread, keeper_thread, watch_thread;
    bool role_started, keeper_started, watch_started;
    rdzv_histogram_t latency;
    uint64_t db_bytes, unavailable;
    /* Until the campaign starts: transient etcd errors are tried again
     * (rdzv_etcdj_start_again) until the deadline, after the pause. */
    bool starting;
    int64_t start_deadline_ms, start_pause_ms;
};

/* Key names; each returns buf. */
char *rdzv_etcdj_key(const rdzv_etcdj_t *self, char *buf, size_t len, const char *what);
char *rdzv_etcdj_log_key(const rdzv_etcdj_t *self, char *buf, size_t len, uint64_t seq);
char *rdzv_etcdj_snap_key(const rdzv_etcdj_t *self, char *buf, size_t len, uint64_t gen,
                          unsigned chunk);
/* The SEQ of a log key, 0 if it is none. */
uint64_t rdzv_etcdj_key_seq(const rdzv_etcdj_t *self, const char *key);
/* The compare that holds only while this rdzvd leads: its election key
 * was created at its revision. */
cJSON *rdzv_etcdj_leader_compare(const rdzv_etcdj_t *self);
/* A range of [key, end) as request object members; end NULL: key alone. */
void rdzv_etcdj_add_range(cJSON *obj, const char *key, const char *end);
/* At start only: whether the call that failed with err (on conn) is worth
 * another try, etcd being in a passing trouble (rdzv_etcd_transient) and
 * the start deadline not past. If so, logs what failed and sleeps the
 * back-off first. If not because the deadline passed, err says so. */
bool rdzv_etcdj_start_again(rdzv_etcdj_t *self, const rdzv_etcd_t *conn, const char *what,
                            char *err, size_t errlen);
/* Monotonic milliseconds. */
int64_t rdzv_etcdj_now_ms(void);
/* Logs why and exits: this rdzvd no longer leads, and must neither write
 * nor answer (its replacement does). */
void rdzv_etcdj_fenced(rdzv_etcdj_t *self, const char *why) __attribute__((noreturn));
/* Applies the records of one complete text (a JSON array) through fn;
 * the number applied, or -1 (bad JSON, or fn refused one). */
long rdzv_etcdj_apply_text(const char *text, size_t len, rdzv_journal_apply_fn *fn, void *arg);
/* Reads the log from applied_seq + 1 to its end at the current revision and
 * hands each whole batch to the core; trailing pieces of a batch its writer
 * never finished are deleted when delete_partial (the new leader's) else
 * left. 0, 1 (the snapshot moved past applied_seq: the core must reload),
 * or -1 (etcd unreachable). */
int rdzv_etcdj_catch_up(rdzv_etcdj_t *self, rdzv_etcd_t *conn, bool delete_partial);
/* The watcher's thread. */
void *rdzv_etcdj_watch_thread(void *arg);
/* Points the head at a written compaction and deletes what it covers (the
 * committer): 1 done (c->ok says whether it took), 0 this rdzvd no longer
 * leads, < 0 etcd unreachable: try again. */
int rdzv_etcdj_commit_head(rdzv_etcdj_t *self, rdzv_etcd_t *conn, rdzv_etcdj_compaction_t *c,
                           char *err, size_t errlen);
/* The committer: the role thread's loop once it leads; returns on stop. */
void rdzv_etcdj_commit_loop(rdzv_etcdj_t *self, rdzv_etcd_t *conn);
/* One txn of compares and puts; 1 it held, 0 a compare failed, or the code of
 * rdzv_etcd_call. *reply the caller's when 0 or 1. */
int rdzv_etcdj_txn(rdzv_etcd_t *conn, cJSON *compares, cJSON *success, cJSON *failure,
                   cJSON **reply, char *err, size_t errlen);

#endif
