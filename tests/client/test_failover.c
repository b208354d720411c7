/* librdzv given several servers: the endpoint list, a standby's not_leader
 * followed to the leader, an unreachable or silent server left for the
 * next, "unavailable" asked again, and the keys and token on every server.
 * Each fake server is a ROUTER in its own thread playing one role. */
#include "rdzv.h"

#include "check_run.h"
#include "endpoints.h"
#include "rdzv_private.h"

#include <check.h>
#include <cjson/cJSON.h>
#include <czmq.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#define S_MAX_REQS 64
#define S_POLL_MS 50
/* Nothing listens there: connections are refused at once. */
#define S_DEAD "tcp://127.0.0.1:1"

typedef enum {
    S_LEADER,       /* answers every request */
    S_STANDBY,      /* not_leader, naming leader (or no one when NULL) */
    S_SILENT,       /* takes requests and never answers */
} s_role_t;

typedef struct {
    char name;                  /* sent back in status replies: who answered */
    s_role_t role;
    char leader[128];
    int unavailable;            /* "unavailable" answers before serving */
    int lead_after;             /* a standby that leads from this request on; 0: never */
    int die_after;              /* closes its socket after this many requests; 0: never */
    void *ctx;
    void *router;
    char endpoint[128];
    pthread_t thread;
    atomic_bool stop;
    atomic_int nreq;
    cJSON *reqs[S_MAX_REQS];    /* read once the thread is stopped */
} s_server_t;

static void s_reply(s_server_t *s, zmq_msg_t *ident, double id, const char *body)
{
    char frame[4096];
    int n = snprintf(frame, sizeof frame, "{\"v\":1,\"id\":%.0f,%s}", id, body);
    zmq_msg_t copy;
    zmq_msg_init(&copy);
    zmq_msg_copy(&copy, ident);
    zmq_msg_send(&copy, s->router, ZMQ_SNDMORE);
    zmq_send(s->router, frame, (size_t) n, 0);
}

/* The leader's answer to op: status names the server, a join gets rank
 * its assignment of a world of 2. */
static void s_serve_op(const s_server_t *s, const cJSON *req, char *body, size_t len)
{
    const char *op = cJSON_GetObjectItem(req, "op")->valuestring;
    const cJSON *rank = cJSON_GetObjectItem(req, "rank");
    if (strcmp(op, "status") == 0)
        snprintf(body, len, "\"ok\":true,\"groups\":[{\"group\":\"%c\"}]", s->name);
    else if (strcmp(op, "heartbeat") == 0)
        snprintf(body, len, "\"ok\":true,\"epoch\":1");
    else if (strcmp(op, "join") == 0)
        snprintf(body, len, "\"ok\":true,\"assignment\":{\"group\":\"g\",\"epoch\":1,"
                 "\"rank\":%d,\"world\":2,\"master_addr\":\"127.0.0.1\",\"master_port\":19500,"
                 "\"ports\":[19500,19501],\"nccl_unique_id\":null}", rank->valueint);
    else
        snprintf(body, len, "\"ok\":true");
}

static void s_answer(s_server_t *s, zmq_msg_t *ident, const cJSON *req, int n)
{
    char body[2048];
    double id = cJSON_GetObjectItem(req, "id")->valuedouble;
    bool standby = s->role == S_STANDBY && !(s->lead_after && n >= s->lead_after);
    if (s->role == S_SILENT)
        return;
    if (standby && *s->leader)
        snprintf(body, sizeof body, "\"ok\":false,\"error\":{\"code\":\"not_leader\","
                 "\"message\":\"standby %c\",\"leader\":\"%s\"}", s->name, s->leader);
    else if (standby)
        snprintf(body, sizeof body, "\"ok\":false,\"error\":{\"code\":\"not_leader\","
                 "\"message\":\"standby %c, no leader elected\"}", s->name);
    else if (n < s->unavailable)
        snprintf(body, sizeof body, "\"ok\":false,\"error\":{\"code\":\"unavailable\","
                 "\"message\":\"etcd did not commit\"}");
    else
        s_serve_op(s, req, body, sizeof body);
    s_reply(s, ident, id, body);
}

