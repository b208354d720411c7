/* librdzv against a scripted ROUTER in a thread: request fields, id
 * matching, resends through a server restart, errors and deadlines. */
#include "rdzv.h"

#include <dirent.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/wait.h>
#include <cjson/cJSON.h>
#include "check_run.h"
#include "rdzv_private.h"
#include "transport.h"
#include <check.h>
#include <czmq.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define S_MAX_REQS 16
#define S_IDLE_MS 8000      /* a script gives up if the client goes quiet */

typedef struct s_fake s_fake_t;
/* Handles request number n (from 0); returns false to stop serving. */
typedef bool (s_script_fn)(s_fake_t *f, const cJSON *req, int n);

struct s_fake {
    void *ctx;
    void *router;
    char endpoint[128];
    zmq_msg_t ident;            /* the peer of the request being handled */
    s_script_fn *script;
    cJSON *reqs[S_MAX_REQS];    /* every request received, for the asserts */
    int nreq;
    pthread_t thread;
};

static void s_bind(s_fake_t *f, const char *endpoint)
{
    f->router = zmq_socket(f->ctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(f->router, ZMQ_LINGER, &zero, sizeof zero);
    ck_assert_int_eq(zmq_bind(f->router, endpoint), 0);
    size_t len = sizeof f->endpoint;
    zmq_getsockopt(f->router, ZMQ_LAST_ENDPOINT, f->endpoint, &len);
}

/* Replies {"v":1,"id":id,<body>} to the current peer. */
static void s_reply(s_fake_t *f, double id, const char *body)
{
    char frame[4096];
    int n = snprintf(frame, sizeof frame, "{\"v\":1,\"id\":%.0f,%s}", id, body);
    zmq_msg_t copy;
    zmq_msg_init(&copy);
    zmq_msg_copy(&copy, &f->ident);
    zmq_msg_send(&copy, f->router, ZMQ_SNDMORE);
    zmq_send(f->router, frame, (size_t) n, 0);
}

static double s_id(const cJSON *req)
{
    return cJSON_GetObjectItemCaseSensitive(req, "id")->valuedouble;
}

static void *s_serve(void *arg)
{
    s_fake_t *f = arg;
    for (;;) {
        zmq_pollitem_t item = { f->router, 0, ZMQ_POLLIN, 0 };
        if (zmq_poll(&item, 1, S_IDLE_MS) <= 0)
            return NULL;
        char buf[8192];
        zmq_msg_init(&f->ident);
        zmq_msg_recv(&f->ident, f->router, 0);
        int n = zmq_recv(f->router, buf, sizeof buf - 1, 0);
        buf[n < 0 ? 0 : n] = '\0';
        cJSON *req = cJSON_Parse(buf);
        bool go_on = f->nreq < S_MAX_REQS && req;
        if (go_on) {
            f->reqs[f->nreq] = req;
            go_on = f->script(f, req, f->nreq++);
        } else {
            cJSON_Delete(req);
        }
        zmq_msg_close(&f->ident);
        if (!go_on)
            return NULL;
    }
}

static s_fake_t *s_fake_start(s_script_fn *script)
{
    s_fake_t *f = calloc(1, sizeof *f);
    f->ctx = zmq_ctx_new();
    f->script = script;
    s_bind(f, "tcp://127.0.0.1:*");
    pthread_create(&f->thread, NULL, s_serve, f);
    return f;
}

/* Waits for the script to finish; its requests stay readable. */
static void s_fake_wait(s_fake_t *f)
{
    if (f->thread) {
        pthread_join(f->thread, NULL);
        f->thread = 0;
    }
}

static void s_fake_stop(s_fake_t **f_p)
{
    s_fake_t *f = *f_p;
    s_fake_wait(f);
    zmq_close(f->router);
    zmq_ctx_term(f->ctx);
    for (int i = 0; i < f->nreq; i++)
        cJSON_Delete(f->reqs[i]);
    free(f);
    *f_p = NULL;
}

static const char *s_str(const cJSON *req, const char *key)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(req, key);
    return cJSON_IsString(item) ? item->valuestring : "";
}

static double s_num(const cJSON *req, const char *key)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(req, key);
    return cJSON_IsNumber(item) ? item->valuedouble : -1;
}

