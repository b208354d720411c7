/* Who leads: the lease, its keeper, and the campaign in etcd's election
 * (etcd_journal_private.h). A standby follows the log by watch while it
 * campaigns; once elected it stops the watch, reads what the watch had not
 * delivered yet, and commits from there: no full replay on takeover. */
#include "etcd_journal_private.h"
#include "log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The keeper's period, and how often a standby asks who leads and how
 * large etcd's database is. */
#define S_TICK_MS 100
#define S_LEADER_POLL_MS 1000
#define S_STATUS_POLL_MS 5000
/* A keepalive that takes longer counts as failed (and is tried again). */
#define S_KEEPALIVE_MS 1000L

static void s_id(char *buf, size_t len, int64_t id)
{
    snprintf(buf, len, "%" PRId64, id);
}

static int s_first(void *arg, const cJSON *msg)
{
    cJSON **out = arg;
    *out = cJSON_Duplicate(msg, true);
    return 1;
}

static bool s_lease_unknown(const char *err)
{
    return strstr(err, "lease not found") != NULL;
}

/* Renews the lease once; a lease etcd no longer knows ends this rdzvd. */
static void s_keepalive(rdzv_etcdj_t *self, rdzv_etcd_t *conn, int64_t *complained_ms)
{
    char err[512], id[32];
    int64_t sent = rdzv_etcdj_now_ms();
    cJSON *body = cJSON_CreateObject(), *msg = NULL;
    s_id(id, sizeof id, self->lease_id);
    cJSON_AddStringToObject(body, "ID", id);
    int rc = rdzv_etcd_stream(conn, "/v3/lease/keepalive", body, S_KEEPALIVE_MS, s_first, &msg,
                              NULL, err, sizeof err);
    cJSON_Delete(body);
    const cJSON *result = cJSON_GetObjectItemCaseSensitive(msg, "result");
    int64_t ttl = rdzv_etcd_int(result, "TTL");
    if (rc == 1 && result && ttl > 0) {
        pthread_mutex_lock(&self->lock);
        /* etcd counts the TTL from when it got this; we from before we
         * sent it, and a tenth less against clocks that run apart. */
        self->lease_deadline_ms = sent + ttl * 900;
        pthread_cond_broadcast(&self->cond);
        pthread_mutex_unlock(&self->lock);
    } else if ((rc == 1 && result) || (rc == RDZV_ETCD_REFUSED && s_lease_unknown(err))) {
        cJSON_Delete(msg);
        rdzv_etcdj_fenced(self, "its lease expired");
    } else if (rdzv_etcdj_now_ms() - *complained_ms > 5000) {
        rdzv_core_log("etcd", "cannot renew the lease (%s); trying again", rc == 1 ? "no result" : err);
        *complained_ms = rdzv_etcdj_now_ms();
    }
    cJSON_Delete(msg);
}

/* Whom a standby names: the value of the election's first key. */
static void s_poll_leader(rdzv_etcdj_t *self, rdzv_etcd_t *conn)
{
    char key[512], err[512];
    cJSON *body = cJSON_CreateObject(), *reply = NULL;
    rdzv_etcdj_key(self, key, sizeof key, "election");
    rdzv_etcd_add_b64(body, "name", key, strlen(key));
    int rc = rdzv_etcd_call(conn, "/v3/election/leader", body, RDZV_ETCDJ_CALL_MS, &reply,
                            err, sizeof err);
    cJSON_Delete(body);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(reply, "kv"),
                                                      "value");
    size_t len = 0;
    char *addr = rc == RDZV_ETCD_OK && cJSON_IsString(v) ? rdzv_etcd_unb64(v->valuestring, &len)
                                                          : NULL;
    if (rc != RDZV_ETCD_UNREACHABLE) {
        pthread_mutex_lock(&self->lock);
        snprintf(self->leader_addr, sizeof self->leader_addr, "%s", addr ? addr : "");
        pthread_mutex_unlock(&self->lock);
    }
    free(addr);
    cJSON_Delete(reply);
}

