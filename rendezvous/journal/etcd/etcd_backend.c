/* The etcd journal behind journal.h's interface (journal_backend.h): each
 * call of the vtable in terms of etcd_journal.h. */
#include "etcd_journal.h"
#include "journal_backend.h"
#include "journal_opts.h"

#include <errno.h>
#include <stdio.h>

static long s_replay(void *impl, rdzv_journal_apply_fn *apply, void *arg, bool repair,
                     size_t *torn_bytes, char *err, size_t errlen)
{
    (void) repair;               /* etcd's values are whole or absent: nothing is torn */
    *torn_bytes = 0;
    return rdzv_etcdj_replay(impl, apply, arg, err, errlen);
}

static int s_append(void *impl, const cJSON *record)
{
    return rdzv_etcdj_append(impl, record) == 0 ? 0 : -ENOMEM;
}

static bool s_pending(const void *impl)
{
    return rdzv_etcdj_pending(impl);
}

static int s_write(void *impl, char *err, size_t errlen)
{
    if (rdzv_etcdj_write(impl) == 0)
        return 0;
    snprintf(err, errlen, "out of memory handing records to etcd's committer");
    return -ENOMEM;
}

static uint64_t s_written(const void *impl)
{
    return rdzv_etcdj_written(impl);
}

/* The committer starts with the write. */
static void s_sync_start(void *impl)
{
    (void) impl;
}

static int s_wait(void *impl, uint64_t upto, char *err, size_t errlen)
{
    if (rdzv_etcdj_wait(impl, upto, RDZV_JOURNAL_UNAVAILABLE_MS) == 0)
        return 0;
    snprintf(err, errlen, "etcd did not commit this change in time (no quorum?); ask again");
    return -ETIMEDOUT;
}

static void *s_compact_start(void *impl, cJSON *records, void (*release)(void *), void *arg)
{
    return rdzv_etcdj_compact_start(impl, records, release, arg);
}

static int s_compact_finish(void *impl, void **c, bool wait)
{
    rdzv_etcdj_compaction_t *e = *c;
    int rc = rdzv_etcdj_compact_finish(impl, &e, wait);
    *c = e;
    return rc;
}

/* Its pieces are in etcd already: let it finish; the head it moves covers
 * only records etcd holds. */
static void s_compact_abort(void *impl, void **c)
{
    if (s_compact_finish(impl, c, true) == 0)
        *c = NULL;
}

static uint64_t s_size(const void *impl)
{
    return rdzv_etcdj_size(impl);
}

/* etcd's space (it refuses writes past its quota, 2 GiB unless
 * --quota-backend-bytes says otherwise) and its commits. */
static void s_stats(void *impl, rdzv_journal_stats_t *out)
{
    rdzv_journal_etcd_stats_t e;
    rdzv_etcdj_stats(impl, &e);
    out->bytes = e.log_bytes;
    out->bytes_help = "Bytes of the snapshot and the log values after it in etcd.";
    rdzv_etcdj_latency(impl, &out->sync);
    out->sync_name = "rdzv_etcd_commit_seconds";
    out->sync_help = "Seconds one etcd transaction of the journal took.";
    const rdzv_journal_gauge_t g[] = {
        { "rdzv_etcd_leader", "gauge", "1 while this rdzvd leads, 0 while it stands by.",
          e.leading },
        { "rdzv_etcd_db_bytes", "gauge", "Size of etcd's database, as the member rdzvd talks "
          "to reports it.", e.db_bytes },
        { "rdzv_etcd_quota_bytes", "gauge", "etcd's default space quota.", e.db_quota_bytes },
        { "rdzv_etcd_applied_seq", "gauge", "The last log value replayed, followed or put.",
          e.applied_seq },
        { "rdzv_etcd_unavailable_total", "counter", "Batches of replies refused as "
          "unavailable: etcd did not commit in time.", e.unavailable },
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0] && i < RDZV_JOURNAL_GAUGES; i++)
        out->gauge[out->ngauge++] = g[i];
}

static int s_campaign(void *impl, const char *advertise, rdzv_journal_follow_fn *fn, void *arg,
                      char *err, size_t errlen)
{
    return rdzv_etcdj_campaign(impl, advertise, fn, arg, err, errlen);
}

static bool s_leading(const void *impl)
{
    return rdzv_etcdj_leading(impl);
}

static void s_leader(void *impl, char *buf, size_t len)
{
    rdzv_etcdj_leader(impl, buf, len);
}

static void s_close(void *impl)
{
    rdzv_etcdj_t *self = impl;
    rdzv_etcdj_destroy(&self);
}

static const rdzv_journal_backend_t s_backend = {
    .replay = s_replay, .append = s_append, .pending = s_pending, .write = s_write,
    .written = s_written, .sync_start = s_sync_start, .wait = s_wait,
    .compact_start = s_compact_start, .compact_finish = s_compact_finish,
    .compact_abort = s_compact_abort, .size = s_size, .stats = s_stats,
    .campaign = s_campaign, .leading = s_leading, .leader = s_leader, .close = s_close,
};

void *rdzv_journal_remote_open(const rdzv_journal_remote_t *remote,
                               const rdzv_journal_backend_t **ops, char *err, size_t errlen)
{
    *ops = &s_backend;
    return rdzv_etcdj_new(&remote->etcd, err, errlen);
}
