/* The append-only journal: every accepted change is a record, durable
 * before the reply that depends on it leaves rdzvd. One interface over the
 * places that keep it (journal_backend.h): a file in --state-dir
 * (journal_file.c), or a store that replicas share and elect a leader in
 * (journal_opts.h names it and reads its options). The calls below are the
 * same for each; where one means nothing for a backend it says. Errors are
 * a negative errno, with the reason in the caller's buffer. */
#ifndef RDZV_JOURNAL_H
#define RDZV_JOURNAL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "metrics.h"

typedef struct rdzv_journal rdzv_journal_t;
/* A replicated journal's settings, from rdzvd's command line
 * (journal_opts.h); NULL wherever the file journal is meant. */
typedef struct rdzv_journal_remote rdzv_journal_remote_t;

/* How long a reply waits for a replicated journal to commit its records
 * before it is an "unavailable" error instead (the records are still put
 * once the store can). */
#define RDZV_JOURNAL_UNAVAILABLE_MS 3000

/* Called once per record during replay; return 0, or -1 to stop replay
 * (the record is inconsistent with the state before it). */
typedef int (rdzv_journal_apply_fn)(void *arg, const cJSON *record);

/* The journal remote names, or with remote NULL the file DIR/journal
 * (created, and locked so that two rdzvd never share a state directory;
 * do_fsync false: never synced, for benchmarks). NULL on failure, reason
 * in err. */
rdzv_journal_t *rdzv_journal_open_at(const rdzv_journal_remote_t *remote, const char *dir,
                                     bool do_fsync, char *err, size_t errlen);
/* The file journal in dir. */
rdzv_journal_t *rdzv_journal_open(const char *dir, bool do_fsync, char *err, size_t errlen);
void rdzv_journal_destroy(rdzv_journal_t **self_p);
/* What a log line calls the replicated journal remote names. */
const char *rdzv_journal_remote_name(const rdzv_journal_remote_t *remote);

/* Feeds every record to apply. A torn last record is cut off (and counted in
 * *torn_bytes); corruption before the end fails with its offset in err
 * unless repair is set, in which case the journal is cut there.
 * Returns the number of records applied, or -1. */
long rdzv_journal_replay(rdzv_journal_t *self, rdzv_journal_apply_fn *apply,
                         void *arg, bool repair, size_t *torn_bytes,
                         char *err, size_t errlen);

/* Queues one record; it is written at the next write. 0 or -ENOMEM. */
int rdzv_journal_append(rdzv_journal_t *self, const cJSON *record);
/* True when records are queued. */
bool rdzv_journal_pending(const rdzv_journal_t *self);
/* Writing in steps, so that work goes on while the disk (or the quorum)
 * makes records durable: write hands the queued records on (0, or -errno:
 * they are dropped, and so is everything written until the next replay,
 * since what follows may depend on them: the caller must reload its state
 * and not send the replies that depended on them); sync_start starts their
 * sync; wait returns once everything below an offset of written is durable
 * (0, or -ETIMEDOUT when a replicated journal did not commit it, or its
 * lease was not known to hold, within RDZV_JOURNAL_UNAVAILABLE_MS). */
int rdzv_journal_write(rdzv_journal_t *self, char *err, size_t errlen);
uint64_t rdzv_journal_written(const rdzv_journal_t *self);
void rdzv_journal_sync_start(rdzv_journal_t *self);
int rdzv_journal_wait(rdzv_journal_t *self, uint64_t upto, char *err, size_t errlen);
/* The three at once. 0 or -errno. */
int rdzv_journal_flush(rdzv_journal_t *self, char *err, size_t errlen);

/* Compaction: the journal replaced by records (an array of record objects)
 * that rebuild the current state, in two steps so that no request waits
 * for the big write. start takes the records (copies of the state of one
 * moment, made under the caller's lock) and hands them to a thread, which
 * writes them; records appended meanwhile go to the journal as ever.
 * finish (under the lock again) puts the snapshot in place: a crash leaves
 * either the old journal or the new one, each whole. Queued records must
 * have been written before either call. */