static void s_poll_status(rdzv_etcdj_t *self, rdzv_etcd_t *conn)
{
    char err[512];
    cJSON *body = cJSON_CreateObject(), *reply = NULL;
    if (rdzv_etcd_call(conn, "/v3/maintenance/status", body, RDZV_ETCDJ_CALL_MS, &reply,
                       err, sizeof err) == RDZV_ETCD_OK) {
        pthread_mutex_lock(&self->lock);
        self->db_bytes = (uint64_t) rdzv_etcd_int(reply, "dbSize");
        pthread_mutex_unlock(&self->lock);
    }
    cJSON_Delete(body);
    cJSON_Delete(reply);
}

static void *s_keeper(void *arg)
{
    rdzv_etcdj_t *self = arg;
    char err[512];
    rdzv_etcd_t *conn = rdzv_etcd_new(&self->cfg, err, sizeof err);
    int64_t next_keepalive = 0, next_leader = 0, next_status = 0, complained = 0;
    int64_t period = (int64_t) self->cfg.ttl_s * 1000 / 3;
    while (conn && !atomic_load(&self->stop)) {
        int64_t now = rdzv_etcdj_now_ms();
        if (now >= next_keepalive) {
            int64_t before = self->lease_deadline_ms;
            s_keepalive(self, conn, &complained);
            /* Renewed: the next in a third of the TTL; failed: soon. */
            next_keepalive = self->lease_deadline_ms != before ? now + period : now + 300;
        }
        if (!atomic_load(&self->leading) && now >= next_leader) {
            s_poll_leader(self, conn);
            next_leader = now + S_LEADER_POLL_MS;
        }
        if (now >= next_status) {
            s_poll_status(self, conn);
            next_status = now + S_STATUS_POLL_MS;
        }
        usleep(S_TICK_MS * 1000);
    }
    rdzv_etcd_destroy(&conn);
    return NULL;
}

/* Campaigns until elected (1) or stopped (0). */
static int s_campaign(rdzv_etcdj_t *self, rdzv_etcd_t *conn)
{
    char key[512], err[512], id[32];
    int64_t complained = 0;
    while (!atomic_load(&self->stop)) {
        cJSON *body = cJSON_CreateObject(), *msg = NULL;
        rdzv_etcdj_key(self, key, sizeof key, "election");
        rdzv_etcd_add_b64(body, "name", key, strlen(key));
        s_id(id, sizeof id, self->lease_id);
        cJSON_AddStringToObject(body, "lease", id);
        rdzv_etcd_add_b64(body, "value", self->advertise, strlen(self->advertise));
        /* Blocks in etcd until this lease's key is the oldest. */
        int rc = rdzv_etcd_stream(conn, "/v3/election/campaign", body, 0, s_first, &msg,
                                  &self->stop, err, sizeof err);
        cJSON_Delete(body);
        const cJSON *leader = cJSON_GetObjectItemCaseSensitive(msg, "leader");
        const cJSON *lkey = cJSON_GetObjectItemCaseSensitive(leader, "key");
        if (rc == 1 && cJSON_IsString(lkey)) {
            self->leader_key = strdup(lkey->valuestring);
            self->leader_rev = rdzv_etcd_int(leader, "rev");
            cJSON_Delete(msg);
            return 1;
        }
        cJSON_Delete(msg);
        if (rc == RDZV_ETCD_REFUSED && s_lease_unknown(err))
            rdzv_etcdj_fenced(self, "its lease expired while it campaigned");
        if (atomic_load(&self->stop))
            break;
        if (rdzv_etcdj_now_ms() - complained > 5000) {
            rdzv_core_log("etcd", "campaign: %s; campaigning again", rc == 1 ? "no leader key" : err);
            complained = rdzv_etcdj_now_ms();
        }
        usleep(300 * 1000);
    }
    return 0;
}

/* From elected to serving: the watch stops, the log is read to its end
 * (the core reloads instead if a compaction moved past what it holds),
 * and the committer starts after the last value there. */
