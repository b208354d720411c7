/* The etcd journal's appends and its committer (etcd_journal.h). */
#include "etcd_journal_private.h"
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long rdzvd waits at start for an etcd that elects a leader or lacks
 * quorum, in leases (a minute at the default 5 s); then it exits as it
 * would at once for a wrong address. */
#define S_START_LEASES 12
#define S_START_PAUSE_FIRST_MS 250
#define S_START_PAUSE_CAP_MS 4000

static double s_now_s(void)
{
    return (double) rdzv_etcdj_now_ms() / 1000.0;
}

rdzv_etcdj_t *rdzv_etcdj_new(const rdzv_etcd_config_t *cfg, char *err, size_t errlen)
{
    rdzv_etcdj_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&self->lock, NULL);
    pthread_mutex_init(&self->follow_lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&self->cond, &attr);
    pthread_condattr_destroy(&attr);
    const char *prefix = cfg->prefix && *cfg->prefix ? cfg->prefix : "/rdzv";
    size_t n = strlen(prefix);
    while (n > 1 && prefix[n - 1] == '/')
        n--;
    self->prefix = strndup(prefix, n);
    self->cfg.endpoints = strdup(cfg->endpoints ? cfg->endpoints : "");
    self->cfg.prefix = self->prefix;
    self->cfg.ca = cfg->ca ? strdup(cfg->ca) : NULL;
    self->cfg.cert = cfg->cert ? strdup(cfg->cert) : NULL;
    self->cfg.key = cfg->key ? strdup(cfg->key) : NULL;
    self->cfg.ttl_s = cfg->ttl_s > 0 ? cfg->ttl_s : 5;
    self->starting = true;
    self->start_deadline_ms = rdzv_etcdj_now_ms() + (int64_t) S_START_LEASES * self->cfg.ttl_s * 1000;
    self->start_pause_ms = S_START_PAUSE_FIRST_MS;
    /* Reach etcd once now: a wrong --etcd fails at start, not later. */
    rdzv_etcd_t *conn = rdzv_etcd_new(&self->cfg, err, errlen);
    cJSON *body = cJSON_CreateObject();
    char key[512];
    rdzv_etcdj_add_range(body, rdzv_etcdj_key(self, key, sizeof key, "head"), NULL);
    int rc = -1;
    while (conn) {
        cJSON *reply = NULL;
        rc = rdzv_etcd_call(conn, "/v3/kv/range", body, RDZV_ETCDJ_CALL_MS, &reply, err, errlen);
        cJSON_Delete(reply);
        if (rc == RDZV_ETCD_OK || !rdzv_etcdj_start_again(self, conn, "reading the journal's head",
                                                          err, errlen))
            break;
    }
    cJSON_Delete(body);
    rdzv_etcd_destroy(&conn);
    if (rc != RDZV_ETCD_OK) {
        rdzv_etcdj_destroy(&self);
        return NULL;
    }
    return self;
}

bool rdzv_etcdj_start_again(rdzv_etcdj_t *self, const rdzv_etcd_t *conn, const char *what,
                            char *err, size_t errlen)
{
    if (!self->starting || !rdzv_etcd_transient(conn, err))
        return false;
    int64_t now = rdzv_etcdj_now_ms(), pause = self->start_pause_ms;
    if (now + pause > self->start_deadline_ms) {
        size_t n = strlen(err);
        snprintf(err + n, errlen - n, " (etcd was still electing or without quorum %d s after "
                 "start: giving up)", S_START_LEASES * self->cfg.ttl_s);
        return false;
    }
    rdzv_core_log("etcd", "%s: %s; etcd is electing a leader or has no quorum: trying again "
                  "in %.2f s, for %lld s more at most", what, err, (double) pause / 1000.0,
                  (long long) ((self->start_deadline_ms - now) / 1000));
    fflush(stderr);
    usleep((useconds_t) pause * 1000);
    self->start_pause_ms = pause * 2 > S_START_PAUSE_CAP_MS ? S_START_PAUSE_CAP_MS : pause * 2;
    return true;
}