static int64_t s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* An assignment reply for rank of 2 in group g. */
static void s_assignment_body(char *out, size_t len, int rank)
{
    snprintf(out, len, "\"ok\":true,\"assignment\":{\"group\":\"g\",\"epoch\":1,"
             "\"rank\":%d,\"world\":2,\"master_addr\":\"127.0.0.1\",\"master_port\":19500,"
             "\"ports\":[19500,19501],\"nccl_unique_id\":null,\"members\":["
             "{\"rank\":0,\"host\":\"127.0.0.1\",\"node\":\"n0\"},"
             "{\"rank\":1,\"host\":\"127.0.0.1\",\"node\":\"n1\"}]}", rank);
}

/* A stale reply (an older request's id, rank 0) first, then the real one. */
static bool s_script_join(s_fake_t *f, const cJSON *req, int n)
{
    char body[1024];
    s_assignment_body(body, sizeof body, 0);
    s_reply(f, s_id(req) - 1, body);
    s_assignment_body(body, sizeof body, 1);
    s_reply(f, s_id(req), body);
    return false;
}

static rdzv_join_args_t s_args(int timeout_ms)
{
    rdzv_join_args_t a = { .group = "g", .world = 2, .rank = 1, .timeout_ms = timeout_ms };
    return a;
}

START_TEST(test_join_fields_and_stale_reply)
{
    s_fake_t *f = s_fake_start(s_script_join);
    rdzv_client_t *c = rdzv_client_new(f->endpoint, NULL, NULL, 0);
    rdzv_join_args_t a = s_args(5000);
    rdzv_assignment_t *asg = NULL;
    ck_assert_int_eq(rdzv_join(c, &a, &asg), RDZV_OK);
    ck_assert_int_eq(rdzv_assignment_rank(asg), 1);
    s_fake_stop(&f);
    ck_assert_str_eq(rdzv_client_error(c), "");
    rdzv_assignment_destroy(&asg);
    rdzv_client_destroy(&c);
}
END_TEST

START_TEST(test_join_request_fields)
{
    s_fake_t *f = s_fake_start(s_script_join);
    rdzv_client_t *c = rdzv_client_new(f->endpoint, "sess-1", NULL, 0);
    rdzv_join_args_t a = s_args(5000);
    a.nccl_id = "none";
    rdzv_assignment_t *asg = NULL;
    ck_assert_int_eq(rdzv_join(c, &a, &asg), RDZV_OK);
    s_fake_wait(f);
    ck_assert_int_eq(f->nreq, 1);
    const cJSON *req = f->reqs[0];
    char hostname[HOST_NAME_MAX + 1];
    gethostname(hostname, sizeof hostname);
    ck_assert_int_eq(s_num(req, "v"), 1);
    ck_assert_int_gt(s_num(req, "id"), 0);
    ck_assert_str_eq(s_str(req, "op"), "join");
    ck_assert_str_eq(s_str(req, "group"), "g");
    ck_assert_int_eq(s_num(req, "world"), 2);
    ck_assert_int_eq(s_num(req, "rank"), 1);
    ck_assert_str_eq(s_str(req, "session"), "sess-1");
    ck_assert_str_eq(s_str(req, "host"), "127.0.0.1");   /* routes via lo */
    ck_assert_str_eq(s_str(req, "node"), hostname);
    ck_assert_int_eq(s_num(req, "timeout_ms"), 5000);
    ck_assert_str_eq(s_str(req, "nccl_id"), "none");
    /* The members list only when asked for (O(world) per rank). */
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(req, "members")));
    s_fake_stop(&f);
    rdzv_assignment_destroy(&asg);
    rdzv_client_destroy(&c);
}
END_TEST

/* The first join is lost with the server (closed unanswered); a new server
 * on the same endpoint must get the identical join and answer it. */
static bool s_script_restart(s_fake_t *f, const cJSON *req, int n)
{
    if (n == 0) {
        char endpoint[128];
        snprintf(endpoint, sizeof endpoint, "%s", f->endpoint);
        zmq_close(f->router);
        usleep(200 * 1000);
        s_bind(f, endpoint);
        return true;
    }
    char body[1024];
    s_assignment_body(body, sizeof body, 1);
    s_reply(f, s_id(req), body);
    return false;
}

