/* The journal's insides, for journal.c and its compaction
 * (journal_compact.c). */
#ifndef RDZV_JOURNAL_PRIVATE_H
#define RDZV_JOURNAL_PRIVATE_H

#include "etcd_journal.h"
#include "journal.h"
#include "syncer.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct rdzv_journal {
    int fd;
    int lock_fd;               /* the journal file itself is replaced by compaction */
    char *dir;
    uint64_t size;             /* written to the file (durable: the syncer says) */
    /* size, for a compaction's thread to read while the file grows. */
    _Atomic uint64_t published;
    /* Where this file starts in the journal's logical offsets: the sizes
     * of the files compaction replaced. Gates and the syncer count in
     * logical offsets, which only grow, so a gate taken before a compaction
     * can never stand for bytes of the new, shorter file. */
    uint64_t base;
    bool replayed;             /* the journal was read once since open */
    long repaired_at;          /* offset --repair cut at, or -1 */
    char *buf;                 /* queued, not yet written */
    size_t len, cap;
    int failed_errno;          /* of a write that failed since the last check; 0: none */
    rdzv_syncer_t *syncer;
    int (*sync_fn)(int fd);    /* fdatasync, or a test's stand-in */
    rdzv_etcdj_t *etcd;        /* --etcd: the journal is there; the rest is unused */
};

/* write(2) until len bytes are out; 0 or -1. */
int rdzv_journal_write_all(int fd, const char *buf, size_t len);
/* fsync of a directory, so that a rename in it is durable; 0 or -1. */
int rdzv_journal_fsync_dir(const char *dir);

#endif
