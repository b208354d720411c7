/* rdzvd's operator endpoint over libmicrohttpd. Every handler reads the
 * core through core.h (which holds the lock only while it copies), renders
 * into a private buffer and answers, so a slow client never holds a shard
 * up. */
#include "http.h"
#include "http_sd.h"
#include "http_slots.h"

#include "rdzv_proto.h"
#include "rdzv_util.h"
#include "rdzv_version.h"
#include "sendq.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>


#define S_CONNECTION_TIMEOUT_S 10
/* A loop that has held the lock this long, or a journal sync that has run
 * this long (replies wait for it), is wedged: /healthz fails. */
#define S_HEALTH_LOCK_WAIT_MS 5000
#define S_GROUPS_PATH "/v1/groups"
#define S_ENDPOINTS_SUFFIX "/endpoints"
#define S_SD_PATH "/v1/sd"
#define S_MIME_JSON "application/json"
#define S_MIME_TEXT "text/plain; charset=utf-8"
#define S_MIME_PROMETHEUS "text/plain; version=0.0.4; charset=utf-8"
#define S_XSTR(x) #x
#define S_STR(x) S_XSTR(x)

struct rdzv_http {
    struct MHD_Daemon *daemon;
    _Atomic(rdzv_core_t *) core;
    int port;
    char *bearer;                /* the token; NULL: no token asked for */
    rdzv_http_slots_t slots;     /* libmicrohttpd's thread alone */
};

/* --- address parsing --- */

static int s_parse_port(const char *text, in_port_t *out, char *err, size_t errlen)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (!*text || *end || errno || v < 0 || v > 65535) {
        snprintf(err, errlen, "--http: port must be an integer in [0, 65535], not \"%s\"", text);
        return -1;
    }
    *out = htons((in_port_t) v);
    return 0;
}

int rdzv_http_parse_addr(const char *addr_port, struct sockaddr_storage *out,
                         char *err, size_t errlen)
{
    char host[INET6_ADDRSTRLEN + 2] = "127.0.0.1";
    const char *port = addr_port;
    memset(out, 0, sizeof *out);
    if (!addr_port || !*addr_port) {
        snprintf(err, errlen, "--http: empty address (want PORT, HOST:PORT or [HOST]:PORT)");
        return -1;
    }
    const char *colon = addr_port[0] == '[' ? strstr(addr_port, "]:") : strrchr(addr_port, ':');
    if (addr_port[0] == '[' && !colon) {
        snprintf(err, errlen, "--http: \"%s\" lacks \"]:PORT\"", addr_port);
        return -1;
    }
    if (colon) {
        const char *start = addr_port + (addr_port[0] == '[');
        size_t len = (size_t) (colon - start);
        if (len == 0 || len >= sizeof host) {
            snprintf(err, errlen, "--http: bad host in \"%s\"", addr_port);
            return -1;
        }
        memcpy(host, start, len);
        host[len] = '\0';
        if (addr_port[0] != '[' && strchr(host, ':')) {
            snprintf(err, errlen, "--http: IPv6 goes in brackets: \"[%s]:PORT\"", host);
            return -1;
        }
        port = colon + 1 + (addr_port[0] == '[');
    }
    struct sockaddr_in *in4 = (struct sockaddr_in *) out;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *) out;
    if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        return s_parse_port(port, &in4->sin_port, err, errlen);
    }
    if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        return s_parse_port(port, &in6->sin6_port, err, errlen);
    }
    snprintf(err, errlen, "--http: \"%s\" is not a numeric IPv4 or IPv6 address "
             "(IPv6 goes in brackets: [::1]:9400)", host);
    return -1;
}

/* --- responses --- */

/* Queues body (malloc'd; taken over, freed even on failure). */
static enum MHD_Result s_answer(struct MHD_Connection *conn, unsigned status,
                                const char *mime, char *body, size_t len)
{
    if (!body)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, body, free);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, mime);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"rdzvd\"");
    enum MHD_Result rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result s_text(struct MHD_Connection *conn, unsigned status, const char *text)
{
    return s_answer(conn, status, S_MIME_TEXT, strdup(text), strlen(text));
}