START_TEST(test_join_rides_through_restart)
{
    s_fake_t *f = s_fake_start(s_script_restart);
    rdzv_client_t *c = rdzv_client_new(f->endpoint, NULL, NULL, 0);
    rdzv_join_args_t a = s_args(8000);
    rdzv_assignment_t *asg = NULL;
    ck_assert_int_eq(rdzv_join(c, &a, &asg), RDZV_OK);
    s_fake_wait(f);
    ck_assert_int_eq(f->nreq, 2);
    cJSON *first = cJSON_Duplicate(f->reqs[0], 1), *second = cJSON_Duplicate(f->reqs[1], 1);
    cJSON_DeleteItemFromObject(first, "id");
    cJSON_DeleteItemFromObject(second, "id");
    ck_assert(cJSON_Compare(first, second, 1));
    cJSON_Delete(first);
    cJSON_Delete(second);
    s_fake_stop(&f);
    rdzv_assignment_destroy(&asg);
    rdzv_client_destroy(&c);
}
END_TEST

static bool s_script_refuse(s_fake_t *f, const cJSON *req, int n)
{
    s_reply(f, s_id(req), "\"error\":{\"code\":\"world_mismatch\","
                          "\"message\":\"group g has world 4, not 2\"}");
    return false;
}

START_TEST(test_join_refused)
{
    s_fake_t *f = s_fake_start(s_script_refuse);
    rdzv_client_t *c = rdzv_client_new(f->endpoint, NULL, NULL, 0);
    rdzv_join_args_t a = s_args(5000);
    rdzv_assignment_t *asg = NULL;
    ck_assert_int_eq(rdzv_join(c, &a, &asg), RDZV_ERR_REFUSED);
    ck_assert_ptr_null(asg);
    ck_assert_str_eq(rdzv_client_error_code(c), "world_mismatch");
    ck_assert_str_eq(rdzv_client_error(c), "group g has world 4, not 2");
    s_fake_stop(&f);
    rdzv_client_destroy(&c);
}
END_TEST

static bool s_script_server_timeout(s_fake_t *f, const cJSON *req, int n)
{
    s_reply(f, s_id(req), "\"error\":{\"code\":\"timeout\",\"message\":\"1 of 2 joined\"}");
    return false;
}

START_TEST(test_join_server_timeout)
{
    s_fake_t *f = s_fake_start(s_script_server_timeout);
    rdzv_client_t *c = rdzv_client_new(f->endpoint, NULL, NULL, 0);
    rdzv_join_args_t a = s_args(5000);
    rdzv_assignment_t *asg = NULL;
    ck_assert_int_eq(rdzv_join(c, &a, &asg), RDZV_ERR_TIMEOUT);
    ck_assert_str_eq(rdzv_client_error_code(c), "timeout");
    s_fake_stop(&f);
    rdzv_client_destroy(&c);
}
END_TEST

/* Answers each op the way rdzvd would, for the non-join calls. */
static bool s_script_ops(s_fake_t *f, const cJSON *req, int n)
{
    const char *op = s_str(req, "op");
    if (strcmp(op, "kv_get") == 0 || strcmp(op, "kv_wait") == 0)
        s_reply(f, s_id(req), "\"ok\":true,\"value\":\"v 1\"");
    else if (strcmp(op, "status") == 0)
        s_reply(f, s_id(req), "\"ok\":true,\"groups\":[{\"group\":\"g\"}]");
    else if (strcmp(op, "heartbeat") == 0)
        s_reply(f, s_id(req), "\"ok\":true,\"epoch\":7");
    else
        s_reply(f, s_id(req), "\"ok\":true");
    return n < 5;
}

