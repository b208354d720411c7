/* rdzvd's HTTP endpoint (rendezvous/net/http.c) on a loopback port, driven by a
 * plain-socket HTTP/1.0 client against a core fed through core.h's sequence. */
#include <arpa/inet.h>
#include "check_run.h"
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core_drive.h"
#include "core_state.h"   /* white-box: reads the core's state */
#include "held_sync.h"
#include "http.h"
#include "rdzv_proto.h"
#include "rdzv_util.h"

#define S_BODY_MAX 65536

static char dir[64];
static rdzv_core_t *core;
static rdzv_http_t *http;

typedef struct {
    int status;
    char head[2048];
    char body[S_BODY_MAX];
} s_response_t;

/* One request over a fresh connection; status -1 when the exchange failed. */
static void s_fetch_at(int family, int port, const char *method, const char *path,
                       const char *header, s_response_t *out)
{
    memset(out, 0, sizeof *out);
    out->status = -1;
    struct sockaddr_storage ss = { 0 };
    socklen_t len;
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *) &ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((in_port_t) port);
        a->sin6_addr = in6addr_loopback;
        len = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *) &ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((in_port_t) port);
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof *a;
    }
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct timeval tv = { .tv_sec = 10 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char req[512];
    int n = snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: test\r\n%s%s"
                     "Content-Length: 0\r\n\r\n", method, path, header ? header : "",
                     header ? "\r\n" : "");
    static char buf[S_BODY_MAX + 4096];
    size_t got = 0;
    if (connect(fd, (struct sockaddr *) &ss, len) == 0 && write(fd, req, (size_t) n) == n) {
        ssize_t r;
        while (got < sizeof buf - 1 && (r = read(fd, buf + got, sizeof buf - 1 - got)) > 0)
            got += (size_t) r;
    }
    close(fd);
    buf[got] = '\0';
    char *split = strstr(buf, "\r\n\r\n");
    if (!split || sscanf(buf, "HTTP/1.%*d %d", &out->status) != 1)
        return;
    *split = '\0';
    size_t head_len = strlen(buf), body_len = strlen(split + 4);
    memcpy(out->head, buf, head_len < sizeof out->head ? head_len : sizeof out->head - 1);
    memcpy(out->body, split + 4, body_len < sizeof out->body ? body_len : sizeof out->body - 1);
}

static void s_fetch(const char *path, s_response_t *out)
{
    s_fetch_at(AF_INET, rdzv_http_port(http), "GET", path, NULL, out);
}

/* A core on dir's state, with or without fsync. */
static void s_open_core(bool do_fsync)
{
    rdzv_config_t cfg = { .port_base = 19500, .ports_per_rank = 32, .port_limit = 19500 + 8 * 32,
                          .max_world = 1024, .dead_after_ms = 15000, .do_fsync = do_fsync,
                          .state_dir = dir };
    char err[256];
    core = rdzv_core_new(&cfg, err, sizeof err);
    ck_assert_msg(core != NULL, "%s", err);
}

