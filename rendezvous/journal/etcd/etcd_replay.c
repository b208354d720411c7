/* Reading the etcd journal: the replay at start, a new leader's catch-up,
 * and the standby's watch of the leader's log (etcd_journal_private.h). */
#include "etcd_journal_private.h"
#include "log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What a watch message asks of the watcher. */
enum { S_GO_ON = 0, S_RELOAD = 2, S_RECONNECT = 3 };
/* Values in one range answer (each up to a MiB). */
#define S_PAGE 16

/* Where whole texts go: the replay's apply function, or the core. */
typedef struct {
    rdzv_journal_apply_fn *apply;
    void *arg;
    rdzv_etcdj_t *follow;        /* not NULL: hand arrays to its follow function */
    long records;
} s_sink_t;

long rdzv_etcdj_apply_text(const char *text, size_t len, rdzv_journal_apply_fn *fn, void *arg)
{
    cJSON *array = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsArray(array)) {
        cJSON_Delete(array);
        return -1;
    }
    long n = 0;
    const cJSON *record;
    cJSON_ArrayForEach(record, array) {
        if (fn(arg, record) < 0) {
            n = -1;
            break;
        }
        n++;
    }
    cJSON_Delete(array);
    return n;
}

static int s_to_sink(s_sink_t *sink, const char *text, size_t len)
{
    if (sink->follow) {
        cJSON *array = cJSON_ParseWithLength(text, len);
        if (!cJSON_IsArray(array)) {
            cJSON_Delete(array);
            return -1;
        }
        sink->follow->follow(sink->follow->follow_arg, RDZV_JOURNAL_RECORDS, array);
        sink->records += cJSON_GetArraySize(array);
        cJSON_Delete(array);
        return 0;
    }
    long n = rdzv_etcdj_apply_text(text, len, sink->apply, sink->arg);
    if (n < 0)
        return -1;
    sink->records += n;
    return 0;
}

/* Adds a piece (marker and text) to self->partial; 1 when it ended a text,
 * 0 when more pieces follow, -1 out of memory or a bad marker. */
static int s_add_piece(rdzv_etcdj_t *self, const char *value, size_t len)
{
    if (len < 1 || (value[0] != '+' && value[0] != '='))
        return -1;
    char *grown = realloc(self->partial, self->partial_len + len);
    if (!grown)
        return -1;
    self->partial = grown;
    memcpy(self->partial + self->partial_len, value + 1, len - 1);
    self->partial_len += len - 1;
    return value[0] == '=';
}

static void s_drop_partial(rdzv_etcdj_t *self)
{
    free(self->partial);
    self->partial = NULL;
    self->partial_len = 0;
}

/* One range request at revision (0: the newest); the answer's. */
static int s_range(rdzv_etcd_t *conn, const char *key, const char *end, int64_t revision,
                   long limit, cJSON **reply, char *err, size_t errlen)
{
    cJSON *body = cJSON_CreateObject();
    rdzv_etcdj_add_range(body, key, end);
    char n[32];
    if (revision > 0) {
        snprintf(n, sizeof n, "%" PRId64, revision);
        cJSON_AddStringToObject(body, "revision", n);
    }
    if (limit > 0) {
        snprintf(n, sizeof n, "%ld", limit);
        cJSON_AddStringToObject(body, "limit", n);
    }
    int rc = rdzv_etcd_call(conn, "/v3/kv/range", body, RDZV_ETCDJ_CALL_MS, reply, err, errlen);
    cJSON_Delete(body);
    return rc;
}

static char *s_value(const cJSON *kv, size_t *len)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(kv, "value");
    return rdzv_etcd_unb64(cJSON_IsString(v) ? v->valuestring : "", len);
}

static char *s_kv_key(const cJSON *kv)
{
    size_t n;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(kv, "key");
    return rdzv_etcd_unb64(cJSON_IsString(k) ? k->valuestring : "", &n);
}

/* The snapshot the head names, as of revision, into sink. *through gets
 * the last SEQ it covers. 0, or -1 with err. */