static void *s_run(void *arg)
{
    s_server_t *s = arg;
    while (!atomic_load(&s->stop)) {
        zmq_pollitem_t item = { s->router, 0, ZMQ_POLLIN, 0 };
        if (zmq_poll(&item, 1, S_POLL_MS) <= 0)
            continue;
        zmq_msg_t ident;
        char buf[8192];
        zmq_msg_init(&ident);
        zmq_msg_recv(&ident, s->router, 0);
        int len = zmq_recv(s->router, buf, sizeof buf - 1, 0);
        buf[len < 0 ? 0 : len] = '\0';
        cJSON *req = cJSON_Parse(buf);
        int n = atomic_load(&s->nreq);
        if (req && n < S_MAX_REQS) {
            s->reqs[n] = req;
            s_answer(s, &ident, req, n);
            atomic_store(&s->nreq, n + 1);
        } else {
            cJSON_Delete(req);
        }
        zmq_msg_close(&ident);
        if (s->die_after && atomic_load(&s->nreq) >= s->die_after)
            break;
    }
    /* Killed: the connections drop and nothing listens on the port. */
    zmq_close(s->router);
    return NULL;
}

/* A server on a free port, not serving until s_go; curve_secret: a CURVE
 * server with that key. */
static s_server_t *s_new(char name, s_role_t role, const char *leader, int unavailable,
                         const char *curve_secret)
{
    s_server_t *s = calloc(1, sizeof *s);
    s->name = name;
    s->role = role;
    snprintf(s->leader, sizeof s->leader, "%s", leader ? leader : "");
    s->unavailable = unavailable;
    s->ctx = zmq_ctx_new();
    s->router = zmq_socket(s->ctx, ZMQ_ROUTER);
    int zero = 0, one = 1;
    zmq_setsockopt(s->router, ZMQ_LINGER, &zero, sizeof zero);
    if (curve_secret) {
        zmq_setsockopt(s->router, ZMQ_CURVE_SERVER, &one, sizeof one);
        zmq_setsockopt(s->router, ZMQ_CURVE_SECRETKEY, curve_secret, 40);
    }
    ck_assert_int_eq(zmq_bind(s->router, "tcp://127.0.0.1:*"), 0);
    size_t len = sizeof s->endpoint;
    zmq_getsockopt(s->router, ZMQ_LAST_ENDPOINT, s->endpoint, &len);
    return s;
}

static s_server_t *s_go(s_server_t *s)
{
    pthread_create(&s->thread, NULL, s_run, s);
    return s;
}

static s_server_t *s_start(char name, s_role_t role, const char *leader, int unavailable,
                           const char *curve_secret)
{
    return s_go(s_new(name, role, leader, unavailable, curve_secret));
}

/* Stops the thread; the requests stay readable until s_free. */
static void s_stop(s_server_t *s)
{
    if (atomic_exchange(&s->stop, true))
        return;
    pthread_join(s->thread, NULL);
    zmq_ctx_term(s->ctx);
}

static void s_free(s_server_t **s_p)
{
    s_server_t *s = *s_p;
    s_stop(s);
    for (int i = 0; i < atomic_load(&s->nreq); i++)
        cJSON_Delete(s->reqs[i]);
    free(s);
    *s_p = NULL;
}

/* Requests the server received so far. */
static int s_nreq(s_server_t *s)
{
    return atomic_load(&s->nreq);
}

static const char *s_str(const cJSON *req, const char *key)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(req, key);
    return cJSON_IsString(item) ? item->valuestring : "";
}

/* "a,b" of two endpoints. */
static const char *s_list(char *out, size_t len, const char *a, const char *b)
{
    snprintf(out, len, "%s,%s", a, b);
    return out;
}