static char *s_json_error(const char *code, const char *message)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", message);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

static enum MHD_Result s_json(struct MHD_Connection *conn, unsigned status, char *text)
{
    return s_answer(conn, status, S_MIME_JSON, text, text ? strlen(text) : 0);
}

/* --- /metrics --- */

static void s_histogram(FILE *f, const char *name, const char *help, const rdzv_histogram_t *h)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cumulative = 0;
    for (int i = 0; i < RDZV_HIST_BUCKETS; i++) {
        cumulative += h->buckets[i];
        fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, rdzv_hist_bounds[i],
                (unsigned long long) cumulative);
    }
    fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long) h->count);
    fprintf(f, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name, (unsigned long long) h->count);
}

static void s_metric(FILE *f, const char *name, const char *type, const char *help,
                     unsigned long long value)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, value);
}

/* A group name as a label value: \ and " escaped (names hold no newline). */
static void s_label(FILE *f, const char *name)
{
    for (const char *p = name; *p; p++) {
        if (*p == '\\' || *p == '"')
            fputc('\\', f);
        fputc(*p, f);
    }
}

/* Only the groups that name a router have router samples. */
static void s_router_metrics(const rdzv_core_stats_t *st, FILE *f)
{
    fputs("# HELP rdzv_group_ranks_registered Ranks of the group its router lists as ready "
          "workers, as the last reconcile found.\n"
          "# TYPE rdzv_group_ranks_registered gauge\n", f);
    for (size_t i = 0; i < st->ngroup; i++)
        if (st->group[i].routed) {
            fputs("rdzv_group_ranks_registered{group=\"", f);
            s_label(f, st->group[i].name);
            fprintf(f, "\"} %d\n", st->group[i].registered);
        }
    fputs("# HELP rdzv_router_errors_total Calls to the group's router that failed, by why.\n"
          "# TYPE rdzv_router_errors_total counter\n", f);
    for (size_t i = 0; i < st->ngroup; i++)
        for (int r = 0; st->group[i].routed && r < RDZV_ROUTER_ERR_REASONS; r++) {
            fputs("rdzv_router_errors_total{group=\"", f);
            s_label(f, st->group[i].name);
            fprintf(f, "\",reason=\"%s\"} %llu\n", rdzv_router_err_names[r],
                    (unsigned long long) st->group[i].router_errors[r]);
        }
}

static void s_group_metrics(const rdzv_core_stats_t *st, FILE *f)
{
    static const struct { const char *name, *help; } families[] = {
        { "rdzv_group_ranks_joined", "Ranks that joined the group's current epoch." },
        { "rdzv_group_world", "The group's world." },
        { "rdzv_group_epoch", "The group's current epoch." },
        { "rdzv_group_complete", "Whether every rank joined the current epoch (1)." },
        { "rdzv_group_ranks_live", "Ranks of the group's complete epoch heard from within "
          "--dead-after." },
        { "rdzv_group_ranks_serving", "Ranks of the group's complete epoch alive whose engine "
          "answers its health check." },
    };
    for (size_t k = 0; k < sizeof families / sizeof families[0]; k++) {
        fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", families[k].name, families[k].help,
                families[k].name);
        for (size_t i = 0; i < st->ngroup; i++) {
            const rdzv_group_stat_t *g = &st->group[i];
            long long v[] = { g->joined, g->world, g->epoch, g->complete, g->live, g->serving };
            fprintf(f, "%s{group=\"", families[k].name);
            s_label(f, g->name);
            fprintf(f, "\"} %lld\n", v[k]);
        }
    }
    s_router_metrics(st, f);
    s_metric(f, "rdzv_group_metrics_omitted", "gauge",
             "Groups past the first " S_STR(RDZV_METRICS_GROUPS)
             " by name, which have no rdzv_group_* samples.", st->groups_omitted);
}

/* The journal's size, its syncs, and whatever its backend counts, by the
 * names the backend gives them (journal.h). */