static int s_read_snapshot(rdzv_etcdj_t *self, rdzv_etcd_t *conn, const cJSON *head,
                           int64_t revision, s_sink_t *sink, char *err, size_t errlen)
{
    uint64_t gen = (uint64_t) rdzv_etcd_int(head, "gen");
    long chunks = (long) rdzv_etcd_int(head, "chunks");
    s_drop_partial(self);
    for (long i = 0; i < chunks; i++) {
        char key[512];
        cJSON *reply = NULL;
        rdzv_etcdj_snap_key(self, key, sizeof key, gen, (unsigned) i);
        if (s_range(conn, key, NULL, revision, 0, &reply, err, errlen) != RDZV_ETCD_OK)
            return -1;
        const cJSON *kv = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(reply, "kvs"), 0);
        size_t len = 0;
        char *value = kv ? s_value(kv, &len) : NULL;
        int rc = value ? s_add_piece(self, value, len) : -1;
        free(value);
        cJSON_Delete(reply);
        if (rc < 0 || (rc == 1) != (i == chunks - 1)) {
            snprintf(err, errlen, "etcd: snapshot %" PRIu64 " piece %ld is missing or damaged",
                     gen, i);
            return -1;
        }
    }
    int rc = self->partial_len ? s_to_sink(sink, self->partial, self->partial_len) : 0;
    s_drop_partial(self);
    if (rc < 0)
        snprintf(err, errlen, "etcd: snapshot %" PRIu64 " does not replay", gen);
    return rc;
}

/* The log from SEQ from on, as of revision, into sink; sets applied_seq to
 * the last SEQ that ended a text, and leaves the pieces of an unfinished
 * one in self->partial. 0, or -1 with err. */
static int s_read_log(rdzv_etcdj_t *self, rdzv_etcd_t *conn, uint64_t from, int64_t revision,
                      s_sink_t *sink, char *err, size_t errlen)
{
    char start[512], end[512];
    rdzv_etcdj_key(self, end, sizeof end, "log0");     /* '0' follows '/' */
    s_drop_partial(self);
    uint64_t expect = from;
    for (bool more = true; more;) {
        cJSON *reply = NULL;
        rdzv_etcdj_log_key(self, start, sizeof start, expect);
        if (s_range(conn, start, end, revision, S_PAGE, &reply, err, errlen) != RDZV_ETCD_OK)
            return -1;
        more = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "more"));
        const cJSON *kv;
        int rc = 0;
        cJSON_ArrayForEach(kv, cJSON_GetObjectItemCaseSensitive(reply, "kvs")) {
            char *key = s_kv_key(kv);
            uint64_t seq = key ? rdzv_etcdj_key_seq(self, key) : 0;
            free(key);
            size_t len = 0;
            char *value = seq == expect ? s_value(kv, &len) : NULL;
            rc = value ? s_add_piece(self, value, len) : -1;
            free(value);
            if (rc < 0) {
                snprintf(err, errlen, "etcd: log %016" PRIx64 " is missing or damaged", expect);
                break;
            }
            self->log_bytes += len;
            if (rc == 1) {
                rc = s_to_sink(sink, self->partial, self->partial_len);
                s_drop_partial(self);
                if (rc < 0) {
                    snprintf(err, errlen, "etcd: log %016" PRIx64 " does not replay", seq);
                    break;
                }
                self->applied_seq = seq;
            }
            expect = seq + 1;
        }
        cJSON_Delete(reply);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* The head as of now: *revision gets etcd's revision, *head the parsed
 * head (NULL: no snapshot yet). 0 or -1. */
static int s_read_head(rdzv_etcdj_t *self, rdzv_etcd_t *conn, int64_t *revision, cJSON **head,
                       char *err, size_t errlen)
{
    char key[512];
    cJSON *reply = NULL;
    *head = NULL;
    if (s_range(conn, rdzv_etcdj_key(self, key, sizeof key, "head"), NULL, 0, 0, &reply,
                err, errlen) != RDZV_ETCD_OK)
        return -1;
    *revision = rdzv_etcd_int(cJSON_GetObjectItemCaseSensitive(reply, "header"), "revision");
    const cJSON *kv = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(reply, "kvs"), 0);
    size_t len = 0;
    char *value = kv ? s_value(kv, &len) : NULL;
    if (kv && !(value && (*head = cJSON_ParseWithLength(value, len)))) {
        snprintf(err, errlen, "etcd: %s is not a snapshot head", key);
        free(value);
        cJSON_Delete(reply);
        return -1;
    }
    free(value);
    cJSON_Delete(reply);
    return 0;
}

