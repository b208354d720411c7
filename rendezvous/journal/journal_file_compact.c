/* Compaction off the core's lock (journal.h): the snapshot is written and
 * synced by a thread; only the records appended meanwhile are copied under
 * the lock. A 128 MiB state used to keep every request waiting 1.1 s. */
#include "journal_file.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    pthread_t thread;
    int fd;                      /* the temporary file */
    char tmp[4096];
    cJSON *records;              /* the snapshot, framed by the thread */
    char *buf;                   /* the framed snapshot */
    size_t len;
    uint64_t cut;                /* the journal file's size when the snapshot was taken */
    uint64_t copied;             /* the journal file's bytes on the snapshot so far */
    rdzv_journal_file_t *journal;    /* its fd and published size, read by the thread */
    int old_fd;
    atomic_bool done;
    bool ok;
    int (*sync_fn)(int fd);
    void (*release)(void *);     /* once the records are framed */
    void *release_arg;
} s_compaction_t;

static void s_release(s_compaction_t *c)
{
    cJSON_Delete(c->records);
    c->records = NULL;
    if (c->release)
        c->release(c->release_arg);
    c->release = NULL;
}

static int s_copy_tail(s_compaction_t *c, int from, uint64_t upto);

static void *s_write_snapshot(void *arg)
{
    s_compaction_t *c = arg;
    rdzv_journal_buf_t scratch = { 0 };
    const cJSON *rec;
    bool framed = true;
    cJSON_ArrayForEach(rec, c->records)
        framed = framed && rdzv_journal_buf_append(&scratch, rec) == 0;
    s_release(c);
    c->buf = scratch.buf;
    c->len = scratch.len;
    /* The snapshot, then what was appended while it was written: whatever
     * is left for finish under the lock is the last moments' records. */
    c->ok = framed && rdzv_journal_write_all(c->fd, c->buf, c->len) == 0
            && s_copy_tail(c, c->old_fd, atomic_load(&c->journal->published)) == 0
            && (c->sync_fn ? c->sync_fn(c->fd) : fdatasync(c->fd)) == 0;
    free(c->buf);
    c->buf = NULL;
    atomic_store(&c->done, true);
    return NULL;
}

static void s_free(s_compaction_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    unlink(c->tmp);
    s_release(c);
    free(c->buf);
    free(c);
}

void *rdzv_journal_file_compact_start(void *impl, cJSON *records, void (*release)(void *),
                                      void *arg)
{
    rdzv_journal_file_t *self = impl;
    s_compaction_t *c = self->queued.len == 0 ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        cJSON_Delete(records);
        if (release)
            release(arg);
        return NULL;
    }
    c->fd = -1;
    c->records = records;
    c->release = release;
    c->release_arg = arg;
    snprintf(c->tmp, sizeof c->tmp, "%s/journal.tmp", self->dir);
    c->cut = c->copied = self->size;
    c->sync_fn = self->sync_fn;
    c->journal = self;
    c->old_fd = self->fd;
    c->fd = open(c->tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (c->fd < 0 || pthread_create(&c->thread, NULL, s_write_snapshot, c) != 0) {
        s_free(c);
        return NULL;
    }
    return c;
}

/* The journal file's bytes [c->copied, upto), records appended since the
 * snapshot, onto it. Bytes below the file's published size never change. */
static int s_copy_tail(s_compaction_t *c, int from, uint64_t upto)
{
    char buf[1 << 16];
    while (c->copied < upto) {
        uint64_t left = upto - c->copied;
        size_t want = left < sizeof buf ? (size_t) left : sizeof buf;
        ssize_t n = pread(from, buf, want, (off_t) c->copied);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || rdzv_journal_write_all(c->fd, buf, (size_t) n) < 0)
            return -1;
        c->copied += (uint64_t) n;
    }
    return 0;
}

/* Closing the last descriptor of the replaced file frees its blocks, which
 * for a journal of hundreds of MiB took ext4 about 100 ms: not under the
 * core's lock. */
static void *s_close(void *arg)
{
    close((int) (intptr_t) arg);
    return NULL;
}

static void s_close_later(int fd)
{
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, s_close, (void *) (intptr_t) fd) != 0)
        close(fd);
    pthread_attr_destroy(&attr);
}

int rdzv_journal_file_compact_finish(void *impl, void **c_p, bool wait)
{
    rdzv_journal_file_t *self = impl;
    s_compaction_t *c = *c_p;
    if (!wait && !atomic_load(&c->done))
        return 0;
    pthread_join(c->thread, NULL);
    *c_p = NULL;
    if (self->queued.len > 0 || !c->ok) {
        s_free(c);
        return -1;
    }
    /* Everything the old file holds is durable before it is replaced. */
    rdzv_syncer_wait(self->syncer, rdzv_journal_file_written(self));
    uint64_t tail = self->size - c->cut;
    char path[4096];
    snprintf(path, sizeof path, "%s/journal", self->dir);
    if (s_copy_tail(c, self->fd, self->size) < 0 || fdatasync(c->fd) < 0
        || rename(c->tmp, path) < 0) {
        s_free(c);
        return -1;
    }
    rdzv_journal_fsync_dir(self->dir);
    /* The new file is durable; the old fd closes once the syncer has let
     * go of it. Logical offsets go on growing (journal_file.h). */
    int old = self->fd;
    self->fd = c->fd;
    self->base += self->size;
    self->size = c->len + tail;
    rdzv_syncer_reset(self->syncer, self->fd, rdzv_journal_file_written(self));
    s_close_later(old);
    c->fd = -1;
    free(c);
    return 1;
}

void rdzv_journal_file_compact_abort(void *impl, void **c_p)
{
    (void) impl;
    s_compaction_t *c = *c_p;
    pthread_join(c->thread, NULL);
    s_free(c);
    *c_p = NULL;
}