START_TEST(test_other_ops)
{
    s_fake_t *f = s_fake_start(s_script_ops);
    rdzv_client_t *c = rdzv_client_new(f->endpoint, "s1", NULL, 0);
    char *value = NULL, *json = NULL;
    int64_t epoch = 0;
    ck_assert_int_eq(rdzv_kv_put(c, "g", 2, "k", "v 1"), RDZV_OK);
    ck_assert_int_eq(rdzv_kv_get(c, "g", 2, "k", &value), RDZV_OK);
    ck_assert_str_eq(value, "v 1");
    free(value);
    ck_assert_int_eq(rdzv_kv_wait(c, "g", 2, "k", 1500, &value), RDZV_OK);
    ck_assert_str_eq(value, "v 1");
    free(value);
    ck_assert_int_eq(rdzv_status(c, NULL, &json), RDZV_OK);
    ck_assert_str_eq(json, "[{\"group\":\"g\"}]");
    free(json);
    ck_assert_int_eq(rdzv_heartbeat(c, "g", 1, 2, &epoch), RDZV_OK);
    ck_assert_int_eq(epoch, 7);
    ck_assert_int_eq(rdzv_group_delete(c, "g"), RDZV_OK);
    s_fake_wait(f);
    ck_assert_int_eq(f->nreq, 6);
    ck_assert_str_eq(s_str(f->reqs[0], "op"), "kv_put");
    ck_assert_str_eq(s_str(f->reqs[0], "value"), "v 1");
    ck_assert_int_eq(s_num(f->reqs[0], "epoch"), 2);
    ck_assert_str_eq(s_str(f->reqs[1], "key"), "k");
    ck_assert_int_eq(s_num(f->reqs[2], "timeout_ms"), 1500);
    ck_assert_ptr_null(cJSON_GetObjectItem(f->reqs[3], "group"));
    ck_assert_str_eq(s_str(f->reqs[4], "session"), "s1");
    ck_assert_int_eq(s_num(f->reqs[4], "rank"), 1);
    ck_assert_str_eq(s_str(f->reqs[5], "op"), "group_delete");
    for (int i = 1; i < 6; i++)     /* every request gets its own id */
        ck_assert_double_gt(s_num(f->reqs[i], "id"), s_num(f->reqs[i - 1], "id"));
    s_fake_stop(&f);
    rdzv_client_destroy(&c);
}
END_TEST

START_TEST(test_request_timeout)
{
    rdzv_client_t *c = rdzv_client_new("tcp://127.0.0.1:1", NULL, NULL, 0);
    ck_assert_int_eq(rdzv_client_set_request_timeout(c, 200), RDZV_OK);
    char *json = NULL;
    int64_t t0 = s_now_ms();
    ck_assert_int_eq(rdzv_status(c, NULL, &json), RDZV_ERR_TIMEOUT);
    ck_assert_int_lt(s_now_ms() - t0, 1500);
    ck_assert_ptr_null(json);
    rdzv_client_destroy(&c);
}
END_TEST

/* A server name that does not resolve: every call waits out its timeout
 * (libzmq and the join look the name up again meanwhile), then fails
 * with RDZV_ERR_TIMEOUT naming the name and getaddrinfo's reason, not
 * "no reply" or, for a join, an I/O error at once. */
START_TEST(test_unresolvable_server)
{
    static const char want[] = "cannot resolve server host 'no-such-host.invalid' (DNS: ";
    rdzv_client_t *c = rdzv_client_new("tcp://no-such-host.invalid:29400", NULL, NULL, 0);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(rdzv_client_set_request_timeout(c, 200), RDZV_OK);
    char *json = NULL;
    ck_assert_int_eq(rdzv_status(c, NULL, &json), RDZV_ERR_TIMEOUT);
    ck_assert_msg(strstr(rdzv_client_error(c), want), "%s", rdzv_client_error(c));
    rdzv_join_args_t a = s_args(200);
    rdzv_assignment_t *asg = NULL;
    ck_assert_int_eq(rdzv_join(c, &a, &asg), RDZV_ERR_TIMEOUT);
    ck_assert_msg(strstr(rdzv_client_error(c), want), "%s", rdzv_client_error(c));
    ck_assert_ptr_nonnull(strstr(rdzv_client_error(c), "; timeout 0.2 s"));
    a.host = "10.0.0.1";        /* no lookup of its own: the transport says it */
    ck_assert_int_eq(rdzv_join(c, &a, &asg), RDZV_ERR_TIMEOUT);
    ck_assert_msg(strstr(rdzv_client_error(c), want), "%s", rdzv_client_error(c));
    ck_assert_ptr_null(asg);
    rdzv_client_destroy(&c);
}
END_TEST