long rdzv_etcdj_replay(rdzv_etcdj_t *self, rdzv_journal_apply_fn *apply, void *arg,
                       char *err, size_t errlen)
{
    rdzv_etcd_t *conn = rdzv_etcd_new(&self->cfg, err, errlen);
    if (!conn)
        return -1;
    s_sink_t sink = { .apply = apply, .arg = arg };
    int rc = -1;
    /* A compaction between the head and the log's read makes the second
     * fail (its revision is gone): read again. */
    for (int attempt = 0; attempt < 5 && rc < 0; attempt++) {
        if (attempt)
            usleep(200 * 1000);
        cJSON *head = NULL;
        int64_t revision = 0;
        sink.records = 0;
        self->applied_seq = 0;
        self->log_bytes = self->snap_bytes = self->snap_gen = 0;
        rc = s_read_head(self, conn, &revision, &head, err, errlen);
        if (head) {
            self->snap_gen = (uint64_t) rdzv_etcd_int(head, "gen");
            self->snap_bytes = (uint64_t) rdzv_etcd_int(head, "bytes");
            self->applied_seq = (uint64_t) rdzv_etcd_int(head, "through");
        }
        if (rc == 0 && head)
            rc = s_read_snapshot(self, conn, head, revision, &sink, err, errlen);
        cJSON_Delete(head);
        if (rc == 0)
            rc = s_read_log(self, conn, self->applied_seq + 1, revision, &sink, err, errlen);
        if (rc == 0)
            self->revision = revision;
        else if (sink.records)
            break;              /* records applied: the caller must start over */
        else if (rdzv_etcdj_start_again(self, conn, "replay", err, errlen))
            attempt--;          /* etcd's trouble, not a compaction: no attempt spent */
    }
    s_drop_partial(self);
    rdzv_etcd_destroy(&conn);
    self->committed_seq = self->applied_seq;
    self->queued_seq = self->applied_seq;
    return rc < 0 ? -1 : sink.records;
}

/* Deletes the pieces from SEQ from on (an unfinished batch of a leader
 * that died while putting it), only while this rdzvd leads. */
static int s_delete_from(rdzv_etcdj_t *self, rdzv_etcd_t *conn, uint64_t from)
{
    char start[512], end[512], err[256];
    rdzv_etcdj_log_key(self, start, sizeof start, from);
    rdzv_etcdj_key(self, end, sizeof end, "log0");
    cJSON *compares = cJSON_CreateArray(), *success = cJSON_CreateArray();
    cJSON_AddItemToArray(compares, rdzv_etcdj_leader_compare(self));
    cJSON *op = cJSON_CreateObject();
    rdzv_etcdj_add_range(cJSON_AddObjectToObject(op, "request_delete_range"), start, end);
    cJSON_AddItemToArray(success, op);
    cJSON *reply = NULL;
    int rc = rdzv_etcdj_txn(conn, compares, success, NULL, &reply, err, sizeof err);
    cJSON_Delete(reply);
    if (rc == 0)
        rdzv_etcdj_fenced(self, "lost the election while deleting an unfinished batch");
    if (rc == 1)
        rdzv_core_log("etcd", "deleted the unfinished batch from log %016" PRIx64
                      " that the last leader left", from);
    return rc == 1 ? 0 : -1;
}

int rdzv_etcdj_catch_up(rdzv_etcdj_t *self, rdzv_etcd_t *conn, bool delete_partial)
{
    char err[512];
    cJSON *head = NULL;
    int64_t revision = 0;
    if (s_read_head(self, conn, &revision, &head, err, sizeof err) < 0) {
        rdzv_core_log("etcd", "catch-up: %s", err);
        return -1;
    }
    uint64_t through = head ? (uint64_t) rdzv_etcd_int(head, "through") : 0;
    cJSON_Delete(head);
    if (through > self->applied_seq)
        return 1;
    s_sink_t sink = { .follow = self };
    uint64_t from = self->applied_seq + 1;
    if (s_read_log(self, conn, from, revision, &sink, err, sizeof err) < 0) {
        rdzv_core_log("etcd", "catch-up: %s", err);
        /* Records handed over already: only a reload is sure. */
        return sink.records ? 1 : -1;
    }
    self->revision = revision;
    bool unfinished = self->partial_len > 0;
    s_drop_partial(self);
    if (unfinished && delete_partial && s_delete_from(self, conn, self->applied_seq + 1) < 0)
        return -1;
    return 0;
}