static void setup(void)
{
    strcpy(dir, "/tmp/rdzv-http-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    s_open_core(false);
    char err[256];
    http = rdzv_http_new("127.0.0.1:0", NULL, err, sizeof err);
    ck_assert_msg(http != NULL, "%s", err);
    ck_assert_int_gt(rdzv_http_port(http), 0);
}

static void teardown(void)
{
    rdzv_http_destroy(&http);
    rdzv_core_destroy(&core);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Feeds one request to the core as the loop thread would, dropping replies. */
static void s_send(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void s_send(const char *fmt, ...)
{
    char frame[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(frame, sizeof frame, fmt, ap);
    va_end(ap);
    rdzv_peer_t peer = { .len = 1, .id = { 1 } };
    drive_request(core, &peer, frame, strlen(frame), rdzv_now_ms());
    ck_assert_int_eq(drive_commit(core, rdzv_now_ms(), NULL, NULL), 0);
}

static void s_join_as(const char *group, int world, int rank, const char *session)
{
    s_send("{\"v\":1,\"op\":\"join\",\"group\":\"%s\",\"world\":%d,\"rank\":%d,\"host\":\"10.0.0.%d\","
           "\"node\":\"n%d\",\"session\":\"%s\",\"timeout_ms\":5000}",
           group, world, rank, rank, rank, session);
}

static void s_join(const char *group, int world, int rank)
{
    s_join_as(group, world, rank, "first");
}

/* The value of the sample line that starts with "name " (labels included). */
static double s_sample(const char *text, const char *name)
{
    size_t len = strlen(name);
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL)
        if (strncmp(line, name, len) == 0 && line[len] == ' ')
            return strtod(line + len + 1, NULL);
    ck_abort_msg("no sample %s in:\n%s", name, text);
    return -1;
}

START_TEST(test_parse_addr)
{
    static const struct { const char *in; int family; const char *host; int port; } ok[] = {
        { "9400", AF_INET, "127.0.0.1", 9400 },
        { "127.0.0.1:9400", AF_INET, "127.0.0.1", 9400 },
        { "0.0.0.0:0", AF_INET, "0.0.0.0", 0 },
        { "[::1]:9400", AF_INET6, "::1", 9400 },
        { "[::]:65535", AF_INET6, "::", 65535 },
    };
    static const char *const bad[] = {
        "", "abc", "127.0.0.1:", "127.0.0.1:70000", "[::1]9400", "[::1]", "::1:9400",
        "localhost:9400", "1.2.3.4:-1", "[]:80", "10.0.0.1:80x",
    };
    char err[256], host[INET6_ADDRSTRLEN];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        struct sockaddr_storage ss;
        ck_assert_msg(rdzv_http_parse_addr(ok[i].in, &ss, err, sizeof err) == 0, "%s: %s",
                      ok[i].in, err);
        ck_assert_int_eq(ss.ss_family, ok[i].family);
        const void *addr = ss.ss_family == AF_INET
            ? (const void *) &((struct sockaddr_in *) &ss)->sin_addr
            : (const void *) &((struct sockaddr_in6 *) &ss)->sin6_addr;
        int port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *) &ss)->sin_port
                                                 : ((struct sockaddr_in6 *) &ss)->sin6_port);
        ck_assert_str_eq(inet_ntop(ss.ss_family, addr, host, sizeof host), ok[i].host);
        ck_assert_int_eq(port, ok[i].port);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct sockaddr_storage ss;
        err[0] = '\0';
        ck_assert_msg(rdzv_http_parse_addr(bad[i], &ss, err, sizeof err) == -1, "accepted %s", bad[i]);
        ck_assert_msg(strstr(err, "--http") != NULL, "%s: error does not name --http: %s", bad[i], err);
    }
}
END_TEST

START_TEST(test_new_refuses_bad_address_and_busy_port)
{
    char err[256];
    ck_assert_ptr_null(rdzv_http_new("nonsense", NULL, err, sizeof err));
    char taken[32];
    snprintf(taken, sizeof taken, "127.0.0.1:%d", rdzv_http_port(http));
    ck_assert_ptr_null(rdzv_http_new(taken, NULL, err, sizeof err));
    ck_assert_msg(strstr(err, "--http") != NULL, "%s", err);
}
END_TEST

START_TEST(test_probes_before_and_after_replay)
{
    s_response_t r;
    s_fetch("/healthz", &r);
    ck_assert_int_eq(r.status, 200);
    s_fetch("/readyz", &r);
    ck_assert_int_eq(r.status, 503);
    s_fetch("/metrics", &r);
    ck_assert_int_eq(r.status, 503);
    s_fetch("/v1/groups", &r);
    ck_assert_int_eq(r.status, 503);
    rdzv_http_set_core(http, core);
    s_fetch("/readyz", &r);
    ck_assert_int_eq(r.status, 200);
    s_fetch("/healthz", &r);
    ck_assert_int_eq(r.status, 200);
    rdzv_http_set_core(http, NULL);
    s_fetch("/readyz", &r);
    ck_assert_int_eq(r.status, 503);
}
END_TEST

