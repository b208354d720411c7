/* rdzvd built without libcurl: there is no etcd journal, and
 * rdzv_journal_open_etcd says so; nothing else here is ever reached, since
 * no journal holds an etcd one. */
#include "etcd_journal.h"

#include <stdio.h>

rdzv_etcdj_t *rdzv_etcdj_new(const rdzv_etcd_config_t *cfg, char *err, size_t errlen)
{
    (void) cfg;
    snprintf(err, errlen, "this rdzvd was built without etcd support (meson -Detcd=enabled "
             "needs libcurl4-openssl-dev)");
    return NULL;
}

void rdzv_etcdj_destroy(rdzv_etcdj_t **self_p)
{
    (void) self_p;
}

#define S_UNREACHED(...) { (void) self; return __VA_ARGS__; }
long rdzv_etcdj_replay(rdzv_etcdj_t *self, rdzv_journal_apply_fn *apply, void *arg,
                       char *err, size_t errlen) S_UNREACHED(-1)
int rdzv_etcdj_append(rdzv_etcdj_t *self, const cJSON *record) S_UNREACHED(-1)
bool rdzv_etcdj_pending(const rdzv_etcdj_t *self) S_UNREACHED(false)
int rdzv_etcdj_write(rdzv_etcdj_t *self) S_UNREACHED(-1)
uint64_t rdzv_etcdj_written(const rdzv_etcdj_t *self) S_UNREACHED(0)
int rdzv_etcdj_wait(rdzv_etcdj_t *self, uint64_t upto, long timeout_ms) S_UNREACHED(-1)
void rdzv_etcdj_latency(rdzv_etcdj_t *self, rdzv_histogram_t *out) S_UNREACHED()
uint64_t rdzv_etcdj_size(const rdzv_etcdj_t *self) S_UNREACHED(0)
rdzv_etcdj_compaction_t *rdzv_etcdj_compact_start(rdzv_etcdj_t *self, cJSON *records,
                                                  void (*release)(void *), void *arg)
    S_UNREACHED(NULL)
int rdzv_etcdj_compact_finish(rdzv_etcdj_t *self, rdzv_etcdj_compaction_t **c, bool wait)
    S_UNREACHED(-1)
int rdzv_etcdj_campaign(rdzv_etcdj_t *self, const char *advertise, rdzv_journal_follow_fn *fn,
                        void *arg, char *err, size_t errlen) S_UNREACHED(-1)
bool rdzv_etcdj_leading(const rdzv_etcdj_t *self) S_UNREACHED(true)
void rdzv_etcdj_leader(rdzv_etcdj_t *self, char *buf, size_t len) S_UNREACHED()
void rdzv_etcdj_stats(rdzv_etcdj_t *self, rdzv_journal_etcd_stats_t *out) S_UNREACHED()