/* One watch message: the log's new pieces in order. */
static int s_handle_watch(rdzv_etcdj_t *self, const cJSON *msg);
static int s_on_watch(void *arg, const cJSON *msg)
{
    rdzv_etcdj_t *self = arg;
    pthread_mutex_lock(&self->follow_lock);
    int rc = atomic_load(&self->watch_stop) ? S_RECONNECT : s_handle_watch(self, msg);
    pthread_mutex_unlock(&self->follow_lock);
    return rc;
}

static int s_handle_watch(rdzv_etcdj_t *self, const cJSON *msg)
{
    const cJSON *result = cJSON_GetObjectItemCaseSensitive(msg, "result");
    if (!result)
        return S_RECONNECT;
    /* The revision to resume from is gone: only a replay catches up. */
    if (rdzv_etcd_int(result, "compact_revision") > 0
        || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(result, "canceled")))
        return S_RELOAD;
    const cJSON *ev;
    s_sink_t sink = { .follow = self };
    cJSON_ArrayForEach(ev, cJSON_GetObjectItemCaseSensitive(result, "events")) {
        const cJSON *kv = cJSON_GetObjectItemCaseSensitive(ev, "kv");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(ev, "type");
        char *key = s_kv_key(kv);
        uint64_t seq = key ? rdzv_etcdj_key_seq(self, key) : 0;
        free(key);
        int64_t rev = rdzv_etcd_int(kv, "mod_revision");
        if (rev > self->revision)
            self->revision = rev;
        /* PUT is the enum's zero: the gateway leaves it out. */
        if (cJSON_IsString(type) && strcmp(type->valuestring, "DELETE") == 0) {
            /* A new leader deleting an unfinished batch; older ones are compaction's. */
            if (seq > self->applied_seq)
                s_drop_partial(self);
            continue;
        }
        size_t len = 0;
        char *value = s_value(kv, &len);
        int rc = value ? s_add_piece(self, value, len) : -1;
        free(value);
        if (rc < 0)
            return S_RELOAD;
        if (rc == 1) {
            rc = s_to_sink(&sink, self->partial, self->partial_len);
            s_drop_partial(self);
            if (rc < 0)
                return S_RELOAD;
            self->applied_seq = seq;
        }
    }
    return S_GO_ON;
}

void *rdzv_etcdj_watch_thread(void *arg)
{
    rdzv_etcdj_t *self = arg;
    char err[512];
    rdzv_etcd_t *conn = rdzv_etcd_new(&self->cfg, err, sizeof err);
    int64_t complained_ms = 0;
    while (conn && !atomic_load(&self->watch_stop)) {
        char start[512], end[512], rev[32];
        cJSON *body = cJSON_CreateObject();
        cJSON *create = cJSON_AddObjectToObject(body, "create_request");
        rdzv_etcdj_add_range(create, rdzv_etcdj_key(self, start, sizeof start, "log/"),
                             rdzv_etcdj_key(self, end, sizeof end, "log0"));
        snprintf(rev, sizeof rev, "%" PRId64, self->revision + 1);
        cJSON_AddStringToObject(create, "start_revision", rev);
        /* A watch resumed after a break sees the pieces after the revision
         * it had: what it held of an unfinished text stays valid. */
        int rc = rdzv_etcd_stream(conn, "/v3/watch", body, 0, s_on_watch, self,
                                  &self->watch_stop, err, sizeof err);
        cJSON_Delete(body);
        if (atomic_load(&self->watch_stop))
            break;
        if (rc == S_RELOAD) {
            pthread_mutex_lock(&self->follow_lock);
            if (!atomic_load(&self->watch_stop)) {
                rdzv_core_log("etcd", "the watch lost track of the log (compacted past it); "
                              "replaying");
                s_drop_partial(self);
                self->follow(self->follow_arg, RDZV_JOURNAL_RELOAD, NULL);
            }
            pthread_mutex_unlock(&self->follow_lock);
            continue;
        }
        if (rc < 0 && rdzv_etcdj_now_ms() - complained_ms > 5000) {
            rdzv_core_log("etcd", "watch: %s; watching again", err);
            complained_ms = rdzv_etcdj_now_ms();
        }
        usleep(200 * 1000);
    }
    rdzv_etcd_destroy(&conn);
    return NULL;
}