START_TEST(test_metrics_counts)
{
    rdzv_http_set_core(http, core);
    s_join("g", 2, 0);
    s_join("g", 2, 1);
    s_join("h", 3, 0);
    s_join("h", 3, 7);                               /* bad_rank */
    s_join_as("g", 2, 1, "restarted");               /* g moves to epoch 2 */
    s_response_t r;
    s_fetch("/metrics", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.head, "text/plain; version=0.0.4"));
    const char *b = r.body;
    ck_assert_double_eq(s_sample(b, "rdzv_groups"), 2);
    ck_assert_double_eq(s_sample(b, "rdzv_ranks_joined"), 2);   /* g: rank 1 of epoch 2; h: 0 */
    ck_assert_double_eq(s_sample(b, "rdzv_ranks_live"), 3);
    ck_assert_double_eq(s_sample(b, "rdzv_joins_total"), 4);
    ck_assert_double_eq(s_sample(b, "rdzv_assignments_total"), 2);
    ck_assert_double_eq(s_sample(b, "rdzv_epoch_changes_total"), 1);
    ck_assert_double_eq(s_sample(b, "rdzv_journal_compactions_total"), 0);
    ck_assert_double_eq(s_sample(b, "rdzv_refusals_total{code=\"bad_rank\"}"), 1);
    ck_assert_double_eq(s_sample(b, "rdzv_refusals_total{code=\"internal\"}"), 0);
    for (int i = 0; i < RDZV_ERROR_CODES; i++) {
        char name[96];
        snprintf(name, sizeof name, "rdzv_refusals_total{code=\"%s\"}", rdzv_error_codes[i]);
        s_sample(b, name);
    }
    ck_assert_double_eq(s_sample(b, "rdzv_join_to_assignment_seconds_count"), 2);
    ck_assert_double_eq(s_sample(b, "rdzv_join_to_assignment_seconds_bucket{le=\"+Inf\"}"), 2);
    ck_assert_double_eq(s_sample(b, "rdzv_join_to_assignment_seconds_bucket{le=\"120\"}"), 2);
    ck_assert_double_ge(s_sample(b, "rdzv_journal_bytes"), 100);
    /* setup's core runs without fsync: no fdatasync to count. */
    ck_assert_double_eq(s_sample(b, "rdzv_journal_fsync_seconds_count"), 0);
}
END_TEST

/* A journal sync that hangs (a stalled disk) no longer holds the core's
 * lock, but every reply waits for it: /healthz must still fail. */

START_TEST(test_healthz_fails_on_a_stalled_journal_sync)
{
    rdzv_core_destroy(&core);
    s_open_core(true);
    rdzv_http_set_core(http, core);
    atomic_store(&held_sync_hold, 1);
    rdzv_journal_set_sync_fn(core->journal, held_sync);
    const char *join = "{\"v\":1,\"id\":1,\"op\":\"join\",\"group\":\"g\",\"world\":1,"
                       "\"rank\":0,\"host\":\"h\",\"node\":\"n\",\"session\":\"s\"}";
    rdzv_peer_t peer = { .len = 1, .id = { 1 } };
    rdzv_parsed_t parsed;
    rdzv_commit_t commit;
    rdzv_core_parse(core, join, strlen(join), &parsed);
    rdzv_core_begin(core, rdzv_now_ms());
    rdzv_core_handle(core, &peer, &parsed);
    ck_assert_int_eq(rdzv_core_end(core, &commit), 0);
    s_response_t r;
    s_fetch("/healthz", &r);
    ck_assert_int_eq(r.status, 200);             /* a sync just begun is no stall */
    /* Past the 5 s a sync may take (http.c), /healthz turns 503. */
    int64_t until = rdzv_now_ms() + 20000;
    do {
        usleep(100 * 1000);
        s_fetch("/healthz", &r);
    } while (r.status == 200 && rdzv_now_ms() < until);
    ck_assert_int_eq(r.status, 503);
    ck_assert_ptr_nonnull(strstr(r.body, "journal sync stalled"));
    atomic_store(&held_sync_hold, 0);
    rdzv_core_wait(core, commit.gate);
    s_fetch("/healthz", &r);
    ck_assert_int_eq(r.status, 200);
    s_fetch("/metrics", &r);
    ck_assert_double_ge(s_sample(r.body, "rdzv_journal_fsync_seconds_count"), 1);
    for (int t = 0; t < RDZV_MAX_SHARDS; t++) {
        for (size_t i = 0; i < commit.out[t].len; i++)
            rdzv_reply_clear(&commit.out[t].v[i]);
        free(commit.out[t].v);
    }
}
END_TEST