/* Asks status; returns which server answered ('?' for none). */
static char s_who(rdzv_client_t *c)
{
    char *json = NULL;
    int rc = rdzv_status(c, NULL, &json);
    ck_assert_msg(rc == RDZV_OK, "status: %d %s", rc, rdzv_client_error(c));
    cJSON *groups = cJSON_Parse(json);
    const char *name = s_str(cJSON_GetArrayItem(groups, 0), "group");
    char who = *name ? *name : '?';
    cJSON_Delete(groups);
    free(json);
    return who;
}

/* A names B, the last of three: C, next in the list, is skipped. */
START_TEST(test_not_leader_goes_to_the_leader)
{
    s_server_t *b = s_start('B', S_LEADER, NULL, 0, NULL);
    s_server_t *a = s_start('A', S_STANDBY, b->endpoint, 0, NULL);
    s_server_t *c = s_start('C', S_STANDBY, b->endpoint, 0, NULL);
    char list[500];
    snprintf(list, sizeof list, "%s,%s,%s", a->endpoint, c->endpoint, b->endpoint);
    rdzv_client_t *client = rdzv_client_new(list, NULL, NULL, 0);
    ck_assert_ptr_nonnull(client);
    ck_assert_int_eq(s_who(client), 'B');
    /* The leader stays current: the standby is not asked again. */
    ck_assert_int_eq(s_who(client), 'B');
    s_stop(a);
    s_stop(b);
    s_stop(c);
    ck_assert_int_eq(s_nreq(a), 1);
    ck_assert_int_eq(s_nreq(b), 2);
    ck_assert_int_eq(s_nreq(c), 0);
    rdzv_client_destroy(&client);
    s_free(&a);
    s_free(&b);
    s_free(&c);
}
END_TEST

/* A leader the list lacks (another spelling of it, or a list of one
 * Service address) is followed all the same, as HOST:PORT too. */
START_TEST(test_not_leader_outside_the_list)
{
    s_server_t *b = s_start('B', S_LEADER, NULL, 0, NULL);
    s_server_t *a = s_start('A', S_STANDBY, b->endpoint + strlen("tcp://"), 0, NULL);
    rdzv_client_t *c = rdzv_client_new(a->endpoint, NULL, NULL, 0);
    ck_assert_int_eq(s_who(c), 'B');
    ck_assert_int_eq(s_who(c), 'B');
    s_stop(a);
    ck_assert_int_eq(s_nreq(a), 1);
    rdzv_client_destroy(&c);
    s_free(&a);
    s_free(&b);
}
END_TEST

/* Outside the list, a standby that names another leader outside it. */
START_TEST(test_not_leader_outside_twice)
{
    s_server_t *c = s_start('C', S_LEADER, NULL, 0, NULL);
    s_server_t *b = s_start('B', S_STANDBY, c->endpoint, 0, NULL);
    s_server_t *a = s_start('A', S_STANDBY, b->endpoint, 0, NULL);
    rdzv_client_t *client = rdzv_client_new(a->endpoint, NULL, NULL, 0);
    ck_assert_int_eq(s_who(client), 'C');
    rdzv_client_destroy(&client);
    s_free(&a);
    s_free(&b);
    s_free(&c);
}
END_TEST

/* No leader named (an election under way): the next server of the list. */
START_TEST(test_not_leader_naming_no_one)
{
    s_server_t *a = s_start('A', S_STANDBY, NULL, 0, NULL);
    s_server_t *b = s_start('B', S_LEADER, NULL, 0, NULL);
    char list[300];
    rdzv_client_t *c = rdzv_client_new(s_list(list, sizeof list, a->endpoint, b->endpoint),
                                       NULL, NULL, 0);
    ck_assert_int_eq(s_who(c), 'B');
    rdzv_client_destroy(&c);
    s_free(&a);
    s_free(&b);
}
END_TEST

