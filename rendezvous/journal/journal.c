#include "journal_private.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define S_HEADER 8
#define S_MAX_RECORD (16u << 20)   /* far above any record rdzvd writes */



static void s_put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char) v;
    p[1] = (unsigned char) (v >> 8);
    p[2] = (unsigned char) (v >> 16);
    p[3] = (unsigned char) (v >> 24);
}

static uint32_t s_get_u32(const unsigned char *p)
{
    return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16
           | (uint32_t) p[3] << 24;
}

static uint32_t s_crc(const void *data, size_t len)
{
    return (uint32_t) crc32(crc32(0L, Z_NULL, 0), data, (uInt) len);
}

long rdzv_journal_frame(const char *json, size_t len, unsigned char *buf, size_t cap)
{
    if (len > S_MAX_RECORD || len + S_HEADER > cap)
        return -1;
    s_put_u32(buf, (uint32_t) len);
    s_put_u32(buf + 4, s_crc(json, len));
    memcpy(buf + S_HEADER, json, len);
    return (long) (len + S_HEADER);
}

rdzv_journal_t *rdzv_journal_open(const char *dir, bool do_fsync,
                                  char *err, size_t errlen)
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
    rdzv_journal_t *self = fd >= 0 ? calloc(1, sizeof *self) : NULL;
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
        rdzv_journal_destroy(&self);
        return NULL;
    }
    return self;
}

