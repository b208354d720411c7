/* Every kind of bad input against a real rdzvd: each gets its error code,
 * and the server keeps serving a group that is forming meanwhile. */
#include <arpa/inet.h>
#include "check_run.h"
#include <check.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "harness.h"
#include "rdzv.h"

static rdzv_test_server_t server;
static void *ctx;

static void setup(void)
{
    rdzv_test_server_start(&server, "--no-nccl --max-world 1000");
    ctx = zmq_ctx_new();
}

static void teardown(void)
{
    zmq_ctx_term(ctx);
    rdzv_test_server_cleanup(&server);
}

static void *s_dealer(void)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0, timeout = 5000;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    ck_assert_int_eq(zmq_connect(s, server.endpoint), 0);
    return s;
}

/* Sends frame, returns the error code of the reply ("" if none). */
static void s_expect(void *s, const char *frame, size_t len, const char *code)
{
    ck_assert_int_ge(zmq_send(s, frame, len, 0), 0);
    char reply[2048];
    int n = zmq_recv(s, reply, sizeof reply - 1, 0);
    ck_assert_msg(n > 0, "no reply to %.60s", frame);
    reply[n] = '\0';
    char want[64];
    snprintf(want, sizeof want, "\"code\":\"%s\"", code);
    ck_assert_msg(strstr(reply, want) != NULL, "%.60s -> %s, wanted %s", frame, reply, code);
}

#define J(fields) "{\"v\":1,\"op\":\"join\",\"group\":\"g\",\"host\":\"h\",\"node\":\"n\"," fields "}"

static const struct {
    const char *frame;
    const char *code;
} s_bad[] = {
    { "{not json", "bad_json" },
    { "\"just a string\"", "bad_json" },
    { "{\"v\":3,\"op\":\"join\"}", "bad_version" },
    { "{\"v\":1,\"op\":\"teleport\"}", "unknown_op" },
    { J("\"world\":\"two\",\"rank\":0,\"session\":\"s\""), "bad_request" },
    { J("\"world\":2,\"rank\":0"), "bad_request" },
    { J("\"world\":2,\"rank\":2,\"session\":\"s\""), "bad_rank" },
    { J("\"world\":2,\"rank\":-1,\"session\":\"s\""), "bad_rank" },
    { J("\"world\":0,\"rank\":0,\"session\":\"s\""), "bad_world" },
    { J("\"world\":1001,\"rank\":0,\"session\":\"s\""), "bad_world" },
    { J("\"world\":3,\"rank\":1,\"session\":\"s\""), "world_mismatch" },
    { J("\"world\":2,\"rank\":0,\"session\":\"other\""), "rank_taken" },
    { "{\"v\":1,\"op\":\"kv_get\",\"group\":\"g\",\"epoch\":5,\"key\":\"k\"}", "bad_request" },
    { "{\"v\":1,\"op\":\"status\",\"group\":\"nope\"}", "not_found" },
    { "{\"v\":1,\"op\":\"status\"} garbage", "bad_json" },
};

/* Group u is a world-1 group the test below forms. */
#define KV(op, extra) "{\"v\":1,\"op\":\"" op "\",\"group\":\"u\",\"epoch\":1,\"key\":\"k\"" extra "}"

/* Each would change state under a wrong name or value if it were served. */
static const char *s_refused[] = {
    "{\"v\":1,\"op\":\"join\",\"group\":\"a\\u0000b\",\"host\":\"h\",\"node\":\"n\","
    "\"session\":\"s\",\"world\":1,\"rank\":0,\"nccl_id\":\"none\"}",
    KV("kv_put", ",\"value\":\"ab\\u0000cd\""),
    "{\"v\":1,\"op\":\"status\\u0000x\"}",
    KV("kv_put", ",\"value\":\"ab\xff" "cd\""),
    "{\"v\":1,\"op\":\"join\",\"group\":\"a\",\"host\":\"h\xc0\xae\",\"node\":\"n\","
    "\"session\":\"s\",\"world\":1,\"rank\":0,\"nccl_id\":\"none\"}",
    KV("kv_put", ",\"value\":\"first\",\"value\":\"second\""),
    "{\"v\":1,\"op\":\"join\",\"group\":\"a\",\"group\":\"u\",\"host\":\"h\",\"node\":\"n\","
    "\"session\":\"s\",\"world\":1,\"rank\":0,\"nccl_id\":\"none\"}",
};