/* Only standbys: at the deadline their not_leader is the refusal. */
START_TEST(test_only_standbys_refuse)
{
    s_server_t *a = s_start('A', S_STANDBY, NULL, 0, NULL);
    s_server_t *b = s_start('B', S_STANDBY, NULL, 0, NULL);
    char list[300];
    rdzv_client_t *c = rdzv_client_new(s_list(list, sizeof list, a->endpoint, b->endpoint),
                                       NULL, NULL, 0);
    rdzv_client_set_request_timeout(c, 1500);
    char *json = NULL;
    ck_assert_int_eq(rdzv_status(c, NULL, &json), RDZV_ERR_REFUSED);
    ck_assert_str_eq(rdzv_client_error_code(c), "not_leader");
    s_stop(a);
    s_stop(b);
    ck_assert_int_ge(s_nreq(a), 1);
    ck_assert_int_ge(s_nreq(b), 1);
    rdzv_client_destroy(&c);
    s_free(&a);
    s_free(&b);
}
END_TEST

START_TEST(test_dead_first_server)
{
    s_server_t *b = s_start('B', S_LEADER, NULL, 0, NULL);
    char list[300];
    rdzv_client_t *c = rdzv_client_new(s_list(list, sizeof list, S_DEAD, b->endpoint),
                                       NULL, NULL, 0);
    ck_assert_int_eq(s_who(c), 'B');
    ck_assert_int_eq(s_who(c), 'B');
    rdzv_client_destroy(&c);
    s_free(&b);
}
END_TEST

/* A server that takes the request and never answers (hung) is left too. */
START_TEST(test_silent_first_server)
{
    s_server_t *a = s_start('A', S_SILENT, NULL, 0, NULL);
    s_server_t *b = s_start('B', S_LEADER, NULL, 0, NULL);
    char list[300];
    rdzv_client_t *c = rdzv_client_new(s_list(list, sizeof list, a->endpoint, b->endpoint),
                                       NULL, NULL, 0);
    ck_assert_int_eq(s_who(c), 'B');
    s_stop(a);
    ck_assert_int_ge(s_nreq(a), 1);
    rdzv_client_destroy(&c);
    s_free(&a);
    s_free(&b);
}
END_TEST

/* "unavailable" is asked again, on one server as on a list. */
START_TEST(test_unavailable_then_served)
{
    s_server_t *a = s_start('A', S_LEADER, NULL, 2, NULL);
    rdzv_client_t *c = rdzv_client_new(a->endpoint, NULL, NULL, 0);
    ck_assert_int_eq(s_who(c), 'A');
    s_stop(a);
    ck_assert_int_eq(s_nreq(a), 3);
    rdzv_client_destroy(&c);
    s_free(&a);
    a = s_start('A', S_LEADER, NULL, 1, NULL);
    s_server_t *b = s_start('B', S_STANDBY, a->endpoint, 0, NULL);
    char list[300];
    c = rdzv_client_new(s_list(list, sizeof list, a->endpoint, b->endpoint), NULL, NULL, 0);
    ck_assert_int_eq(s_who(c), 'A');
    rdzv_client_destroy(&c);
    s_free(&a);
    s_free(&b);
}
END_TEST

START_TEST(test_unavailable_until_the_deadline)
{
    s_server_t *a = s_start('A', S_LEADER, NULL, S_MAX_REQS, NULL);
    rdzv_client_t *c = rdzv_client_new(a->endpoint, NULL, NULL, 0);
    rdzv_client_set_request_timeout(c, 1500);
    char *json = NULL;
    ck_assert_int_eq(rdzv_status(c, NULL, &json), RDZV_ERR_REFUSED);
    ck_assert_ptr_null(json);
    ck_assert_str_eq(rdzv_client_error_code(c), "unavailable");
    ck_assert_str_eq(rdzv_client_error(c), "etcd did not commit");
    rdzv_client_destroy(&c);
    s_free(&a);
}
END_TEST

