/* The file journal: records framed into a buffer, written to
 * --state-dir/journal with pwrite, made durable by the syncer's
 * fdatasync (syncer.h) while the shards go on. */
#include "journal_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static void s_close(void *impl)
{
    rdzv_journal_file_t *self = impl;
    if (!self)
        return;
    rdzv_syncer_destroy(&self->syncer);
    if (self->fd >= 0)
        close(self->fd);
    if (self->lock_fd >= 0)
        close(self->lock_fd);
    free(self->dir);
    free(self->queued.buf);
    free(self);
}

void *rdzv_journal_file_open(const char *dir, bool do_fsync, char *err, size_t errlen)
{
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create state dir %s: %s", dir, strerror(errno));
        return NULL;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/lock", dir);
    int lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
        snprintf(err, errlen, "%s is in use by another rdzvd (%s)", dir, strerror(errno));
        if (lock_fd >= 0)
            close(lock_fd);
        return NULL;
    }
    snprintf(path, sizeof path, "%s/journal", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    rdzv_journal_file_t *self = fd >= 0 ? calloc(1, sizeof *self) : NULL;
    if (!self || !(self->dir = strdup(dir))) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        close(lock_fd);
        free(self);
        return NULL;
    }
    self->fd = fd;
    self->lock_fd = lock_fd;
    self->repaired_at = -1;
    if (!(self->syncer = rdzv_syncer_new(fd, 0, do_fsync))) {
        snprintf(err, errlen, "out of memory");
        s_close(self);
        return NULL;
    }
    return self;
}

static unsigned char *s_read_all(int fd, size_t *len_out)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return NULL;
    size_t len = (size_t) st.st_size;
    unsigned char *data = malloc(len ? len : 1);
    size_t got = 0;
    while (data && got < len) {
        ssize_t n = pread(fd, data + got, len - got, (off_t) got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            free(data);
            return NULL;
        }
        got += (size_t) n;
    }
    *len_out = len;
    return data;
}

/* A damaged record is a torn tail only when it is the last thing written:
 * nothing valid follows it. A flipped bit in a middle record's length can
 * make it look as if it ran past the end, so the length alone proves
 * nothing; a valid record further on (its CRC matching by chance is
 * negligible) proves the damage is in the middle. */
static bool s_is_tail(const unsigned char *data, size_t len, size_t off)
{
    for (size_t p = off + 1; p + RDZV_JOURNAL_HEADER < len; p++)
        if (rdzv_journal_record_at(data, len, p) > 0)
            return false;
    return true;
}

static long s_replay(void *impl, rdzv_journal_apply_fn *apply, void *arg, bool repair,
                     size_t *torn_bytes, char *err, size_t errlen)
{
    rdzv_journal_file_t *self = impl;
    size_t len = 0;
    unsigned char *data = s_read_all(self->fd, &len);
    if (!data) {
        snprintf(err, errlen, "cannot read journal: %s", strerror(errno));
        return -1;
    }
    long applied = 0;
    size_t off = 0;
    *torn_bytes = 0;
    while (off < len) {
        size_t rec = rdzv_journal_record_at(data, len, off);
        if (rec == 0) {
            bool tail = s_is_tail(data, len, off);
            if (!tail && !repair) {
                snprintf(err, errlen, "journal corrupt at offset %zu of %zu "
                         "(start with --repair to cut it there)", off, len);
                free(data);
                return -1;
            }
            *torn_bytes = len - off;
            self->repaired_at = tail ? -1 : (long) off;
            break;
        }
        cJSON *record = cJSON_ParseWithLength((const char *) data + off + RDZV_JOURNAL_HEADER,
                                              rec - RDZV_JOURNAL_HEADER);
        int rc = record ? apply(arg, record) : -1;
        cJSON_Delete(record);
        if (rc < 0) {
            snprintf(err, errlen, "journal record at offset %zu does not apply", off);
            free(data);
            return -1;
        }
        applied++;
        off += rec;
    }
    free(data);
    if (*torn_bytes && ftruncate(self->fd, (off_t) off) < 0) {
        snprintf(err, errlen, "cannot cut torn journal tail: %s", strerror(errno));
        return -1;
    }
    self->size = off;
    atomic_store(&self->published, self->size);
    /* At open what the file holds counts as on disk. A reload after a
     * failed write reads records that may still wait for their sync: what
     * is durable stays as the syncer knows it. */
    rdzv_syncer_reset(self->syncer, self->fd, self->replayed ? 0 : off);
    self->replayed = true;
    /* Memory is what the file holds again: writes may go on. */
    self->failed_errno = 0;
    return applied;
}