START_TEST(test_metrics_histogram_is_cumulative)
{
    rdzv_http_set_core(http, core);
    pthread_mutex_lock(&core->lock);
    rdzv_histogram_observe(&core->metrics.join_latency, 0.0001);
    rdzv_histogram_observe(&core->metrics.join_latency, 0.003);
    rdzv_histogram_observe(&core->metrics.join_latency, 0.003);
    rdzv_histogram_observe(&core->metrics.join_latency, 1000);
    pthread_mutex_unlock(&core->lock);
    s_response_t r;
    s_fetch("/metrics", &r);
    const char *n = "rdzv_join_to_assignment_seconds";
    char name[128];
    double last = 0;
    for (int i = 0; i < RDZV_HIST_BUCKETS; i++) {
        snprintf(name, sizeof name, "%s_bucket{le=\"%g\"}", n, rdzv_hist_bounds[i]);
        double v = s_sample(r.body, name);
        ck_assert_double_ge(v, last);
        last = v;
    }
    snprintf(name, sizeof name, "%s_bucket{le=\"0.0005\"}", n);
    ck_assert_double_eq(s_sample(r.body, name), 1);
    snprintf(name, sizeof name, "%s_bucket{le=\"0.005\"}", n);
    ck_assert_double_eq(s_sample(r.body, name), 3);
    ck_assert_double_eq(last, 3);                     /* 1000 s is above every bound */
    snprintf(name, sizeof name, "%s_bucket{le=\"+Inf\"}", n);
    ck_assert_double_eq(s_sample(r.body, name), 4);
    snprintf(name, sizeof name, "%s_sum", n);
    ck_assert_double_eq_tol(s_sample(r.body, name), 1000.0061, 1e-6);
}
END_TEST

/* Every sample's family has # HELP and # TYPE before it (text format 0.0.4). */
/* Per-group samples stop at RDZV_METRICS_GROUPS groups (the first by
 * name), the rest counted; a name's quote and backslash are escaped. */
START_TEST(test_group_metrics_capped)
{
    rdzv_http_set_core(http, core);
    char name[16];
    for (int i = 0; i < RDZV_METRICS_GROUPS + 44; i++) {
        snprintf(name, sizeof name, "g%03d", i);
        s_join(name, 2, 0);
    }
    s_join("a\\\"b\\\\c", 1, 0);        /* the group a"b\c */
    s_response_t r;
    s_fetch("/metrics", &r);
    ck_assert_int_eq((int) s_sample(r.body, "rdzv_group_world{group=\"a\\\"b\\\\c\"}"), 1);
    ck_assert_int_eq((int) s_sample(r.body, "rdzv_group_ranks_joined{group=\"g000\"}"), 1);
    ck_assert_int_eq((int) s_sample(r.body, "rdzv_group_complete{group=\"g000\"}"), 0);
    ck_assert_int_eq((int) s_sample(r.body, "rdzv_group_metrics_omitted"), 45);
    ck_assert_ptr_nonnull(strstr(r.body, "rdzv_group_world{group=\"g254\"}"));
    ck_assert_ptr_null(strstr(r.body, "rdzv_group_world{group=\"g255\"}"));
    int series = 0;
    for (const char *p = r.body; (p = strstr(p, "\nrdzv_group_epoch{")); p++)
        series++;
    ck_assert_int_eq(series, RDZV_METRICS_GROUPS);
}
END_TEST