START_TEST(test_each_bad_input_refused_and_server_serves)
{
    /* Rank 0 of group g waits while the garbage arrives. */
    void *rank0 = s_dealer();
    const char *join0 = J("\"world\":2,\"rank\":0,\"session\":\"s0\",\"id\":1");
    ck_assert_int_ge(zmq_send(rank0, join0, strlen(join0), 0), 0);
    usleep(200000);
    void *bad = s_dealer();
    for (size_t i = 0; i < sizeof s_bad / sizeof s_bad[0]; i++)
        s_expect(bad, s_bad[i].frame, strlen(s_bad[i].frame), s_bad[i].code);
    /* Two frames in one message. */
    ck_assert_int_ge(zmq_send(bad, "{}", 2, ZMQ_SNDMORE), 0);
    s_expect(bad, "{}", 2, "bad_json");
    /* A frame over the request limit. */
    size_t big = 70000;
    char *frame = malloc(big);
    memset(frame, 'x', big);
    s_expect(bad, frame, big, "too_large");
    free(frame);
    zmq_close(bad);
    /* The waiting rank still gets its assignment once rank 1 joins. */
    void *rank1 = s_dealer();
    const char *join1 = J("\"world\":2,\"rank\":1,\"session\":\"s1\",\"id\":1");
    ck_assert_int_ge(zmq_send(rank1, join1, strlen(join1), 0), 0);
    char reply[4096];
    ck_assert_int_gt(zmq_recv(rank0, reply, sizeof reply - 1, 0), 0);
    ck_assert_int_gt(zmq_recv(rank1, reply, sizeof reply - 1, 0), 0);
    zmq_close(rank0);
    zmq_close(rank1);
}
END_TEST

/* Sends frame and returns whether the reply is a success. */
static bool s_ok(void *s, const char *frame)
{
    ck_assert_int_ge(zmq_send(s, frame, strlen(frame), 0), 0);
    char reply[4096];
    int n = zmq_recv(s, reply, sizeof reply - 1, 0);
    ck_assert_msg(n > 0, "no reply to %.60s", frame);
    reply[n] = '\0';
    return strstr(reply, "\"ok\":true") != NULL;
}

/* A refused request records nothing: no group under the cut-short name,
 * no value cut short. */
START_TEST(test_refused_strings_record_nothing)
{
    void *s = s_dealer();
    const char *join = "{\"v\":1,\"op\":\"join\",\"group\":\"u\",\"host\":\"h\",\"node\":\"n\","
                       "\"session\":\"s\",\"world\":1,\"rank\":0,\"nccl_id\":\"none\"}";
    ck_assert(s_ok(s, join));
    for (size_t i = 0; i < sizeof s_refused / sizeof s_refused[0]; i++)
        s_expect(s, s_refused[i], strlen(s_refused[i]), "bad_request");
    s_expect(s, KV("kv_get", ""), strlen(KV("kv_get", "")), "not_found");
    const char *status_a = "{\"v\":1,\"op\":\"status\",\"group\":\"a\"}";
    s_expect(s, status_a, strlen(status_a), "not_found");
    ck_assert(s_ok(s, KV("kv_put", ",\"value\":\"fine\"")));
    zmq_close(s);
}
END_TEST

static int s_port(void)
{
    return atoi(strrchr(server.endpoint, ':') + 1);
}

START_TEST(test_garbage_on_the_socket)
{
    /* Not ZMTP at all: libzmq drops the connection; rdzvd carries on. */
    for (int i = 0; i < 20; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t) s_port()) };
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        ck_assert_int_eq(connect(fd, (struct sockaddr *) &a, sizeof a), 0);
        char junk[512];
        for (size_t j = 0; j < sizeof junk; j++)
            junk[j] = (char) (j * 31 + i);
        ck_assert_int_gt(write(fd, junk, sizeof junk), 0);
        close(fd);
    }
    /* A frame above ZMQ_MAXMSGSIZE: that connection is dropped unread. */
    void *huge = s_dealer();
    size_t big = (1u << 20) + 16;
    char *frame = calloc(1, big);
    zmq_send(huge, frame, big, 0);
    free(frame);
    zmq_close(huge);
    char err[256];
    rdzv_client_t *c = rdzv_client_new(server.endpoint, NULL, err, sizeof err);
    rdzv_join_args_t args = { .group = "after", .world = 1, .rank = 0, .host = "127.0.0.1",
                              .node = "n", .timeout_ms = 5000, .nccl_id = "none" };
    rdzv_assignment_t *a = NULL;
    ck_assert_int_eq(rdzv_join(c, &args, &a), RDZV_OK);
    rdzv_assignment_destroy(&a);
    rdzv_client_destroy(&c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bad_input");
    TCase *tc = tcase_create("bad_input");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_each_bad_input_refused_and_server_serves);
    tcase_add_test(tc, test_garbage_on_the_socket);
    tcase_add_test(tc, test_refused_strings_record_nothing);
    suite_add_tcase(s, tc);
    return rdzv_check_run(s);
}