typedef struct rdzv_compaction rdzv_compaction_t;
/* Takes records. The thread calls release(arg) once it has framed them
 * (records may point into memory the caller holds for them; release NULL:
 * none). NULL on failure (release was called): the journal stays. */
rdzv_compaction_t *rdzv_journal_compact_start(rdzv_journal_t *self, cJSON *records,
                                              void (*release)(void *), void *arg);
/* 1: done, the snapshot in place; 0: the thread is still writing (only
 * without wait); -1: failed, the old journal stays. *c is freed unless 0. */
int rdzv_journal_compact_finish(rdzv_journal_t *self, rdzv_compaction_t **c, bool wait);
/* Stops a compaction (the state it snapshot is being reloaded): the file's
 * is thrown away; a replicated one whose pieces are already committed is
 * let finish, since its head covers only records the store holds. */
void rdzv_journal_compact_abort(rdzv_journal_t *self, rdzv_compaction_t **c);
/* start and finish at once (takes records). 0 or -1. */
int rdzv_journal_compact(rdzv_journal_t *self, cJSON *records);

/* Bytes in the journal (a replicated one: the snapshot and the records
 * after it). */
uint64_t rdzv_journal_size(const rdzv_journal_t *self);
/* Where the last replay cut a file corrupted in the middle (--repair), or
 * -1 if it cut nothing or only a torn tail. */
long rdzv_journal_repaired_at(const rdzv_journal_t *self);
/* Seconds the sync in flight has run so far (0: none; a replicated journal
 * that cannot commit answers "unavailable" instead, and reports 0 here:
 * /healthz failing on it would have every replica restarted into a store
 * that still cannot commit). */
double rdzv_journal_sync_busy_s(rdzv_journal_t *self);
/* Replaces the file journal's fdatasync, the syncer's and compaction's
 * (fault-injection tests); nothing for other backends. */
void rdzv_journal_set_sync_fn(rdzv_journal_t *self, int (*fn)(int fd));

/* What /metrics shows of the journal: its size, each sync's duration, and
 * the backend's own gauges, each a Prometheus family of its naming. */
#define RDZV_JOURNAL_GAUGES 8
typedef struct {
    const char *name, *type, *help;
    unsigned long long value;
} rdzv_journal_gauge_t;
typedef struct {
    unsigned long long bytes;
    const char *bytes_help;
    rdzv_histogram_t sync;
    const char *sync_name, *sync_help;
    rdzv_journal_gauge_t gauge[RDZV_JOURNAL_GAUGES];
    size_t ngauge;
} rdzv_journal_stats_t;
void rdzv_journal_stats(rdzv_journal_t *self, rdzv_journal_stats_t *out);

/* Roles: a replicated journal's replicas elect one leader; a file journal
 * always leads. campaign starts standing by and campaigning as advertise;
 * fn gets the leader's records while this rdzvd stands by. 0 or -1. */
typedef enum {
    RDZV_JOURNAL_RECORDS,        /* the leader's records, to apply in order */
    RDZV_JOURNAL_RELOAD,         /* lost track: clear the state and replay */
    RDZV_JOURNAL_PROMOTED,       /* this rdzvd leads from now on */
} rdzv_journal_event_t;
/* Called on a thread of the journal's; records only with RECORDS. */
typedef void (rdzv_journal_follow_fn)(void *arg, rdzv_journal_event_t event, const cJSON *records);
int rdzv_journal_campaign(rdzv_journal_t *self, const char *advertise,
                          rdzv_journal_follow_fn *fn, void *arg, char *err, size_t errlen);
bool rdzv_journal_leading(const rdzv_journal_t *self);
/* The leader's endpoint ("" unknown, or a file journal). */
void rdzv_journal_leader(rdzv_journal_t *self, char *buf, size_t len);

/* Encodes one record into buf as the file journal frames it (for tests and
 * the fuzzer). Returns the framed length, or -1 if it does not fit. */
long rdzv_journal_frame(const char *json, size_t len, unsigned char *buf, size_t cap);

#endif