static void s_journal_metrics(const rdzv_journal_stats_t *j, FILE *f)
{
    for (size_t i = 0; i < j->ngauge; i++)
        s_metric(f, j->gauge[i].name, j->gauge[i].type, j->gauge[i].help,
                 j->gauge[i].value);
    s_metric(f, "rdzv_journal_bytes", "gauge", j->bytes_help, j->bytes);
    s_histogram(f, j->sync_name, j->sync_help, &j->sync);
}

static void s_render_metrics(const rdzv_core_stats_t *st, FILE *f)
{
    const rdzv_metrics_t *m = &st->metrics;
    fprintf(f, "# HELP rdzv_build_info rdzvd's version.\n# TYPE rdzv_build_info gauge\n"
            "rdzv_build_info{version=\"%s\"} 1\n", RDZV_VERSION_STRING);
    s_metric(f, "rdzv_groups", "gauge", "Groups rdzvd knows.", st->groups);
    s_metric(f, "rdzv_ranks_joined", "gauge", "Ranks that joined their group's current epoch.",
             st->ranks_joined);
    s_metric(f, "rdzv_ranks_live", "gauge", "Ranks heard from within --dead-after.",
             st->ranks_live);
    s_metric(f, "rdzv_joins_total", "counter", "Join requests accepted.", m->joins);
    s_metric(f, "rdzv_assignments_total", "counter", "Assignments sent to ranks.",
             m->assignments);
    s_metric(f, "rdzv_epoch_changes_total", "counter", "Groups moved to a new epoch.",
             m->epoch_changes);
    s_metric(f, "rdzv_groups_expired_total", "counter",
             "Groups whose first epoch never formed, deleted after --forming-ttl.",
             m->groups_expired);
    s_metric(f, "rdzv_groups_reclaimed_total", "counter",
             "Forming groups nobody waited in, deleted to make room for a new group.",
             m->groups_reclaimed);
    s_metric(f, "rdzv_journal_compactions_total", "counter",
             "Journal rewrites as the records of the current state.", m->compactions);
    s_metric(f, "rdzv_open_files_limit", "gauge",
             "rdzvd's limit on open files (each connection is one).", st->fds_limit);
    s_metric(f, "rdzv_open_files_near_limit", "gauge",
             "Whether fewer than a twentieth of the limit is left (1): connections soon fail.",
             st->fds_short);
    s_metric(f, "rdzv_connections", "gauge", "Client connections open now.", st->connections);
    s_metric(f, "rdzv_connections_max", "gauge",
             "Connections --max-connections allows; one more is closed at once.",
             st->connection_cap);
    fprintf(f, "# HELP rdzv_peers_dropped_total Connections rdzvd closed: the peer left its "
            "replies unread (slow_reader) or came over --max-connections (connection_cap).\n"
            "# TYPE rdzv_peers_dropped_total counter\n");
    for (int i = 0; i < RDZV_PEER_DROP_REASONS; i++)
        fprintf(f, "rdzv_peers_dropped_total{reason=\"%s\"} %llu\n", rdzv_peer_drop_names[i],
                st->peers_dropped[i]);
    fprintf(f, "# HELP rdzv_replies_dropped_total Replies not sent as made: the peer reads "
            "nothing (slow_reader), was gone (gone), or left too much unread and got a busy "
            "error instead (busy).\n# TYPE rdzv_replies_dropped_total counter\n");
    for (int i = 0; i < RDZV_DROP_REASONS; i++)
        fprintf(f, "rdzv_replies_dropped_total{reason=\"%s\"} %llu\n", rdzv_drop_reason_names[i],
                st->replies_dropped[i]);
    s_metric(f, "rdzv_reply_bytes_unread", "gauge",
             "Bytes of replies sent to peers and not yet taken by them.", rdzv_sendq_total());
    fprintf(f, "# HELP rdzv_shard_requests_total Requests received, by the shard whose "
            "listener took the connection.\n# TYPE rdzv_shard_requests_total counter\n");
    for (int i = 0; i < RDZV_MAX_SHARDS; i++)
        if (m->shard_requests[i] || i == 0)
            fprintf(f, "rdzv_shard_requests_total{shard=\"%d\"} %llu\n", i,
                    (unsigned long long) m->shard_requests[i]);
    fprintf(f, "# HELP rdzv_refusals_total Requests refused, by error code.\n"
            "# TYPE rdzv_refusals_total counter\n");
    for (int i = 0; i < RDZV_ERROR_CODES; i++)
        fprintf(f, "rdzv_refusals_total{code=\"%s\"} %llu\n", rdzv_error_codes[i],
                (unsigned long long) m->refusals[i]);
    s_group_metrics(st, f);
    s_histogram(f, "rdzv_join_to_assignment_seconds",
                "Seconds from a rank's join to its assignment.", &m->join_latency);
    s_journal_metrics(&st->journal, f);
}