void rdzv_journal_destroy(rdzv_journal_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_journal_t *self = *self_p;
    rdzv_etcdj_destroy(&self->etcd);
    rdzv_syncer_destroy(&self->syncer);
    if (self->fd >= 0)
        close(self->fd);
    if (self->lock_fd >= 0)
        close(self->lock_fd);
    free(self->dir);
    free(self->buf);
    free(self);
    *self_p = NULL;
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

/* Length of the valid record at data[off], 0 if it is damaged. */
static size_t s_record_at(const unsigned char *data, size_t len, size_t off)
{
    if (len - off < S_HEADER)
        return 0;
    uint32_t rlen = s_get_u32(data + off);
    if (rlen == 0 || rlen > S_MAX_RECORD || rlen > len - off - S_HEADER)
        return 0;
    if (s_crc(data + off + S_HEADER, rlen) != s_get_u32(data + off + 4))
        return 0;
    return S_HEADER + rlen;
}

/* A damaged record is a torn tail only when it is the last thing written:
 * nothing valid follows it. A flipped bit in a middle record's length can
 * make it look as if it ran past the end, so the length alone proves
 * nothing; a valid record further on (its CRC matching by chance is
 * negligible) proves the damage is in the middle. */
static bool s_is_tail(const unsigned char *data, size_t len, size_t off)
{
    for (size_t p = off + 1; p + S_HEADER < len; p++)
        if (s_record_at(data, len, p) > 0)
            return false;
    return true;
}

long rdzv_journal_replay(rdzv_journal_t *self, rdzv_journal_apply_fn *apply,
                         void *arg, bool repair, size_t *torn_bytes,
                         char *err, size_t errlen)
{
    if (self->etcd) {
        *torn_bytes = 0;
        return rdzv_etcdj_replay(self->etcd, apply, arg, err, errlen);
    }
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
        size_t rec = s_record_at(data, len, off);
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
        cJSON *record = cJSON_ParseWithLength((const char *) data + off + S_HEADER,
                                              rec - S_HEADER);
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
    return applied;
}

int rdzv_journal_append(rdzv_journal_t *self, const cJSON *record)
{
    if (self->etcd)
        return rdzv_etcdj_append(self->etcd, record);
    char *json = cJSON_PrintUnformatted(record);
    if (!json)
        return -1;
    size_t jlen = strlen(json);
    size_t need = self->len + jlen + S_HEADER;
    if (need > self->cap) {
        size_t cap = self->cap ? self->cap : 4096;
        while (cap < need)
            cap *= 2;
        char *grown = realloc(self->buf, cap);
        if (!grown) {
            free(json);
            return -1;
        }
        self->buf = grown;
        self->cap = cap;
    }
    long framed = rdzv_journal_frame(json, jlen, (unsigned char *) self->buf + self->len,
                                     self->cap - self->len);
    free(json);
    if (framed < 0)
        return -1;
    self->len += (size_t) framed;
    return 0;
}

bool rdzv_journal_pending(const rdzv_journal_t *self)
{
    if (self->etcd)
        return rdzv_etcdj_pending(self->etcd);
    return self->len > 0;
}

int rdzv_journal_write(rdzv_journal_t *self)
{
    if (self->etcd) {
        if (rdzv_etcdj_write(self->etcd) == 0)
            return 0;
        self->failed_errno = ENOMEM;
        return -1;
    }
    if (self->failed_errno) {
        /* A write of this batch failed already: what came after it in the
         * batch may depend on it, so none of it reaches the file. */
        self->len = 0;
        return -1;
    }
    size_t done = 0;
    while (done < self->len) {
        ssize_t n = pwrite(self->fd, self->buf + done, self->len - done,
                           (off_t) (self->size + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            /* Leave no half record behind: the next replay would call it torn. */
            if (ftruncate(self->fd, (off_t) self->size) < 0) {
                /* Nothing more can be done; replay will cut the tail. */
            }
            self->failed_errno = n < 0 ? errno : EIO;
            self->len = 0;
            return -1;
        }
        done += (size_t) n;
    }
    self->size += self->len;
    atomic_store(&self->published, self->size);
    self->len = 0;
    return 0;
}

uint64_t rdzv_journal_written(const rdzv_journal_t *self)
{
    if (self->etcd)
        return rdzv_etcdj_written(self->etcd);
    return self->base + self->size;
}

void rdzv_journal_sync_start(rdzv_journal_t *self)
{
    if (self->etcd)
        return;                     /* the committer started with the write */
    rdzv_syncer_start(self->syncer, rdzv_journal_written(self));
}

int rdzv_journal_wait(rdzv_journal_t *self, uint64_t upto)
{
    if (self->etcd)
        return rdzv_etcdj_wait(self->etcd, upto, RDZV_JOURNAL_UNAVAILABLE_MS);
    rdzv_syncer_wait(self->syncer, upto);
    return 0;
}

int rdzv_journal_take_failure(rdzv_journal_t *self)
{
    int e = self->failed_errno;
    self->failed_errno = 0;
    return e;
}

int rdzv_journal_flush(rdzv_journal_t *self)
{
    if (self->etcd)
        return rdzv_etcdj_write(self->etcd) == 0
               && rdzv_etcdj_wait(self->etcd, rdzv_etcdj_written(self->etcd),
                                  RDZV_JOURNAL_UNAVAILABLE_MS) == 0 ? 0 : -1;
    rdzv_journal_write(self);
    int e = rdzv_journal_take_failure(self);
    if (e) {
        errno = e;
        return -1;
    }
    rdzv_syncer_wait(self->syncer, rdzv_journal_written(self));
    return 0;
}

void rdzv_journal_sync_latency(rdzv_journal_t *self, rdzv_histogram_t *out)
{
    if (self->etcd) {
        rdzv_etcdj_latency(self->etcd, out);
        return;
    }
    rdzv_syncer_latency(self->syncer, out);
}

double rdzv_journal_sync_busy_s(rdzv_journal_t *self)
{
    /* An etcd that cannot commit is etcd's failure, answered "unavailable";
     * /healthz failing on it would have the kubelet restart every replica
     * into an etcd that still cannot commit. */
    if (self->etcd)
        return 0;
    return rdzv_syncer_busy_s(self->syncer);
}

void rdzv_journal_set_sync_fn(rdzv_journal_t *self, int (*fn)(int fd))
{
    if (self->etcd)
        return;
    self->sync_fn = fn;
    rdzv_syncer_set_sync_fn(self->syncer, fn);
}

int rdzv_journal_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int rdzv_journal_write_all(int fd, const char *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, buf + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        done += (size_t) n;
    }
    return 0;
}

long rdzv_journal_repaired_at(const rdzv_journal_t *self)
{
    return self->repaired_at;
}

uint64_t rdzv_journal_size(const rdzv_journal_t *self)
{
    if (self->etcd)
        return rdzv_etcdj_size(self->etcd);
    return self->size;
}

rdzv_journal_t *rdzv_journal_open_etcd(const rdzv_etcd_config_t *cfg, char *err, size_t errlen)
{
    rdzv_journal_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    self->fd = self->lock_fd = -1;
    self->repaired_at = -1;
    if (!(self->etcd = rdzv_etcdj_new(cfg, err, errlen)))
        rdzv_journal_destroy(&self);
    return self;
}

int rdzv_journal_campaign(rdzv_journal_t *self, const char *advertise,
                          rdzv_journal_follow_fn *fn, void *arg, char *err, size_t errlen)
{
    return self->etcd ? rdzv_etcdj_campaign(self->etcd, advertise, fn, arg, err, errlen) : 0;
}

bool rdzv_journal_leading(const rdzv_journal_t *self)
{
    return !self->etcd || rdzv_etcdj_leading(self->etcd);
}

void rdzv_journal_leader(rdzv_journal_t *self, char *buf, size_t len)
{
    if (self->etcd)
        rdzv_etcdj_leader(self->etcd, buf, len);
    else if (len)
        buf[0] = '\0';
}

bool rdzv_journal_etcd_stats(rdzv_journal_t *self, rdzv_journal_etcd_stats_t *out)
{
    if (self->etcd)
        rdzv_etcdj_stats(self->etcd, out);
    return self->etcd != NULL;
}
