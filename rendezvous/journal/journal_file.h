/* The file journal's insides, for journal_file.c and its compaction
 * (journal_file_compact.c). On disk each record is [u32 length][u32
 * crc32][JSON bytes], little endian. */
#ifndef RDZV_JOURNAL_FILE_H
#define RDZV_JOURNAL_FILE_H

#include "journal_backend.h"
#include "syncer.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define RDZV_JOURNAL_HEADER 8
#define RDZV_JOURNAL_MAX_RECORD (16u << 20)   /* far above any record rdzvd writes */

/* Records framed one after another (journal_frame.c). */
typedef struct {
    char *buf;
    size_t len, cap;
} rdzv_journal_buf_t;
/* Frames record onto b. 0 or -ENOMEM. */
int rdzv_journal_buf_append(rdzv_journal_buf_t *b, const cJSON *record);
/* The length of the valid record at data[off], 0 if it is damaged. */
size_t rdzv_journal_record_at(const unsigned char *data, size_t len, size_t off);

typedef struct {
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
    rdzv_journal_buf_t queued; /* framed, not yet written */
    int failed_errno;          /* of a write that failed since the last replay; 0: none */
    rdzv_syncer_t *syncer;
    int (*sync_fn)(int fd);    /* fdatasync, or a test's stand-in */
} rdzv_journal_file_t;

/* The logical offset everything written so far ends at. */
static inline uint64_t rdzv_journal_file_written(const rdzv_journal_file_t *self)
{
    return self->base + self->size;
}
/* write(2) until len bytes are out; 0 or -1. */
int rdzv_journal_write_all(int fd, const char *buf, size_t len);
/* fsync of a directory, so that a rename in it is durable; 0 or -1. */
int rdzv_journal_fsync_dir(const char *dir);

/* Compaction (journal_file_compact.c), as journal_backend.h calls it. */
void *rdzv_journal_file_compact_start(void *self, cJSON *records, void (*release)(void *),
                                      void *arg);
int rdzv_journal_file_compact_finish(void *self, void **c, bool wait);
void rdzv_journal_file_compact_abort(void *self, void **c);

#endif