static enum MHD_Result s_handle_metrics(struct MHD_Connection *conn, rdzv_core_t *core)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return MHD_NO;
    /* A copy taken under the core's lock; the text is formatted after it. */
    rdzv_core_stats_t *st = malloc(sizeof *st);
    if (!st) {
        fclose(f);
        free(text);
        return MHD_NO;
    }
    rdzv_core_stats(core, rdzv_now_ms(), st);
    s_render_metrics(st, f);
    free(st);
    if (fclose(f) != 0) {
        free(text);
        return MHD_NO;
    }
    return s_answer(conn, MHD_HTTP_OK, S_MIME_PROMETHEUS, text, len);
}

/* --- /v1/groups --- */

/* An NCCL unique ID lets whoever has it join that communicator's bootstrap:
 * the HTTP documents say how many a group has, never what they are. */
static void s_redact_ids(cJSON *groups)
{
    for (cJSON *g = groups ? groups->child : NULL; g; g = g->next) {
        cJSON *ids = cJSON_GetObjectItemCaseSensitive(g, "nccl_unique_ids");
        int n = cJSON_IsArray(ids) ? cJSON_GetArraySize(ids) : 0;
        cJSON_DeleteItemFromObjectCaseSensitive(g, "nccl_unique_id");
        cJSON_DeleteItemFromObjectCaseSensitive(g, "nccl_unique_ids");
        cJSON_AddNumberToObject(g, "nccl_unique_ids_redacted", n);
    }
}

/* GET /v1/groups, /v1/groups/G and /v1/groups/G/endpoints. */
static enum MHD_Result s_handle_groups(struct MHD_Connection *conn, rdzv_core_t *core,
                                       const char *path)
{
    char name[RDZV_MAX_NAME + 1];
    size_t len = path ? strlen(path) : 0, suffix = strlen(S_ENDPOINTS_SUFFIX);
    bool endpoints = len > suffix && strcmp(path + len - suffix, S_ENDPOINTS_SUFFIX) == 0;
    if (endpoints && len - suffix <= RDZV_MAX_NAME) {
        memcpy(name, path, len - suffix);
        name[len - suffix] = '\0';
        path = name;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON *groups = NULL;
    if (!path || rdzv_name_valid(path))
        groups = rdzv_core_status_json(core, path, rdzv_now_ms());
    s_redact_ids(groups);
    bool found = groups && (!path || cJSON_GetArraySize(groups) > 0);
    cJSON_AddItemToObject(root, "groups", groups ? groups : cJSON_CreateArray());
    const char *name_p = path;
    char *text;
    if (found && endpoints) {
        cJSON *doc = rdzv_http_endpoints(groups->child);
        text = cJSON_PrintUnformatted(doc);
        cJSON_Delete(doc);
    } else if (found)
        text = cJSON_PrintUnformatted(root);
    else {
        /* Only a valid name is echoed: any other bytes could break the JSON. */
        char message[300];
        snprintf(message, sizeof message, "no group %.255s",
                 rdzv_name_valid(name_p) ? name_p : "by that name");
        text = s_json_error(RDZV_E_NOT_FOUND, message);
    }
    cJSON_Delete(root);
    return s_json(conn, found ? MHD_HTTP_OK : MHD_HTTP_NOT_FOUND, text);
}

/* GET /v1/sd: Prometheus's HTTP service discovery of every rank's API. */
static enum MHD_Result s_handle_sd(struct MHD_Connection *conn, rdzv_core_t *core)
{
    cJSON *groups = rdzv_core_status_json(core, NULL, rdzv_now_ms());
    cJSON *doc = rdzv_http_sd(groups);
    char *text = cJSON_PrintUnformatted(doc);
    cJSON_Delete(doc);
    cJSON_Delete(groups);
    return s_json(conn, MHD_HTTP_OK, text);
}

/* --- probes and dispatch --- */

static enum MHD_Result s_handle_healthz(struct MHD_Connection *conn, rdzv_core_t *core)
{
    if (!core)
        return s_text(conn, MHD_HTTP_OK, "ok\n");
    if (!rdzv_core_responsive(core, S_HEALTH_LOCK_WAIT_MS))
        return s_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "loop busy\n");
    /* The journal outlives the lock's holders; its syncer has a lock of its own. */
    if (rdzv_core_sync_busy_s(core) * 1000 > S_HEALTH_LOCK_WAIT_MS)
        return s_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "journal sync stalled\n");
    return s_text(conn, MHD_HTTP_OK, "ok\n");
}