static void *s_role(void *arg)
{
    rdzv_etcdj_t *self = arg;
    char err[512];
    rdzv_etcd_t *conn = rdzv_etcd_new(&self->cfg, err, sizeof err);
    if (!conn || s_campaign(self, conn) != 1) {
        rdzv_etcd_destroy(&conn);
        return NULL;
    }
    int64_t t0 = rdzv_etcdj_now_ms();
    pthread_mutex_lock(&self->follow_lock);
    atomic_store(&self->watch_stop, true);
    pthread_mutex_unlock(&self->follow_lock);
    int rc;
    while ((rc = rdzv_etcdj_catch_up(self, conn, true)) != 0 && !atomic_load(&self->stop)) {
        if (rc == 1)
            self->follow(self->follow_arg, RDZV_JOURNAL_RELOAD, NULL);
        else
            usleep(200 * 1000);
    }
    if (atomic_load(&self->stop)) {
        rdzv_etcd_destroy(&conn);
        return NULL;
    }
    self->follow(self->follow_arg, RDZV_JOURNAL_PROMOTED, NULL);
    pthread_mutex_lock(&self->lock);
    self->committed_seq = self->applied_seq;
    self->queued_seq = self->applied_seq;
    snprintf(self->leader_addr, sizeof self->leader_addr, "%s", self->advertise);
    atomic_store(&self->leading, true);
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->lock);
    rdzv_core_log("etcd", "leading: elected with revision %" PRId64 ", caught up to log %016"
                  PRIx64 " in %lld ms; serving as %s", self->leader_rev, self->applied_seq,
                  (long long) (rdzv_etcdj_now_ms() - t0), self->advertise);
    fflush(stderr);
    rdzv_etcdj_commit_loop(self, conn);
    rdzv_etcd_destroy(&conn);
    return NULL;
}

int rdzv_etcdj_campaign(rdzv_etcdj_t *self, const char *advertise, rdzv_journal_follow_fn *fn,
                        void *arg, char *err, size_t errlen)
{
    self->advertise = strdup(advertise);
    self->follow = fn;
    self->follow_arg = arg;
    rdzv_etcd_t *conn = rdzv_etcd_new(&self->cfg, err, errlen);
    cJSON *body = cJSON_CreateObject(), *reply = NULL;
    char ttl[32];
    snprintf(ttl, sizeof ttl, "%d", self->cfg.ttl_s);
    cJSON_AddStringToObject(body, "TTL", ttl);
    int64_t sent = 0;
    int rc = -1;
    while (conn) {
        cJSON_Delete(reply);
        sent = rdzv_etcdj_now_ms();
        rc = rdzv_etcd_call(conn, "/v3/lease/grant", body, RDZV_ETCDJ_CALL_MS, &reply, err, errlen);
        if (rc == RDZV_ETCD_OK || !rdzv_etcdj_start_again(self, conn, "taking a lease", err, errlen))
            break;
    }
    self->starting = false;
    cJSON_Delete(body);
    rdzv_etcd_destroy(&conn);
    self->lease_id = rc == RDZV_ETCD_OK ? rdzv_etcd_int(reply, "ID") : 0;
    cJSON_Delete(reply);
    if (!self->lease_id) {
        if (rc == RDZV_ETCD_OK)
            snprintf(err, errlen, "etcd granted no lease");
        return -1;
    }
    self->lease_deadline_ms = sent + (int64_t) self->cfg.ttl_s * 900;
    if (pthread_create(&self->keeper_thread, NULL, s_keeper, self) != 0
        || !(self->keeper_started = true)
        || pthread_create(&self->watch_thread, NULL, rdzv_etcdj_watch_thread, self) != 0
        || !(self->watch_started = true)
        || pthread_create(&self->role_thread, NULL, s_role, self) != 0) {
        snprintf(err, errlen, "cannot start the etcd threads");
        return -1;
    }
    self->role_started = true;
    rdzv_core_log("etcd", "standing by: lease %" PRIx64 " (TTL %d s), campaigning as %s",
                  (uint64_t) self->lease_id, self->cfg.ttl_s, advertise);
    return 0;
}