START_TEST(test_metrics_well_formed)
{
    rdzv_http_set_core(http, core);
    s_join("g", 1, 0);
    s_response_t r;
    s_fetch("/metrics", &r);
    char *save = NULL, typed[64][96];
    int ntyped = 0;
    for (char *line = strtok_r(r.body, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char name[96];
        if (sscanf(line, "# TYPE %95s", name) == 1) {
            ck_assert_int_lt(ntyped, 64);
            snprintf(typed[ntyped++], sizeof typed[0], "%s", name);
            continue;
        }
        if (line[0] == '#')
            continue;
        ck_assert_int_eq(sscanf(line, "%95[a-zA-Z0-9_]", name), 1);
        char *end = NULL;
        const char *value = strrchr(line, ' ');
        ck_assert_ptr_nonnull(value);
        strtod(value + 1, &end);
        ck_assert_msg(end && *end == '\0', "bad value in %s", line);
        bool found = false;
        for (int i = 0; i < ntyped && !found; i++) {
            size_t l = strlen(typed[i]);
            found = strncmp(name, typed[i], l) == 0
                    && (name[l] == '\0' || strcmp(name + l, "_bucket") == 0
                        || strcmp(name + l, "_sum") == 0 || strcmp(name + l, "_count") == 0);
        }
        ck_assert_msg(found, "sample %s has no # TYPE before it", name);
    }
    /* Every family rdzvd documents (rdzvd.8), the three dropped-reply reasons
     * and the two dropped-peer ones among the samples, and the group's own
     * (the two router families typed even with no routed group). */
    ck_assert_int_eq(ntyped, 31);
    ck_assert_ptr_nonnull(strstr(r.head, "200"));
    s_fetch("/metrics", &r);
    ck_assert_ptr_nonnull(strstr(r.body, "rdzv_replies_dropped_total{reason=\"slow_reader\"} 0"));
    ck_assert_ptr_nonnull(strstr(r.body, "rdzv_replies_dropped_total{reason=\"gone\"} "));
    ck_assert_ptr_nonnull(strstr(r.body, "rdzv_replies_dropped_total{reason=\"busy\"} 0"));
    ck_assert_ptr_nonnull(strstr(r.body, "\nrdzv_reply_bytes_unread "));
    ck_assert_ptr_nonnull(strstr(r.body, "rdzv_peers_dropped_total{reason=\"slow_reader\"} 0"));
    ck_assert_ptr_nonnull(strstr(r.body, "\nrdzv_group_world{group=\"g\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "\nrdzv_group_ranks_joined{group=\"g\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "\nrdzv_group_epoch{group=\"g\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "\nrdzv_group_complete{group=\"g\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "\nrdzv_group_ranks_live{group=\"g\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "\nrdzv_group_ranks_serving{group=\"g\"} 0\n"));
    /* g names no router: no router samples of it. */
    ck_assert_ptr_null(strstr(r.body, "rdzv_group_ranks_registered{group=\"g\"}"));
    ck_assert_ptr_null(strstr(r.body, "rdzv_router_errors_total{group=\"g\""));
    ck_assert_ptr_nonnull(strstr(r.body, "\nrdzv_group_metrics_omitted 0\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "rdzv_peers_dropped_total{reason=\"connection_cap\"} 0"));
    ck_assert_ptr_nonnull(strstr(r.body, "\nrdzv_groups_expired_total 0\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "\nrdzv_groups_reclaimed_total 0\n"));
}
END_TEST

START_TEST(test_groups_json)
{
    rdzv_http_set_core(http, core);
    s_join("g", 2, 0);
    s_join("g", 2, 1);
    s_join("a/b", 1, 0);
    s_response_t r;
    s_fetch("/v1/groups", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.head, "application/json"));
    cJSON *root = cJSON_Parse(r.body);
    ck_assert_ptr_nonnull(root);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "groups")), 2);
    cJSON_Delete(root);

    s_fetch("/v1/groups/g", &r);
    ck_assert_int_eq(r.status, 200);
    root = cJSON_Parse(r.body);
    const cJSON *groups = cJSON_GetObjectItem(root, "groups");
    ck_assert_int_eq(cJSON_GetArraySize(groups), 1);
    const cJSON *g = cJSON_GetArrayItem(groups, 0);
    ck_assert_str_eq(cJSON_GetObjectItem(g, "group")->valuestring, "g");
    ck_assert_int_eq(cJSON_GetObjectItem(g, "world")->valueint, 2);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(g, "joined")), 2);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(g, "members")), 2);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(g, "complete")));
    /* What the status operation answers, minus the envelope and with the
     * NCCL IDs only counted. */
    ck_assert_ptr_null(cJSON_GetObjectItem(g, "nccl_unique_id"));
    ck_assert_ptr_null(cJSON_GetObjectItem(g, "nccl_unique_ids"));
    ck_assert_ptr_nonnull(cJSON_GetObjectItem(g, "nccl_unique_ids_redacted"));
    cJSON *expect = rdzv_core_status_json(core, "g", rdzv_now_ms());
    cJSON *e = cJSON_GetArrayItem(expect, 0);
    int ids = cJSON_GetArraySize(cJSON_GetObjectItem(e, "nccl_unique_ids"));
    cJSON_DeleteItemFromObject(e, "nccl_unique_id");
    cJSON_DeleteItemFromObject(e, "nccl_unique_ids");
    cJSON_AddNumberToObject(e, "nccl_unique_ids_redacted", ids);
    ck_assert(cJSON_Compare(g, e, 1));
    cJSON_Delete(expect);
    cJSON_Delete(root);

    s_fetch("/v1/groups/a/b", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "\"group\":\"a/b\""));
    /* Percent escapes decode; an encoded NUL names no group g. */
    s_fetch("/v1/groups/%67", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "\"group\":\"g\""));
    s_fetch("/v1/groups/g%00zzz", &r);
    ck_assert_int_eq(r.status, 400);
    ck_assert_ptr_nonnull(strstr(r.body, RDZV_E_BAD_REQUEST));
}
END_TEST