/* "Bearer TOKEN", the scheme in any case (RFC 7235: case-insensitive). */
static bool s_bearer_ok(const rdzv_http_t *self, struct MHD_Connection *conn)
{
    if (!self->bearer)
        return true;
    const char *got = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                  MHD_HTTP_HEADER_AUTHORIZATION);
    if (!got || strncasecmp(got, "Bearer ", strlen("Bearer ")) != 0)
        return false;
    got += strlen("Bearer ");
    while (*got == ' ')
        got++;
    return rdzv_secret_equal(self->bearer, got);
}

static enum MHD_Result s_route(struct MHD_Connection *conn, rdzv_http_t *self, const char *url)
{
    rdzv_core_t *core = atomic_load(&self->core);
    /* The kubelet's probes carry no token; they reveal nothing either. */
    if (strcmp(url, "/healthz") == 0)
        return s_handle_healthz(conn, core);
    /* Only the leader is ready: a Kubernetes Service then routes to it. */
    if (strcmp(url, "/readyz") == 0)
        return !core ? s_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "replaying the journal\n")
               : !rdzv_core_leading(core)
               ? s_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "standing by (another replica leads)\n")
               : s_text(conn, MHD_HTTP_OK, "ready\n");
    if (!s_bearer_ok(self, conn))
        return s_json(conn, MHD_HTTP_UNAUTHORIZED,
                      s_json_error("unauthorized", "this endpoint wants the --http-token "
                                   "as \"Authorization: Bearer TOKEN\""));
    bool known = strcmp(url, "/metrics") == 0 || strcmp(url, S_GROUPS_PATH) == 0
                 || strcmp(url, S_SD_PATH) == 0
                 || strncmp(url, S_GROUPS_PATH "/", strlen(S_GROUPS_PATH "/")) == 0;
    if (!known)
        return s_json(conn, MHD_HTTP_NOT_FOUND, s_json_error(RDZV_E_NOT_FOUND, "no such path"));
    if (!core)
        return s_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "replaying the journal\n");
    if (strcmp(url, "/metrics") == 0)
        return s_handle_metrics(conn, core);
    if (strcmp(url, S_SD_PATH) == 0)
        return s_handle_sd(conn, core);
    if (strcmp(url, S_GROUPS_PATH) == 0)
        return s_handle_groups(conn, core, NULL);
    return s_handle_groups(conn, core, url + strlen(S_GROUPS_PATH "/"));
}

/* libmicrohttpd would hand on the decoded path as a C string, which an
 * encoded NUL cuts short ("/v1/groups/u8%00zzz" answered group u8): it
 * keeps the path as sent, and s_dispatch decodes it where a NUL shows. */
static size_t s_keep_escaped(void *cls, struct MHD_Connection *conn, char *s)
{
    (void) cls;
    (void) conn;
    return strlen(s);
}

static rdzv_http_slot_t *s_slot(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

/* Closes a connection http_slots.h gave up on: its socket is shut down
 * here, on libmicrohttpd's thread, which then reads the end and closes it. */
static void s_evict(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info)
        shutdown(info->connect_fd, SHUT_RDWR);
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 1U);
}