static int s_append(void *impl, const cJSON *record)
{
    return rdzv_journal_buf_append(&((rdzv_journal_file_t *) impl)->queued, record);
}

static bool s_pending(const void *impl)
{
    return ((const rdzv_journal_file_t *) impl)->queued.len > 0;
}

static int s_write(void *impl, char *err, size_t errlen)
{
    rdzv_journal_file_t *self = impl;
    if (self->failed_errno) {
        /* A write failed since the last replay: what came after it may
         * depend on it, so none of it reaches the file. */
        self->queued.len = 0;
        snprintf(err, errlen, "an earlier write of the journal failed: %s",
                 strerror(self->failed_errno));
        return -self->failed_errno;
    }
    size_t done = 0;
    while (done < self->queued.len) {
        ssize_t n = pwrite(self->fd, self->queued.buf + done, self->queued.len - done,
                           (off_t) (self->size + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            /* Leave no half record behind: the next replay would call it torn. */
            if (ftruncate(self->fd, (off_t) self->size) < 0) {
                /* Nothing more can be done; replay will cut the tail. */
            }
            self->failed_errno = n < 0 ? errno : EIO;
            self->queued.len = 0;
            snprintf(err, errlen, "cannot write %s/journal: %s", self->dir,
                     strerror(self->failed_errno));
            return -self->failed_errno;
        }
        done += (size_t) n;
    }
    self->size += self->queued.len;
    atomic_store(&self->published, self->size);
    self->queued.len = 0;
    return 0;
}

static uint64_t s_written(const void *impl)
{
    return rdzv_journal_file_written(impl);
}

static void s_sync_start(void *impl)
{
    rdzv_journal_file_t *self = impl;
    rdzv_syncer_start(self->syncer, rdzv_journal_file_written(self));
}

/* A failed sync exits rdzvd (syncer.h): there is no error to return. */
static int s_wait(void *impl, uint64_t upto, char *err, size_t errlen)
{
    (void) err;
    (void) errlen;
    rdzv_syncer_wait(((rdzv_journal_file_t *) impl)->syncer, upto);
    return 0;
}

static uint64_t s_size(const void *impl)
{
    return ((const rdzv_journal_file_t *) impl)->size;
}

static void s_stats(void *impl, rdzv_journal_stats_t *out)
{
    rdzv_journal_file_t *self = impl;
    out->bytes = self->size;
    out->bytes_help = "Bytes in the journal file.";
    rdzv_syncer_latency(self->syncer, &out->sync);
    out->sync_name = "rdzv_journal_fsync_seconds";
    out->sync_help = "Seconds one journal fdatasync took.";
}

long rdzv_journal_file_repaired_at(const void *impl)
{
    return ((const rdzv_journal_file_t *) impl)->repaired_at;
}

double rdzv_journal_file_sync_busy_s(void *impl)
{
    return rdzv_syncer_busy_s(((rdzv_journal_file_t *) impl)->syncer);
}

void rdzv_journal_file_set_sync_fn(void *impl, int (*fn)(int fd))
{
    rdzv_journal_file_t *self = impl;
    self->sync_fn = fn;
    rdzv_syncer_set_sync_fn(self->syncer, fn);
}

const rdzv_journal_backend_t rdzv_journal_file_backend = {
    .replay = s_replay, .append = s_append, .pending = s_pending,
    .write = s_write, .written = s_written, .sync_start = s_sync_start,
    .wait = s_wait, .compact_start = rdzv_journal_file_compact_start,
    .compact_finish = rdzv_journal_file_compact_finish,
    .compact_abort = rdzv_journal_file_compact_abort, .size = s_size, .stats = s_stats,
    .close = s_close,
};