START_TEST(test_unknown_group_path_and_method)
{
    rdzv_http_set_core(http, core);
    s_response_t r;
    s_fetch("/v1/groups/nope", &r);
    ck_assert_int_eq(r.status, 404);
    cJSON *root = cJSON_Parse(r.body);
    ck_assert_ptr_nonnull(root);
    const cJSON *e = cJSON_GetObjectItem(root, "error");
    ck_assert_str_eq(cJSON_GetObjectItem(e, "code")->valuestring, RDZV_E_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(cJSON_GetObjectItem(e, "message")->valuestring, "nope"));
    cJSON_Delete(root);
    s_fetch("/v1/groups/", &r);
    ck_assert_int_eq(r.status, 404);
    /* A name that is not UTF-8 is not echoed into the JSON. */
    s_fetch("/v1/groups/x%ff%c0", &r);
    ck_assert_int_eq(r.status, 404);
    ck_assert_msg(rdzv_utf8_valid(r.body, strlen(r.body)), "not UTF-8: %s", r.body);
    s_fetch("/", &r);
    ck_assert_int_eq(r.status, 404);
    s_fetch("/metricsx", &r);
    ck_assert_int_eq(r.status, 404);
    s_fetch_at(AF_INET, rdzv_http_port(http), "POST", "/metrics", NULL, &r);
    ck_assert_int_eq(r.status, 405);
    ck_assert_ptr_nonnull(strstr(r.head, "GET"));
    s_fetch_at(AF_INET, rdzv_http_port(http), "DELETE", "/v1/groups/g", NULL, &r);
    ck_assert_int_eq(r.status, 405);
    s_fetch_at(AF_INET, rdzv_http_port(http), "HEAD", "/healthz", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "");
}
END_TEST

static atomic_bool fetched;

static void *s_fetch_metrics(void *arg)
{
    s_fetch("/metrics", arg);
    atomic_store(&fetched, true);
    return NULL;
}