static void s_free_jobs(rdzv_etcdj_job_t *job)
{
    while (job) {
        rdzv_etcdj_job_t *next = job->next;
        free(job->value);
        free(job);
        job = next;
    }
}

void rdzv_etcdj_destroy(rdzv_etcdj_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_etcdj_t *self = *self_p;
    pthread_mutex_lock(&self->lock);
    atomic_store(&self->stop, true);
    atomic_store(&self->watch_stop, true);
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->lock);
    if (self->role_started)
        pthread_join(self->role_thread, NULL);
    if (self->watch_started)
        pthread_join(self->watch_thread, NULL);
    if (self->keeper_started)
        pthread_join(self->keeper_thread, NULL);
    if (self->lease_id) {
        /* Gives the election to a standby now rather than after the TTL. */
        char err[256];
        rdzv_etcd_t *conn = rdzv_etcd_new(&self->cfg, err, sizeof err);
        cJSON *body = cJSON_CreateObject(), *reply = NULL;
        char id[32];
        snprintf(id, sizeof id, "%" PRId64, self->lease_id);
        cJSON_AddStringToObject(body, "ID", id);
        if (conn && rdzv_etcd_call(conn, "/v3/lease/revoke", body, RDZV_ETCDJ_CALL_MS, &reply,
                                   err, sizeof err) == RDZV_ETCD_OK
            && atomic_load(&self->leading))
            rdzv_core_log("etcd", "gave up the lead (lease revoked)");
        cJSON_Delete(body);
        cJSON_Delete(reply);
        rdzv_etcd_destroy(&conn);
    }
    s_free_jobs(self->head);
    free(self->buf);
    free(self->partial);
    free(self->advertise);
    free(self->leader_key);
    free(self->prefix);
    free((char *) self->cfg.endpoints);
    free((char *) self->cfg.ca);
    free((char *) self->cfg.cert);
    free((char *) self->cfg.key);
    pthread_cond_destroy(&self->cond);
    pthread_mutex_destroy(&self->lock);
    pthread_mutex_destroy(&self->follow_lock);
    free(self);
    *self_p = NULL;
}

static int s_reserve(rdzv_etcdj_t *self, size_t more)
{
    if (self->len + more <= self->cap)
        return 0;
    size_t cap = self->cap ? self->cap : 4096;
    while (cap < self->len + more)
        cap *= 2;
    char *grown = realloc(self->buf, cap);
    if (!grown)
        return -1;
    self->buf = grown;
    self->cap = cap;
    return 0;
}

/* The batch's text, cut into pieces, queued as jobs of consecutive SEQs.
 * Under the lock. */
static int s_queue_text(rdzv_etcdj_t *self, const char *text, size_t len)
{
    rdzv_etcdj_job_t *first = NULL, **link = &first;
    uint64_t seq = self->queued_seq;
    for (size_t off = 0; off < len; off += RDZV_ETCDJ_PIECE) {
        size_t n = len - off < RDZV_ETCDJ_PIECE ? len - off : RDZV_ETCDJ_PIECE;
        rdzv_etcdj_job_t *job = calloc(1, sizeof *job);
        char *value = job ? malloc(n + 1) : NULL;
        if (!value) {
            free(job);
            s_free_jobs(first);
            return -1;
        }
        value[0] = off + n < len ? '+' : '=';
        memcpy(value + 1, text + off, n);
        *job = (rdzv_etcdj_job_t) { .kind = RDZV_ETCDJ_JOB_LOG, .seq = ++seq, .value = value,
                                    .len = n + 1 };
        *link = job;
        link = &job->next;
    }
    if (self->tail)
        self->tail->next = first;
    else
        self->head = first;
    for (rdzv_etcdj_job_t *j = first; j; j = j->next)
        self->tail = j;
    self->queued_seq = seq;
    pthread_cond_broadcast(&self->cond);
    return 0;
}