/* A join reaches the leader through a standby, with the host that routes
 * to the servers. */
START_TEST(test_join_through_a_standby)
{
    s_server_t *b = s_start('B', S_LEADER, NULL, 0, NULL);
    s_server_t *a = s_start('A', S_STANDBY, b->endpoint, 0, NULL);
    char list[300];
    rdzv_client_t *c = rdzv_client_new(s_list(list, sizeof list, a->endpoint, b->endpoint),
                                       "sess", NULL, 0);
    rdzv_join_args_t args = { .group = "g", .world = 2, .rank = 1, .timeout_ms = 5000 };
    rdzv_assignment_t *asg = NULL;
    ck_assert_int_eq(rdzv_join(c, &args, &asg), RDZV_OK);
    ck_assert_int_eq(rdzv_assignment_rank(asg), 1);
    s_stop(b);
    ck_assert_int_eq(s_nreq(b), 1);
    ck_assert_str_eq(s_str(b->reqs[0], "op"), "join");
    ck_assert_str_eq(s_str(b->reqs[0], "host"), "127.0.0.1");
    ck_assert_str_eq(s_str(b->reqs[0], "session"), "sess");
    rdzv_assignment_destroy(&asg);
    rdzv_client_destroy(&c);
    s_free(&a);
    s_free(&b);
}
END_TEST

/* The leader dies holding a join (no reply owed yet), and the standby,
 * still naming the dead leader for a while, takes over: the waiting rank
 * leaves the dead server for the standby however long its next copy has
 * been due, and gets its assignment there. */
START_TEST(test_join_survives_the_leaders_death)
{
    s_server_t *a = s_new('A', S_SILENT, NULL, 0, NULL);
    a->die_after = 1;
    s_go(a);
    s_server_t *b = s_new('B', S_STANDBY, a->endpoint, 0, NULL);
    b->lead_after = 2;
    s_go(b);
    char list[300];
    rdzv_client_t *c = rdzv_client_new(s_list(list, sizeof list, a->endpoint, b->endpoint),
                                       "sess", NULL, 0);
    rdzv_join_args_t args = { .group = "g", .world = 2, .rank = 1, .timeout_ms = 15000 };
    rdzv_assignment_t *asg = NULL;
    int rc = rdzv_join(c, &args, &asg);
    ck_assert_msg(rc == RDZV_OK, "join: %d %s", rc, rdzv_client_error(c));
    ck_assert_int_eq(rdzv_assignment_rank(asg), 1);
    s_stop(b);
    ck_assert_int_eq(s_nreq(a), 1);
    ck_assert_int_eq(s_nreq(b), 3);
    rdzv_assignment_destroy(&asg);
    rdzv_client_destroy(&c);
    s_free(&a);
    s_free(&b);
}
END_TEST

/* Heartbeats of 200 ms, each shorter than a server's chance to connect,
 * still leave the dead server: the client remembers it went unanswered. */
START_TEST(test_heartbeat_fails_over)
{
    s_server_t *b = s_start('B', S_LEADER, NULL, 0, NULL);
    char list[300];
    rdzv_assignment_t *asg = rdzv_assignment_from_json(
        "{\"group\":\"g\",\"epoch\":1,\"rank\":0,\"world\":1,\"master_addr\":\"127.0.0.1\","
        "\"master_port\":19500,\"ports\":[19500],\"nccl_unique_id\":null}");
    ck_assert_ptr_nonnull(asg);
    char err[256] = "";
    rdzv_heartbeat_t *hb = rdzv_heartbeat_start(s_list(list, sizeof list, S_DEAD, b->endpoint),
                                                "sess", asg, 200, err, sizeof err);
    ck_assert_msg(hb != NULL, "%s", err);
    while (rdzv_heartbeat_count(hb) == 0)
        usleep(50 * 1000);      /* the test case's timeout bounds it */
    rdzv_heartbeat_stop(&hb);
    s_stop(b);
    ck_assert_str_eq(s_str(b->reqs[0], "op"), "heartbeat");
    rdzv_assignment_destroy(&asg);
    s_free(&b);
}
END_TEST