static void s_on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                            enum MHD_ConnectionNotificationCode code)
{
    rdzv_http_t *self = cls;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        rdzv_http_slots_close(&self->slots, *socket_context);
        *socket_context = NULL;
        return;
    }
    int64_t now = rdzv_now_ms();
    *socket_context = rdzv_http_slots_open(&self->slots, conn, now);
    /* A newcomer is when room matters: it is made then. */
    void *late[RDZV_HTTP_CONNECTION_LIMIT];
    size_t n = rdzv_http_slots_evict(&self->slots, now, late, RDZV_HTTP_CONNECTION_LIMIT);
    for (size_t i = 0; i < n; i++)
        s_evict(late[i]);
}

static void s_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode code)
{
    rdzv_http_t *self = cls;
    (void) con_cls;
    (void) code;
    rdzv_http_slots_response(&self->slots, s_slot(conn), rdzv_now_ms());
}

static enum MHD_Result s_dispatch(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    rdzv_http_slots_request(&((rdzv_http_t *) cls)->slots, s_slot(conn));
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return s_json(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                      s_json_error("method_not_allowed", "only GET and HEAD are served"));
    char *path = strdup(url);
    if (!path)
        return MHD_NO;
    size_t len = MHD_http_unescape(path);
    enum MHD_Result rc;
    if (memchr(path, '\0', len))
        rc = s_json(conn, MHD_HTTP_BAD_REQUEST,
                    s_json_error(RDZV_E_BAD_REQUEST, "the path holds an encoded NUL"));
    else
        rc = s_route(conn, cls, path);
    free(path);
    return rc;
}

/* --- lifecycle --- */

bool rdzv_http_is_loopback(const char *addr_port)
{
    struct sockaddr_storage addr;
    char err[128];
    if (rdzv_http_parse_addr(addr_port, &addr, err, sizeof err) < 0)
        return false;
    if (addr.ss_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *) &addr)->sin6_addr);
    return (ntohl(((const struct sockaddr_in *) &addr)->sin_addr.s_addr) >> 24) == 127;
}

static void s_free(rdzv_http_t *self)
{
    if (self->bearer)
        memset(self->bearer, 0, strlen(self->bearer));
    free(self->bearer);
    free(self);
}

rdzv_http_t *rdzv_http_new(const char *addr_port, const char *bearer, char *err, size_t errlen)
{
    struct sockaddr_storage addr;
    if (rdzv_http_parse_addr(addr_port, &addr, err, errlen) < 0)
        return NULL;
    rdzv_http_t *self = calloc(1, sizeof *self);
    if (!self || (bearer && !(self->bearer = strdup(bearer)))) {
        free(self);
        snprintf(err, errlen, "--http: out of memory");
        return NULL;
    }
    atomic_init(&self->core, NULL);
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* The internal thread inherits this mask: signals stay with the loop. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    self->daemon = MHD_start_daemon(flags, 0, NULL, NULL, s_dispatch, self,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *) &addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned) RDZV_HTTP_CONNECTION_LIMIT,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned) S_CONNECTION_TIMEOUT_S,
        MHD_OPTION_NOTIFY_CONNECTION, s_on_connection, self,
        MHD_OPTION_NOTIFY_COMPLETED, s_on_completed, self,
        MHD_OPTION_UNESCAPE_CALLBACK, s_keep_escaped, NULL,
        MHD_OPTION_END);
    int saved = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!self->daemon) {
        snprintf(err, errlen, "--http %s: cannot serve there (%s)", addr_port,
                 saved ? strerror(saved) : "libmicrohttpd refused");
        s_free(self);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(self->daemon,
                                                           MHD_DAEMON_INFO_BIND_PORT);
    self->port = info ? info->port : 0;
    return self;
}

void rdzv_http_set_core(rdzv_http_t *self, rdzv_core_t *core)
{
    if (self)
        atomic_store(&self->core, core);
}

int rdzv_http_port(const rdzv_http_t *self)
{
    return self ? self->port : -1;
}

void rdzv_http_destroy(rdzv_http_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_http_t *self = *self_p;
    if (self->daemon)
        MHD_stop_daemon(self->daemon);
    s_free(self);
    *self_p = NULL;
}