int rdzv_etcdj_append(rdzv_etcdj_t *self, const cJSON *record)
{
    char *text = cJSON_PrintUnformatted(record);
    size_t n = text ? strlen(text) : 0;
    if (!text || s_reserve(self, n + 2) < 0) {
        free(text);
        return -1;
    }
    char sep = self->len == 0 ? '[' : ',';
    self->buf[self->len++] = sep;
    memcpy(self->buf + self->len, text, n);
    self->len += n;
    free(text);
    return 0;
}

bool rdzv_etcdj_pending(const rdzv_etcdj_t *self)
{
    return self->len > 0;
}

int rdzv_etcdj_write(rdzv_etcdj_t *self)
{
    if (self->len == 0)
        return 0;
    if (s_reserve(self, 1) < 0)
        return -1;
    self->buf[self->len++] = ']';
    pthread_mutex_lock(&self->lock);
    int rc = s_queue_text(self, self->buf, self->len);
    pthread_mutex_unlock(&self->lock);
    self->len = 0;
    return rc;
}

uint64_t rdzv_etcdj_written(const rdzv_etcdj_t *self)
{
    return self->queued_seq;
}

int rdzv_etcdj_wait(rdzv_etcdj_t *self, uint64_t upto, long timeout_ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (timeout_ms % 1000) * 1000000;
    if (deadline.tv_nsec >= 1000000000) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000;
    }
    int rc = 0;
    pthread_mutex_lock(&self->lock);
    /* A standby answers only not_leader: that depends on no commit. */
    while (atomic_load(&self->leading)
           && (self->committed_seq < upto || rdzv_etcdj_now_ms() >= self->lease_deadline_ms)) {
        if (pthread_cond_timedwait(&self->cond, &self->lock, &deadline) == ETIMEDOUT) {
            rc = -1;
            self->unavailable++;
            break;
        }
    }
    pthread_mutex_unlock(&self->lock);
    return rc;
}

void rdzv_etcdj_latency(rdzv_etcdj_t *self, rdzv_histogram_t *out)
{
    pthread_mutex_lock(&self->lock);
    *out = self->latency;
    pthread_mutex_unlock(&self->lock);
}

uint64_t rdzv_etcdj_size(const rdzv_etcdj_t *self)
{
    return self->snap_bytes + self->log_bytes;
}

bool rdzv_etcdj_leading(const rdzv_etcdj_t *self)
{
    return atomic_load(&self->leading);
}

void rdzv_etcdj_leader(rdzv_etcdj_t *self, char *buf, size_t len)
{
    pthread_mutex_lock(&self->lock);
    snprintf(buf, len, "%s", self->leader_addr);
    pthread_mutex_unlock(&self->lock);
}

void rdzv_etcdj_stats(rdzv_etcdj_t *self, rdzv_journal_etcd_stats_t *out)
{
    pthread_mutex_lock(&self->lock);
    *out = (rdzv_journal_etcd_stats_t) {
        .leading = atomic_load(&self->leading), .db_bytes = self->db_bytes,
        .db_quota_bytes = RDZV_ETCDJ_DEFAULT_QUOTA, .log_bytes = rdzv_etcdj_size(self),
        .applied_seq = self->applied_seq, .unavailable = self->unavailable,
    };
    pthread_mutex_unlock(&self->lock);
}

/* Puts one piece of the log, only while this rdzvd leads and only if its
 * key is new. An earlier try whose answer was lost may have put it: if the
 * election key is still ours, the key that exists is that try's. */
