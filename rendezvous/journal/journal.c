/* journal.h's calls, each handed to the journal's backend
 * (journal_backend.h). */
#include "journal_backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

struct rdzv_compaction {
    void *impl;                  /* the backend's */
};

static rdzv_journal_t *s_new(const rdzv_journal_backend_t *ops, void *impl, char *err,
                             size_t errlen)
{
    if (!impl)
        return NULL;
    rdzv_journal_t *self = malloc(sizeof *self);
    if (!self) {
        ops->close(impl);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    *self = (rdzv_journal_t) { .ops = ops, .impl = impl };
    return self;
}

rdzv_journal_t *rdzv_journal_open_at(const rdzv_journal_remote_t *remote, const char *dir,
                                     bool do_fsync, char *err, size_t errlen)
{
    if (!remote)
        return rdzv_journal_open(dir, do_fsync, err, errlen);
    const rdzv_journal_backend_t *ops = NULL;
    void *impl = rdzv_journal_remote_open(remote, &ops, err, errlen);
    return s_new(ops, impl, err, errlen);
}

rdzv_journal_t *rdzv_journal_open(const char *dir, bool do_fsync, char *err, size_t errlen)
{
    return s_new(&rdzv_journal_file_backend, rdzv_journal_file_open(dir, do_fsync, err, errlen),
                 err, errlen);
}

void rdzv_journal_destroy(rdzv_journal_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    (*self_p)->ops->close((*self_p)->impl);
    free(*self_p);
    *self_p = NULL;
}

long rdzv_journal_replay(rdzv_journal_t *self, rdzv_journal_apply_fn *apply, void *arg,
                         bool repair, size_t *torn_bytes, char *err, size_t errlen)
{
    *torn_bytes = 0;
    return self->ops->replay(self->impl, apply, arg, repair, torn_bytes, err, errlen);
}

int rdzv_journal_append(rdzv_journal_t *self, const cJSON *record)
{
    return self->ops->append(self->impl, record);
}

bool rdzv_journal_pending(const rdzv_journal_t *self)
{
    return self->ops->pending(self->impl);
}

int rdzv_journal_write(rdzv_journal_t *self, char *err, size_t errlen)
{
    return self->ops->write(self->impl, err, errlen);
}

uint64_t rdzv_journal_written(const rdzv_journal_t *self)
{
    return self->ops->written(self->impl);
}

void rdzv_journal_sync_start(rdzv_journal_t *self)
{
    self->ops->sync_start(self->impl);
}

int rdzv_journal_wait(rdzv_journal_t *self, uint64_t upto, char *err, size_t errlen)
{
    return self->ops->wait(self->impl, upto, err, errlen);
}

int rdzv_journal_flush(rdzv_journal_t *self, char *err, size_t errlen)
{
    int rc = rdzv_journal_write(self, err, errlen);
    if (rc < 0)
        return rc;
    rdzv_journal_sync_start(self);
    return rdzv_journal_wait(self, rdzv_journal_written(self), err, errlen);
}

rdzv_compaction_t *rdzv_journal_compact_start(rdzv_journal_t *self, cJSON *records,
                                              void (*release)(void *), void *arg)
{
    rdzv_compaction_t *c = malloc(sizeof *c);
    if (!c) {
        cJSON_Delete(records);
        if (release)
            release(arg);
        return NULL;
    }
    if (!(c->impl = self->ops->compact_start(self->impl, records, release, arg))) {
        free(c);
        return NULL;
    }
    return c;
}

int rdzv_journal_compact_finish(rdzv_journal_t *self, rdzv_compaction_t **c_p, bool wait)
{
    int rc = self->ops->compact_finish(self->impl, &(*c_p)->impl, wait);
    if (rc != 0) {
        free(*c_p);
        *c_p = NULL;
    }
    return rc;
}

void rdzv_journal_compact_abort(rdzv_journal_t *self, rdzv_compaction_t **c_p)
{
    if (!c_p || !*c_p)
        return;
    self->ops->compact_abort(self->impl, &(*c_p)->impl);
    free(*c_p);
    *c_p = NULL;
}

int rdzv_journal_compact(rdzv_journal_t *self, cJSON *records)
{
    rdzv_compaction_t *c = rdzv_journal_compact_start(self, records, NULL, NULL);
    return c && rdzv_journal_compact_finish(self, &c, true) == 1 ? 0 : -1;
}

uint64_t rdzv_journal_size(const rdzv_journal_t *self)
{
    return self->ops->size(self->impl);
}

long rdzv_journal_repaired_at(const rdzv_journal_t *self)
{
    return self->ops == &rdzv_journal_file_backend ? rdzv_journal_file_repaired_at(self->impl)
                                                   : -1;
}

double rdzv_journal_sync_busy_s(rdzv_journal_t *self)
{
    return self->ops == &rdzv_journal_file_backend ? rdzv_journal_file_sync_busy_s(self->impl)
                                                   : 0;
}

void rdzv_journal_set_sync_fn(rdzv_journal_t *self, int (*fn)(int fd))
{
    if (self->ops == &rdzv_journal_file_backend)
        rdzv_journal_file_set_sync_fn(self->impl, fn);
}

void rdzv_journal_stats(rdzv_journal_t *self, rdzv_journal_stats_t *out)
{
    *out = (rdzv_journal_stats_t) { 0 };
    self->ops->stats(self->impl, out);
}

int rdzv_journal_campaign(rdzv_journal_t *self, const char *advertise,
                          rdzv_journal_follow_fn *fn, void *arg, char *err, size_t errlen)
{
    return self->ops->campaign ? self->ops->campaign(self->impl, advertise, fn, arg, err, errlen)
                               : 0;
}

bool rdzv_journal_leading(const rdzv_journal_t *self)
{
    return !self->ops->leading || self->ops->leading(self->impl);
}

void rdzv_journal_leader(rdzv_journal_t *self, char *buf, size_t len)
{
    if (self->ops->leader)
        self->ops->leader(self->impl, buf, len);
    else if (len)
        buf[0] = '\0';
}
