/* Compaction of the etcd journal (etcd_journal.h): the state's records go
 * to P/snap/GEN/ in pieces, written by a thread while appends go on; then
 * the committer, in order with the appends, points P/head at them and
 * deletes the log values and older snapshots they replace, in one
 * transaction, and lets etcd drop the history before it. etcd's space
 * quota (2 GiB by default) then holds the state and the log since, not
 * every value ever put. */
#include "etcd_journal_private.h"
#include "log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Tries of one piece before the compaction gives up (the journal stays). */
#define S_TRIES 10

static void s_release(rdzv_etcdj_compaction_t *c)
{
    cJSON_Delete(c->records);
    c->records = NULL;
    if (c->release)
        c->release(c->release_arg);
    c->release = NULL;
}

/* Puts one piece of the snapshot while this rdzvd leads: 1, 0 (no longer
 * leads), < 0 unreachable. */
static int s_put_piece(rdzv_etcdj_t *self, rdzv_etcd_t *conn, const char *key,
                       const char *value, size_t len, char *err, size_t errlen)
{
    cJSON *compares = cJSON_CreateArray(), *success = cJSON_CreateArray();
    cJSON_AddItemToArray(compares, rdzv_etcdj_leader_compare(self));
    cJSON *op = cJSON_CreateObject();
    cJSON *put = cJSON_AddObjectToObject(op, "request_put");
    rdzv_etcd_add_b64(put, "key", key, strlen(key));
    rdzv_etcd_add_b64(put, "value", value, len);
    cJSON_AddItemToArray(success, op);
    cJSON *reply = NULL;
    int rc = rdzv_etcdj_txn(conn, compares, success, NULL, &reply, err, errlen);
    cJSON_Delete(reply);
    return rc;
}