/* A scrape waits for the loop thread to finish its batch. */
START_TEST(test_reads_under_the_core_lock)
{
    rdzv_http_set_core(http, core);
    static s_response_t r;
    atomic_store(&fetched, false);
    pthread_t t;
    pthread_mutex_lock(&core->lock);
    ck_assert_int_eq(pthread_create(&t, NULL, s_fetch_metrics, &r), 0);
    usleep(300 * 1000);
    ck_assert(!atomic_load(&fetched));             /* not answered yet */
    core->metrics.joins = 42;
    pthread_mutex_unlock(&core->lock);
    pthread_join(t, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_double_eq(s_sample(r.body, "rdzv_joins_total"), 42);
}
END_TEST

/* --http-token: everything but the probes asks for the bearer token, and a
 * wrong one, or none, gets 401 with a WWW-Authenticate challenge. */
START_TEST(test_bearer_token)
{
    char err[256];
    rdzv_http_t *h = rdzv_http_new("127.0.0.1:0", "s3cret", err, sizeof err);
    ck_assert_msg(h != NULL, "%s", err);
    rdzv_http_set_core(h, core);
    int port = rdzv_http_port(h);
    s_response_t r;
    static const char *const wants[] = { "/metrics", "/v1/groups", "/v1/groups/g", "/nope" };
    for (size_t i = 0; i < sizeof wants / sizeof wants[0]; i++) {
        s_fetch_at(AF_INET, port, "GET", wants[i], NULL, &r);
        ck_assert_msg(r.status == 401, "%s without a token: %d", wants[i], r.status);
        ck_assert_ptr_nonnull(strstr(r.head, "WWW-Authenticate: Bearer"));
        s_fetch_at(AF_INET, port, "GET", wants[i], "Authorization: Bearer s3cre", &r);
        ck_assert_int_eq(r.status, 401);
        s_fetch_at(AF_INET, port, "GET", wants[i], "Authorization: Bearer s3cretX", &r);
        ck_assert_int_eq(r.status, 401);
    }
    s_fetch_at(AF_INET, port, "GET", "/metrics", "Authorization: Bearer s3cret", &r);
    ck_assert_int_eq(r.status, 200);
    s_fetch_at(AF_INET, port, "GET", "/v1/groups", "Authorization: Bearer s3cret", &r);
    ck_assert_int_eq(r.status, 200);
    /* The scheme in any case (RFC 7235); the token itself exactly. */
    static const char *const schemes[] = { "bearer s3cret", "BEARER s3cret", "bEaReR  s3cret" };
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        char header[64];
        snprintf(header, sizeof header, "Authorization: %s", schemes[i]);
        s_fetch_at(AF_INET, port, "GET", "/metrics", header, &r);
        ck_assert_msg(r.status == 200, "%s: %d", header, r.status);
    }
    s_fetch_at(AF_INET, port, "GET", "/metrics", "Authorization: bearer S3CRET", &r);
    ck_assert_int_eq(r.status, 401);
    s_fetch_at(AF_INET, port, "GET", "/metrics", "Authorization: Basic s3cret", &r);
    ck_assert_int_eq(r.status, 401);
    s_fetch_at(AF_INET, port, "GET", "/metrics", "Authorization: Bearers3cret", &r);
    ck_assert_int_eq(r.status, 401);
    s_fetch_at(AF_INET, port, "GET", "/healthz", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    s_fetch_at(AF_INET, port, "GET", "/readyz", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    rdzv_http_destroy(&h);
    /* Without a token nothing asks for one. */
    rdzv_http_set_core(http, core);
    s_fetch("/metrics", &r);
    ck_assert_int_eq(r.status, 200);
}
END_TEST

START_TEST(test_is_loopback)
{
    ck_assert(rdzv_http_is_loopback("9400"));
    ck_assert(rdzv_http_is_loopback("127.0.0.1:9400"));
    ck_assert(rdzv_http_is_loopback("127.3.2.1:9400"));
    ck_assert(rdzv_http_is_loopback("[::1]:9400"));
    ck_assert(!rdzv_http_is_loopback("0.0.0.0:9400"));
    ck_assert(!rdzv_http_is_loopback("10.0.0.5:9400"));
    ck_assert(!rdzv_http_is_loopback("[::]:9400"));
}
END_TEST

START_TEST(test_ipv6_loopback)
{
    int probe = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe < 0)
        return;                                  /* no IPv6 in this namespace */
    close(probe);
    char err[256];
    rdzv_http_t *h6 = rdzv_http_new("[::1]:0", NULL, err, sizeof err);
    if (!h6 && strstr(err, "Cannot assign"))
        return;                                  /* ::1 not configured */
    ck_assert_msg(h6 != NULL, "%s", err);
    s_response_t r;
    s_fetch_at(AF_INET6, rdzv_http_port(h6), "GET", "/healthz", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    rdzv_http_destroy(&h6);
    rdzv_http_destroy(&h6);
    ck_assert_ptr_null(h6);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("http");
    TCase *parse = tcase_create("rdzv_http_parse_addr");
    tcase_add_test(parse, test_parse_addr);
    suite_add_tcase(s, parse);
    TCase *tc = tcase_create("rdzv_http_new");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_new_refuses_bad_address_and_busy_port);
    tcase_add_test(tc, test_probes_before_and_after_replay);
    tcase_add_test(tc, test_metrics_counts);
    tcase_add_test(tc, test_healthz_fails_on_a_stalled_journal_sync);
    tcase_add_test(tc, test_metrics_histogram_is_cumulative);
    tcase_add_test(tc, test_metrics_well_formed);
    tcase_add_test(tc, test_group_metrics_capped);
    tcase_add_test(tc, test_groups_json);
    tcase_add_test(tc, test_unknown_group_path_and_method);
    tcase_add_test(tc, test_reads_under_the_core_lock);
    tcase_add_test(tc, test_bearer_token);
    tcase_add_test(tc, test_is_loopback);
    tcase_add_test(tc, test_ipv6_loopback);
    suite_add_tcase(s, tc);
    return rdzv_check_run(s);
}