/* A list: the join's host comes from a name of it that resolves. */
START_TEST(test_unresolvable_first_of_list)
{
    rdzv_client_t *c = rdzv_client_new("no-such-host.invalid,tcp://127.0.0.1:1", NULL, NULL, 0);
    rdzv_join_args_t a = s_args(300);
    a.node = "n";
    rdzv_assignment_t *asg = NULL;
    ck_assert_int_eq(rdzv_join(c, &a, &asg), RDZV_ERR_TIMEOUT);
    const char *why = rdzv_client_error(c);
    ck_assert_msg(strstr(why, "no reply from any of tcp://no-such-host.invalid:29400, "
                         "tcp://127.0.0.1:1 (no CURVE keys are set"), "%s", why);
    ck_assert_msg(strstr(why, "; cannot resolve server host 'no-such-host.invalid'"), "%s", why);
    rdzv_client_destroy(&c);
}
END_TEST

/* Every call that nobody answers says what to check, CURVE keys first, in
 * the words of rdzv_no_reply_why: a heartbeat and a status as a join, since
 * after a key rotation the agent's heartbeat is what fails. */
static const char s_curve_why[] = "(RDZV_CURVE_SERVER_PUBLIC is not rdzvd's public key, "
                                  "or this client's key is not in rdzvd's --clients; "
                                  "or rdzvd down, wrong address, Service/NetworkPolicy)";
static const char s_plain_why[] = "(no CURVE keys are set (RDZV_CURVE_SERVER_PUBLIC) and "
                                  "rdzvd may require them; or rdzvd down";

static void s_assert_no_reply(rdzv_client_t *c, const char *why)
{
    char *json = NULL;
    int64_t epoch = 0;
    ck_assert_int_eq(rdzv_heartbeat(c, "g", 0, 1, &epoch), RDZV_ERR_TIMEOUT);
    ck_assert_msg(strstr(rdzv_client_error(c), why), "%s", rdzv_client_error(c));
    ck_assert_int_eq(rdzv_status(c, NULL, &json), RDZV_ERR_TIMEOUT);
    ck_assert_msg(strstr(rdzv_client_error(c), why), "%s", rdzv_client_error(c));
    rdzv_join_args_t a = s_args(100);
    a.host = "h";
    a.node = "n";
    rdzv_assignment_t *asg = NULL;
    ck_assert_int_eq(rdzv_join(c, &a, &asg), RDZV_ERR_TIMEOUT);
    ck_assert_msg(strstr(rdzv_client_error(c), why), "%s", rdzv_client_error(c));
}

START_TEST(test_no_reply_names_causes)
{
    char text[RDZV_ERR_LEN];
    rdzv_no_reply_why(text, sizeof text, "tcp://a:1", true);
    ck_assert_ptr_eq(strstr(text, "no reply from tcp://a:1 "), text);
    ck_assert_ptr_nonnull(strstr(text, s_curve_why));
    rdzv_client_t *c = rdzv_client_new("tcp://127.0.0.1:1", NULL, NULL, 0);
    rdzv_client_set_request_timeout(c, 100);
    s_assert_no_reply(c, s_plain_why);
    rdzv_client_destroy(&c);

    char tmp[] = "/tmp/rdzv-test-curve-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    char server[64], mine[64];
    snprintf(server, sizeof server, "%s/server", tmp);
    snprintf(mine, sizeof mine, "%s/client", tmp);
    zcert_t *cert = zcert_new();
    ck_assert_int_eq(zcert_save(cert, server), 0);
    ck_assert_int_eq(zcert_save(cert, mine), 0);
    zcert_destroy(&cert);
    strcat(mine, "_secret");
    setenv("RDZV_CURVE_SERVER_PUBLIC", server, 1);
    setenv("RDZV_CURVE_SECRET", mine, 1);
    c = rdzv_client_new("tcp://127.0.0.1:1", NULL, NULL, 0);
    unsetenv("RDZV_CURVE_SERVER_PUBLIC");
    unsetenv("RDZV_CURVE_SECRET");
    ck_assert_ptr_nonnull(c);
    rdzv_client_set_request_timeout(c, 100);
    s_assert_no_reply(c, s_curve_why);
    rdzv_client_destroy(&c);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ASan's allocator is not fork-safe while other threads allocate (libzmq's
 * I/O threads do): a forked child can hang in malloc. The fork part of the
 * test runs in the plain builds only. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define S_SANITIZED 1