static void *s_write(void *arg)
{
    rdzv_etcdj_compaction_t *c = arg;
    rdzv_etcdj_t *self = c->journal;
    char err[512], key[512];
    char *text = cJSON_PrintUnformatted(c->records);
    s_release(c);
    rdzv_etcd_t *conn = text ? rdzv_etcd_new(&self->cfg, err, sizeof err) : NULL;
    size_t len = text ? strlen(text) : 0;
    char *value = conn ? malloc(RDZV_ETCDJ_PIECE + 1) : NULL;
    bool ok = value != NULL;
    unsigned chunk = 0;
    for (size_t off = 0; ok && (off < len || chunk == 0); off += RDZV_ETCDJ_PIECE, chunk++) {
        size_t n = len - off < RDZV_ETCDJ_PIECE ? len - off : RDZV_ETCDJ_PIECE;
        value[0] = off + n < len ? '+' : '=';
        memcpy(value + 1, text + off, n);
        rdzv_etcdj_snap_key(self, key, sizeof key, c->gen, chunk);
        int rc = -1;
        for (int t = 0; t < S_TRIES && rc < 0 && !atomic_load(&self->stop); t++)
            if ((rc = s_put_piece(self, conn, key, value, n + 1, err, sizeof err)) < 0)
                usleep(200 * 1000);
        if (rc == 0)
            rdzv_etcdj_fenced(self, "lost the election while writing a snapshot");
        ok = rc == 1;
    }
    if (!ok)
        rdzv_core_log("etcd", "compaction: cannot write snapshot %" PRIu64 " (%s); the log "
                      "stays", c->gen, conn ? err : "out of memory");
    free(value);
    free(text);
    rdzv_etcd_destroy(&conn);
    c->chunks = chunk;
    c->bytes = len;
    c->written = ok;
    pthread_mutex_lock(&self->lock);
    if (ok) {
        /* After every value the snapshot covers: the committer takes them in order. */
        rdzv_etcdj_job_t *job = calloc(1, sizeof *job);
        if (job) {
            job->kind = RDZV_ETCDJ_JOB_HEAD;
            job->compaction = c;
            if (self->tail)
                self->tail->next = job;
            else
                self->head = job;
            self->tail = job;
        } else {
            atomic_store(&c->done, true);
        }
    } else {
        atomic_store(&c->done, true);
    }
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

rdzv_etcdj_compaction_t *rdzv_etcdj_compact_start(rdzv_etcdj_t *self, cJSON *records,
                                                  void (*release)(void *), void *arg)
{
    rdzv_etcdj_compaction_t *c = self->len == 0 && atomic_load(&self->leading)
                                 ? calloc(1, sizeof *c) : NULL;
    if (c) {
        *c = (rdzv_etcdj_compaction_t) { .journal = self, .records = records, .release = release,
                                         .release_arg = arg, .gen = self->snap_gen + 1,
                                         .through = self->queued_seq,
                                         .log_bytes_at_start = self->log_bytes };
        if (pthread_create(&c->thread, NULL, s_write, c) == 0)
            return c;
        free(c);
    }
    cJSON_Delete(records);
    if (release)
        release(arg);
    return NULL;
}

int rdzv_etcdj_compact_finish(rdzv_etcdj_t *self, rdzv_etcdj_compaction_t **c_p, bool wait)
{
    rdzv_etcdj_compaction_t *c = *c_p;
    if (!wait && !atomic_load(&c->done))
        return 0;
    pthread_mutex_lock(&self->lock);
    while (!atomic_load(&c->done) && !atomic_load(&self->stop))
        pthread_cond_wait(&self->cond, &self->lock);
    bool ok = atomic_load(&c->done) && c->ok;
    if (ok) {
        self->snap_gen = c->gen;
        self->snap_bytes = c->bytes;
        self->log_bytes -= c->log_bytes_at_start < self->log_bytes ? c->log_bytes_at_start
                                                                    : self->log_bytes;
    }
    pthread_mutex_unlock(&self->lock);
    pthread_join(c->thread, NULL);
    free(c);
    *c_p = NULL;
    return ok ? 1 : -1;
}

int rdzv_etcdj_commit_head(rdzv_etcdj_t *self, rdzv_etcd_t *conn, rdzv_etcdj_compaction_t *c,
                           char *err, size_t errlen)
{
    char key[512], start[512], end[512];
    cJSON *head = cJSON_CreateObject();
    cJSON_AddNumberToObject(head, "gen", (double) c->gen);
    cJSON_AddNumberToObject(head, "chunks", c->chunks);
    cJSON_AddNumberToObject(head, "through", (double) c->through);
    cJSON_AddNumberToObject(head, "bytes", (double) c->bytes);
    char *text = cJSON_PrintUnformatted(head);
    cJSON_Delete(head);
    if (!text)
        return -1;
    cJSON *compares = cJSON_CreateArray(), *success = cJSON_CreateArray();
    cJSON_AddItemToArray(compares, rdzv_etcdj_leader_compare(self));
    cJSON *op = cJSON_CreateObject();
    cJSON *put = cJSON_AddObjectToObject(op, "request_put");
    rdzv_etcdj_key(self, key, sizeof key, "head");
    rdzv_etcd_add_b64(put, "key", key, strlen(key));
    rdzv_etcd_add_b64(put, "value", text, strlen(text));
    cJSON_AddItemToArray(success, op);
    free(text);
    /* The values the snapshot covers, and every older snapshot. */
    op = cJSON_CreateObject();
    rdzv_etcdj_add_range(cJSON_AddObjectToObject(op, "request_delete_range"),
                         rdzv_etcdj_key(self, start, sizeof start, "log/"),
                         rdzv_etcdj_log_key(self, end, sizeof end, c->through + 1));
    cJSON_AddItemToArray(success, op);
    op = cJSON_CreateObject();
    snprintf(end, sizeof end, "%s/snap/%016" PRIx64 "/", self->prefix, c->gen);
    rdzv_etcdj_add_range(cJSON_AddObjectToObject(op, "request_delete_range"),
                         rdzv_etcdj_key(self, start, sizeof start, "snap/"), end);
    cJSON_AddItemToArray(success, op);
    cJSON *reply = NULL;
    int rc = rdzv_etcdj_txn(conn, compares, success, NULL, &reply, err, errlen);
    if (rc == RDZV_ETCD_UNREACHABLE) {
        cJSON_Delete(reply);
        return rc;
    }
    if (rc == 0) {
        cJSON_Delete(reply);
        snprintf(err, errlen, "lost the election while moving the snapshot head");
        return 0;
    }
    c->ok = rc == 1;
    if (c->ok) {
        /* Drop the history below: the space quota counts it. Best effort:
         * the next compaction drops it if this one does not. */
        cJSON *body = cJSON_CreateObject(), *answer = NULL;
        char rev[32];
        snprintf(rev, sizeof rev, "%" PRId64,
                 rdzv_etcd_int(cJSON_GetObjectItemCaseSensitive(reply, "header"), "revision"));
        cJSON_AddStringToObject(body, "revision", rev);
        char ignored[256];
        rdzv_etcd_call(conn, "/v3/kv/compaction", body, RDZV_ETCDJ_CALL_MS, &answer, ignored,
                       sizeof ignored);
        cJSON_Delete(body);
        cJSON_Delete(answer);
    } else {
        rdzv_core_log("etcd", "compaction: the head of snapshot %" PRIu64 " was refused (%s); "
                      "the log stays", c->gen, err);
    }
    cJSON_Delete(reply);
    atomic_store(&c->done, true);
    return 1;
}