static int s_commit_log(rdzv_etcdj_t *self, rdzv_etcd_t *conn, const rdzv_etcdj_job_t *job,
                        char *err, size_t errlen)
{
    char key[512];
    rdzv_etcdj_log_key(self, key, sizeof key, job->seq);
    cJSON *compares = cJSON_CreateArray();
    cJSON_AddItemToArray(compares, rdzv_etcdj_leader_compare(self));
    cJSON *fresh = cJSON_CreateObject();
    rdzv_etcd_add_b64(fresh, "key", key, strlen(key));
    cJSON_AddStringToObject(fresh, "target", "CREATE");
    cJSON_AddStringToObject(fresh, "result", "EQUAL");
    cJSON_AddStringToObject(fresh, "create_revision", "0");
    cJSON_AddItemToArray(compares, fresh);
    cJSON *success = cJSON_CreateArray(), *put = cJSON_CreateObject();
    cJSON *req = cJSON_AddObjectToObject(put, "request_put");
    rdzv_etcd_add_b64(req, "key", key, strlen(key));
    rdzv_etcd_add_b64(req, "value", job->value, job->len);
    cJSON_AddItemToArray(success, put);
    cJSON *failure = cJSON_CreateArray(), *get = cJSON_CreateObject();
    cJSON *range = cJSON_AddObjectToObject(get, "request_range");
    cJSON_AddStringToObject(range, "key", self->leader_key);
    cJSON_AddItemToArray(failure, get);
    cJSON *reply = NULL;
    int rc = rdzv_etcdj_txn(conn, compares, success, failure, &reply, err, errlen);
    if (rc == 0) {
        /* Which compare failed: the election key's answers. */
        const cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(reply, "responses"), 0);
        const cJSON *rr = cJSON_GetObjectItemCaseSensitive(r, "response_range");
        const cJSON *kv = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(rr, "kvs"), 0);
        if (kv && rdzv_etcd_int(kv, "create_revision") == self->leader_rev)
            rc = 1;
        else
            snprintf(err, errlen, "the election key of this rdzvd is gone: a put of log "
                     "%016" PRIx64 " was refused", job->seq);
    }
    cJSON_Delete(reply);
    return rc;
}

/* The committer: the role thread's loop once it leads. Puts the jobs in
 * order; an unreachable etcd is tried again (the same job, so nothing is
 * put twice or out of order), a failed leader compare ends rdzvd. */
void rdzv_etcdj_commit_loop(rdzv_etcdj_t *self, rdzv_etcd_t *conn)
{
    char err[512];
    int64_t complained_ms = 0;
    while (!atomic_load(&self->stop)) {
        pthread_mutex_lock(&self->lock);
        while (!self->head && !atomic_load(&self->stop))
            pthread_cond_wait(&self->cond, &self->lock);
        rdzv_etcdj_job_t *job = self->head;
        pthread_mutex_unlock(&self->lock);
        if (!job)
            break;
        double t0 = s_now_s();
        int rc = job->kind == RDZV_ETCDJ_JOB_LOG
                 ? s_commit_log(self, conn, job, err, sizeof err)
                 : rdzv_etcdj_commit_head(self, conn, job->compaction, err, sizeof err);
        if (rc == 0)
            rdzv_etcdj_fenced(self, err);
        if (rc < 0) {
            if (rdzv_etcdj_now_ms() - complained_ms > 5000) {
                rdzv_core_log("etcd", "cannot commit (%s); retrying, replies wait", err);
                complained_ms = rdzv_etcdj_now_ms();
            }
            usleep(100 * 1000);
            continue;
        }
        pthread_mutex_lock(&self->lock);
        self->head = job->next;
        if (!self->head)
            self->tail = NULL;
        if (job->kind == RDZV_ETCDJ_JOB_LOG) {
            self->committed_seq = self->applied_seq = job->seq;
            self->log_bytes += job->len;
        }
        rdzv_histogram_observe(&self->latency, s_now_s() - t0);
        pthread_cond_broadcast(&self->cond);
        pthread_mutex_unlock(&self->lock);
        free(job->value);
        free(job);
    }
}