#endif

/* Threads of this process (its /proc/self/task entries). */
static int s_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

/* Clients share the process's one ZeroMQ context: 32 of them cost libzmq's
 * two threads once, not two each; the last destroy ends them. A forked
 * child gets a context of its own and can talk to rdzvd. */
START_TEST(test_clients_share_one_context)
{
    int before = s_threads();
    rdzv_client_t *c[32];
    for (int i = 0; i < 32; i++)
        ck_assert_ptr_nonnull(c[i] = rdzv_client_new("tcp://127.0.0.1:9", NULL, NULL, 0));
    ck_assert_int_le(s_threads() - before, 2);
#ifndef S_SANITIZED
    s_fake_t *f = s_fake_start(s_script_join);
    pid_t pid = fork();
    if (pid == 0) {
        rdzv_client_t *child = rdzv_client_new(f->endpoint, "child", NULL, 0);
        rdzv_join_args_t a = s_args(5000);
        rdzv_assignment_t *asg = NULL;
        int rc = rdzv_join(child, &a, &asg);
        rdzv_assignment_destroy(&asg);
        rdzv_client_destroy(&child);
        _exit(rc == RDZV_OK ? 0 : 1);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    s_fake_stop(&f);
#endif
    for (int i = 0; i < 32; i++)
        rdzv_client_destroy(&c[i]);
    ck_assert_int_eq(s_threads(), before);
    /* More clients than libzmq's default of 1023 sockets a context. */
    /* Towards a listener that never accepts: the kernel completes the
     * connects into its backlog, so libzmq does not retry 1100 refused
     * connects ten times a second (slow under the sanitizers). */
    enum { MANY = 1100 };
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t slen = sizeof sin;
    ck_assert(bind(l, (struct sockaddr *) &sin, sizeof sin) == 0 && listen(l, 4096) == 0
              && getsockname(l, (struct sockaddr *) &sin, &slen) == 0);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", ntohs(sin.sin_port));
    rdzv_client_t **many = calloc(MANY, sizeof *many);
    for (int i = 0; i < MANY; i++)
        ck_assert_msg((many[i] = rdzv_client_new(ep, NULL, NULL, 0)) != NULL, "client %d", i);
    for (int i = 0; i < MANY; i++)
        rdzv_client_destroy(&many[i]);
    free(many);
    close(l);
}
END_TEST

START_TEST(test_client_session)
{
    rdzv_client_t *a = rdzv_client_new("tcp://127.0.0.1:1", NULL, NULL, 0);
    rdzv_client_t *b = rdzv_client_new("tcp://127.0.0.1:1", NULL, NULL, 0);
    rdzv_client_t *c = rdzv_client_new("tcp://127.0.0.1:1", "mine", NULL, 0);
    ck_assert_uint_eq(strlen(rdzv_client_session(a)), 32);
    ck_assert_uint_eq(strspn(rdzv_client_session(a), "0123456789abcdef"), 32);
    ck_assert_str_ne(rdzv_client_session(a), rdzv_client_session(b));
    ck_assert_str_eq(rdzv_client_session(c), "mine");
    rdzv_client_destroy(&a);
    rdzv_client_destroy(&b);
    rdzv_client_destroy(&c);
    rdzv_client_destroy(&c);
    ck_assert_ptr_null(c);
}
END_TEST

START_TEST(test_client_bad_endpoint)
{
    char err[256] = "";
    errno = 0;
    ck_assert_ptr_null(rdzv_client_new("bogus://x", NULL, err, sizeof err));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "bogus://x"));
    ck_assert_ptr_null(rdzv_client_new("tcp://h:1", "bad\nsession", err, sizeof err));
}
END_TEST

START_TEST(test_join_timeout)
{
    /* Nothing listens on this endpoint: only the client deadline can end it,
     * RDZV_WAIT_MARGIN_MS after the server's would have. */
    rdzv_client_t *c = rdzv_client_new("tcp://127.0.0.1:1", NULL, NULL, 0);
    rdzv_join_args_t a = s_args(300);
    a.host = "h";
    a.node = "n";
    rdzv_assignment_t *asg = NULL;
    int64_t t0 = s_now_ms();
    ck_assert_int_eq(rdzv_join(c, &a, &asg), RDZV_ERR_TIMEOUT);
    int64_t took = s_now_ms() - t0;
    ck_assert_int_ge(took, 290 + RDZV_WAIT_MARGIN_MS);
    ck_assert_int_lt(took, 1500 + RDZV_WAIT_MARGIN_MS);
    ck_assert_ptr_null(asg);
    ck_assert_str_ne(rdzv_client_error(c), "");
    rdzv_client_destroy(&c);
}
END_TEST

