/* The append-only journal: every accepted change is a record, durable
 * before the reply that depends on it leaves rdzvd. Two places keep it:
 * a file in --state-dir, written and fdatasync'ed (on disk each record is
 * [u32 length][u32 crc32][JSON bytes], little endian), or etcd (--etcd,
 * etcd_journal.h), put by transactions a quorum commits. The functions
 * below are the same for both; where one means nothing for etcd it says. */
#ifndef RDZV_JOURNAL_H
#define RDZV_JOURNAL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "etcd_http.h"
#include "metrics.h"

typedef struct rdzv_journal rdzv_journal_t;

/* How long a reply waits for etcd to commit its records before it is an
 * "unavailable" error instead (the records are still put once etcd can). */
#define RDZV_JOURNAL_UNAVAILABLE_MS 3000

/* Called once per record during replay; return 0, or -1 to stop replay
 * (the record is inconsistent with the state before it). */
typedef int (rdzv_journal_apply_fn)(void *arg, const cJSON *record);

/* Opens (creating) DIR/journal and takes an exclusive lock on it so that two
 * rdzvd never share a state directory. NULL on failure, reason in err. */
rdzv_journal_t *rdzv_journal_open(const char *dir, bool do_fsync,
                                  char *err, size_t errlen);
/* The journal in etcd; NULL if etcd cannot be reached (reason in err). */
rdzv_journal_t *rdzv_journal_open_etcd(const rdzv_etcd_config_t *cfg, char *err, size_t errlen);
void rdzv_journal_destroy(rdzv_journal_t **self_p);

/* Feeds every record to apply. A torn last record is cut off (and counted in
 * *torn_bytes); corruption before the end fails with its offset in err
 * unless repair is set, in which case the journal is cut there.
 * Returns the number of records applied, or -1. */
long rdzv_journal_replay(rdzv_journal_t *self, rdzv_journal_apply_fn *apply,
                         void *arg, bool repair, size_t *torn_bytes,
                         char *err, size_t errlen);

/* Queues one record; it reaches the disk at the next flush. 0 or -1. */
int rdzv_journal_append(rdzv_journal_t *self, const cJSON *record);
/* True when records are queued. */
bool rdzv_journal_pending(const rdzv_journal_t *self);
/* Writes queued records and waits until they are durable. 0, or -1 when a
 * write failed since the last flush (the records are dropped and the caller
 * must not send the replies that depended on them). */
int rdzv_journal_flush(rdzv_journal_t *self);
/* The same in steps, so that work can go on while the disk syncs: write
 * the queued records to the file (0, or -1: they are dropped, and
 * rdzv_journal_take_failure says so), start their sync, and wait until everything below an offset of
 * rdzv_journal_written is durable (syncer.h: a failed sync exits rdzvd). */
int rdzv_journal_write(rdzv_journal_t *self);
/* The errno of a write that failed since the last call (0: none), cleared. */
int rdzv_journal_take_failure(rdzv_journal_t *self);
uint64_t rdzv_journal_written(const rdzv_journal_t *self);
void rdzv_journal_sync_start(rdzv_journal_t *self);
/* 0; for etcd -1 when the records were not committed, or the lease not
 * known to hold, within RDZV_JOURNAL_UNAVAILABLE_MS. */
int rdzv_journal_wait(rdzv_journal_t *self, uint64_t upto);
/* The durations of the journal's fdatasync calls. */
void rdzv_journal_sync_latency(rdzv_journal_t *self, rdzv_histogram_t *out);
/* Seconds the fdatasync in flight has run so far (0: none). */
double rdzv_journal_sync_busy_s(rdzv_journal_t *self);
/* Replaces fdatasync, the syncer's and compaction's (fault-injection tests). */
void rdzv_journal_set_sync_fn(rdzv_journal_t *self, int (*fn)(int fd));
/* Compaction: the journal replaced by records (an array of record objects)
 * that rebuild the current state, in two steps so that no request waits
 * for the big write. start takes the records (copies of the state of one
 * moment, made under the caller's lock) and hands them to a thread, which
 * frames them, writes them to a temporary file and fsyncs it; records appended
 * meanwhile go to the journal as ever. finish (under the lock again)
 * copies those records onto the snapshot, fsyncs it, renames it over the
 * journal and fsyncs the directory: a crash leaves either the old journal
 * or the new one, each whole. Queued records must have been written before
 * either call. */
typedef struct rdzv_compaction rdzv_compaction_t;
/* Takes records. The thread calls release(arg) once it has framed them
 * (records may point into memory the caller holds for them; release NULL:
 * none). NULL on failure (no temporary file; release was called): the
 * journal stays. */
rdzv_compaction_t *rdzv_journal_compact_start(rdzv_journal_t *self, cJSON *records,
                                              void (*release)(void *), void *arg);
/* 1: done, the new file in place; 0: the thread is still writing (only
 * without wait); -1: failed, the old journal stays. *c is freed unless 0. */
int rdzv_journal_compact_finish(rdzv_journal_t *self, rdzv_compaction_t **c, bool wait);
/* Stops a compaction and throws its file away (the state it snapshot is
 * being reloaded). */
void rdzv_journal_compact_abort(rdzv_compaction_t **c);
/* start and finish at once (takes records). 0 or -1. */
int rdzv_journal_compact(rdzv_journal_t *self, cJSON *records);
/* Where the last replay cut a journal corrupted in the middle (--repair),
 * or -1 if it cut nothing or only a torn tail. */
long rdzv_journal_repaired_at(const rdzv_journal_t *self);
/* Bytes in the journal file (etcd: the snapshot and the values after it). */
uint64_t rdzv_journal_size(const rdzv_journal_t *self);

/* Roles, for etcd; a file journal always leads. campaign starts standing
 * by and campaigning as advertise; fn gets the leader's records while this
 * rdzvd stands by (etcd_journal.h). 0 or -1. */
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
typedef struct {
    bool leading;
    uint64_t db_bytes;           /* etcd's database, as its member reports it */
    uint64_t db_quota_bytes;     /* what etcd refuses writes past, by default */
    uint64_t log_bytes;          /* rdzv_journal_size */
    uint64_t applied_seq;        /* the last log value replayed, followed or put */
    uint64_t unavailable;        /* waits that ran out */
} rdzv_journal_etcd_stats_t;
/* false for a file journal. */
bool rdzv_journal_etcd_stats(rdzv_journal_t *self, rdzv_journal_etcd_stats_t *out);

/* Encodes one framed record into buf (for tests and the fuzzer). Returns the
 * framed length, or -1 if it does not fit. */
long rdzv_journal_frame(const char *json, size_t len, unsigned char *buf, size_t cap);

#endif