/* Writes cert's public (and, with secret, its secret) certificate under
 * dir; returns the path of the file to name. */
static char *s_save_cert(zcert_t *cert, const char *dir, const char *name, bool secret)
{
    char *path = zsys_sprintf("%s/%s", dir, name);
    ck_assert_int_eq(zcert_save(cert, path), 0);
    if (!secret)
        return path;
    char *secret_path = zsys_sprintf("%s_secret", path);
    zstr_free(&path);
    return secret_path;
}

/* The CURVE keys and the token go to every server: the leader, reached
 * through a standby, completes the handshake and gets the token. */
START_TEST(test_keys_and_token_on_every_server)
{
    char dir[] = "/tmp/rdzv-failover-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    zcert_t *server = zcert_new(), *client = zcert_new();
    char *server_pub = s_save_cert(server, dir, "server.cert", false);
    char *client_secret = s_save_cert(client, dir, "client.cert", true);
    char token_path[64];
    snprintf(token_path, sizeof token_path, "%s/token", dir);
    FILE *f = fopen(token_path, "w");
    fputs("the-token\n", f);
    fclose(f);
    setenv("RDZV_CURVE_SERVER_PUBLIC", server_pub, 1);
    setenv("RDZV_CURVE_SECRET", client_secret, 1);
    setenv("RDZV_GROUP_TOKEN", token_path, 1);
    s_server_t *b = s_start('B', S_LEADER, NULL, 0, zcert_secret_txt(server));
    s_server_t *a = s_start('A', S_STANDBY, b->endpoint, 0, zcert_secret_txt(server));
    char list[300];
    char err[256] = "";
    rdzv_client_t *c = rdzv_client_new(s_list(list, sizeof list, a->endpoint, b->endpoint),
                                       NULL, err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    ck_assert_int_eq(s_who(c), 'B');
    s_stop(b);
    ck_assert_str_eq(s_str(b->reqs[0], "token"), "the-token");
    unsetenv("RDZV_CURVE_SERVER_PUBLIC");
    unsetenv("RDZV_CURVE_SECRET");
    unsetenv("RDZV_GROUP_TOKEN");
    rdzv_client_destroy(&c);
    s_free(&a);
    s_free(&b);
    char *pub_of_secret = zsys_sprintf("%s/client.cert", dir);
    const char *files[] = { server_pub, client_secret, pub_of_secret, token_path };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        unlink(files[i]);
    rmdir(dir);
    zstr_free(&server_pub);
    zstr_free(&client_secret);
    zstr_free(&pub_of_secret);
    zcert_destroy(&server);
    zcert_destroy(&client);
}
END_TEST

typedef struct {
    const char *list;
    int count;
    const char *first, *last;
} s_list_case_t;

START_TEST(test_endpoints_parse)
{
    static const s_list_case_t ok[] = {
        { "tcp://10.0.0.5:29400", 1, "tcp://10.0.0.5:29400", NULL },
        { "a", 1, "tcp://a:29400", NULL },
        { "a:1,tcp://b:2", 2, "tcp://a:1", "tcp://b:2" },
        { "[::1]:5,ipc:///tmp/x,c", 3, "tcp://[::1]:5", "tcp://c:29400" },
        { "a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a", RDZV_MAX_SERVERS, "tcp://a:29400", NULL },
        /* tcp://HOST without a port means port 29400, as HOST does. */
        { "tcp://rdzvd", 1, "tcp://rdzvd:29400", NULL },
        { "tcp://a,tcp://[fd00::5]", 2, "tcp://a:29400", "tcp://[fd00::5]:29400" },
        { "tcp://eth0;10.0.0.5:1", 1, "tcp://eth0;10.0.0.5:1", NULL },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        rdzv_endpoints_t out;
        char err[256] = "";
        ck_assert_msg(rdzv_endpoints_parse(ok[i].list, &out, err, sizeof err) == 0,
                      "%s: %s", ok[i].list, err);
        ck_assert_int_eq(out.count, ok[i].count);
        ck_assert_str_eq(out.endpoint[0], ok[i].first);
        if (ok[i].last)
            ck_assert_str_eq(out.endpoint[out.count - 1], ok[i].last);
    }
}
END_TEST

typedef struct {
    const char *list;
    const char *says;           /* in the message */
} s_bad_case_t;

START_TEST(test_endpoints_malformed)
{
    static const s_bad_case_t bad[] = {
        { "", "bad endpoint ''" },
        { "a:x", "bad endpoint 'a:x': want" },
        { "a,b:x", "bad endpoint 'b:x' in place 2 of the server list 'a,b:x'" },
        { "a,,b", "empty endpoint in place 2 of the server list 'a,,b'" },
        { "a,", "empty endpoint in place 2" },
        { ",a", "empty endpoint in place 1" },
        { "a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a", "more than 16 endpoints" },
        { "tcp://a:", "bad endpoint 'tcp://a:': want" },
        { "tcp://a:0", "bad endpoint 'tcp://a:0': want" },
        { "tcp://", "bad endpoint 'tcp://': want" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rdzv_endpoints_t out;
        char err[256] = "";
        errno = 0;
        ck_assert_msg(rdzv_endpoints_parse(bad[i].list, &out, err, sizeof err) < 0,
                      "%s", bad[i].list);
        ck_assert_int_eq(errno, EINVAL);
        ck_assert_msg(strstr(err, bad[i].says), "%s: %s", bad[i].list, err);
    }
}
END_TEST

/* What libzmq refuses is named too, as for a single endpoint. */
START_TEST(test_client_new_bad_element)
{
    char err[256] = "";
    errno = 0;
    ck_assert_ptr_null(rdzv_client_new("tcp://127.0.0.1:9,bogus://x", NULL, err, sizeof err));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_msg(strstr(err, "'bogus://x'"), "%s", err);
    errno = 0;
    ck_assert_ptr_null(rdzv_client_new("tcp://127.0.0.1:9,h:port", NULL, err, sizeof err));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_msg(strstr(err, "'h:port' in place 2"), "%s", err);
}
END_TEST

static Suite *s_suite(void)
{
    Suite *s = suite_create("failover");
    TCase *tc = tcase_create("not_leader");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_not_leader_goes_to_the_leader);
    tcase_add_test(tc, test_not_leader_outside_the_list);
    tcase_add_test(tc, test_not_leader_outside_twice);
    tcase_add_test(tc, test_not_leader_naming_no_one);
    tcase_add_test(tc, test_only_standbys_refuse);
    tcase_add_test(tc, test_join_through_a_standby);
    tcase_add_test(tc, test_keys_and_token_on_every_server);
    suite_add_tcase(s, tc);
    tc = tcase_create("no_reply");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_dead_first_server);
    tcase_add_test(tc, test_silent_first_server);
    tcase_add_test(tc, test_heartbeat_fails_over);
    tcase_add_test(tc, test_join_survives_the_leaders_death);
    suite_add_tcase(s, tc);
    tc = tcase_create("unavailable");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_unavailable_then_served);
    tcase_add_test(tc, test_unavailable_until_the_deadline);
    suite_add_tcase(s, tc);
    tc = tcase_create("endpoints");
    tcase_add_test(tc, test_endpoints_parse);
    tcase_add_test(tc, test_endpoints_malformed);
    tcase_add_test(tc, test_client_new_bad_element);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return rdzv_check_run(s_suite());
}