START_TEST(test_join_usage)
{
    rdzv_client_t *c = rdzv_client_new("tcp://127.0.0.1:1", NULL, NULL, 0);
    rdzv_assignment_t *asg = NULL;
    rdzv_join_args_t a = s_args(1000);
    a.rank = 2;
    ck_assert_int_eq(rdzv_join(c, &a, &asg), RDZV_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(rdzv_client_error(c), "rank"));
    a = s_args(1000);
    a.group = "has space";
    ck_assert_int_eq(rdzv_join(c, &a, &asg), RDZV_ERR_USAGE);
    a = s_args(1000);
    a.world = 0;
    ck_assert_int_eq(rdzv_join(c, &a, &asg), RDZV_ERR_USAGE);
    a = s_args(1000);
    a.nccl_id = "maybe";
    ck_assert_int_eq(rdzv_join(c, &a, &asg), RDZV_ERR_USAGE);
    ck_assert_int_eq(rdzv_join(c, NULL, &asg), RDZV_ERR_USAGE);
    ck_assert_int_eq(rdzv_kv_put(c, "g", 0, "k", "v"), RDZV_ERR_USAGE);
    ck_assert_int_eq(rdzv_kv_put(c, "g", 1, "", "v"), RDZV_ERR_USAGE);
    ck_assert_int_eq(rdzv_client_set_request_timeout(c, 0), RDZV_ERR_USAGE);
    rdzv_client_destroy(&c);
}
END_TEST

/* libzmq resolves names to IPv6 addresses alone once ZMQ_IPV6 is on, so it
 * is on only for endpoints that need it: an IPv6 literal. A name with an
 * IPv4 address (localhost everywhere) stays on IPv4. */
START_TEST(test_endpoint_ipv6)
{
    ck_assert(rdzv_endpoint_wants_ipv6("tcp://[::1]:29400"));
    ck_assert(rdzv_endpoint_wants_ipv6("tcp://[fd00::5]:1"));
    ck_assert(!rdzv_endpoint_wants_ipv6("tcp://127.0.0.1:29400"));
    ck_assert(!rdzv_endpoint_wants_ipv6("tcp://*:29400"));
    ck_assert(!rdzv_endpoint_wants_ipv6("tcp://localhost:29400"));
    ck_assert(!rdzv_endpoint_wants_ipv6("tcp://:29400"));
    ck_assert(!rdzv_endpoint_wants_ipv6("ipc:///tmp/rdzv.sock"));
    ck_assert(!rdzv_endpoint_wants_ipv6("inproc://x"));
}
END_TEST

static Suite *s_suite(void)
{
    Suite *s = suite_create("client");
    TCase *tc = tcase_create("join");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_join_fields_and_stale_reply);
    tcase_add_test(tc, test_join_request_fields);
    tcase_add_test(tc, test_join_rides_through_restart);
    tcase_add_test(tc, test_join_refused);
    tcase_add_test(tc, test_join_server_timeout);
    tcase_add_test(tc, test_join_timeout);
    tcase_add_test(tc, test_join_usage);
    suite_add_tcase(s, tc);
    tc = tcase_create("requests");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_other_ops);
    tcase_add_test(tc, test_request_timeout);
    tcase_add_test(tc, test_unresolvable_server);
    tcase_add_test(tc, test_unresolvable_first_of_list);
    tcase_add_test(tc, test_no_reply_names_causes);
    suite_add_tcase(s, tc);
    tc = tcase_create("client_new");
    /* 1100 clients at once: slow under the sanitizers. */
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_client_session);
    tcase_add_test(tc, test_clients_share_one_context);
    tcase_add_test(tc, test_client_bad_endpoint);
    tcase_add_test(tc, test_endpoint_ipv6);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return rdzv_check_run(s_suite());
}
