/* librdzv against a real rdzvd on loopback: ranks are threads, each with its
 * own client and session, joining concurrently as real ranks would. */
#include "check_run.h"
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness.h"
#include "rdzv.h"

static rdzv_test_server_t server;

typedef struct {
    const char *group;
    int world, rank;
    char node[32];
    char session[64];            /* empty: fresh */
    int timeout_ms;
    bool members;                /* ask for the members list */
    int rc;
    char code[32];
    rdzv_assignment_t *assignment;
} s_rank_t;

static void *s_join_thread(void *arg)
{
    s_rank_t *r = arg;
    char err[256];
    rdzv_client_t *c = rdzv_client_new(server.endpoint, r->session[0] ? r->session : NULL,
                                       err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    snprintf(r->session, sizeof r->session, "%s", rdzv_client_session(c));
    rdzv_client_set_members(c, r->members);
    rdzv_join_args_t args = { .group = r->group, .world = r->world, .rank = r->rank,
                              .host = "127.0.0.1", .node = r->node,
                              .timeout_ms = r->timeout_ms ? r->timeout_ms : 20000,
                              .nccl_id = "none" };
    r->rc = rdzv_join(c, &args, &r->assignment);
    snprintf(r->code, sizeof r->code, "%s", rdzv_client_error_code(c));
    rdzv_client_destroy(&c);
    return NULL;
}

/* Joins world ranks concurrently; node_of(rank) names each rank's node. */
static bool s_members;           /* the next s_run_group asks for the members list */

static s_rank_t *s_run_group(const char *group, int world, int nodes)
{
    s_rank_t *ranks = calloc((size_t) world, sizeof *ranks);
    pthread_t *threads = calloc((size_t) world, sizeof *threads);
    for (int i = 0; i < world; i++) {
        ranks[i] = (s_rank_t) { .group = group, .world = world, .rank = i,
                                .members = s_members };
        snprintf(ranks[i].node, sizeof ranks[i].node, "node-%d", i % nodes);
        ck_assert_int_eq(pthread_create(&threads[i], NULL, s_join_thread, &ranks[i]), 0);
    }
    for (int i = 0; i < world; i++)
        pthread_join(threads[i], NULL);
    free(threads);
    return ranks;
}

static void s_free_group(s_rank_t *ranks, int world)
{
    for (int i = 0; i < world; i++)
        rdzv_assignment_destroy(&ranks[i].assignment);
    free(ranks);
}

static void setup(void) { rdzv_test_server_start(&server, "--no-nccl"); }
static void teardown(void) { rdzv_test_server_cleanup(&server); }

START_TEST(test_four_ranks)
{
    s_rank_t *ranks = s_run_group("four", 4, 4);
    for (int i = 0; i < 4; i++) {
        const rdzv_assignment_t *a = ranks[i].assignment;
        ck_assert_msg(ranks[i].rc == RDZV_OK, "rank %d: %d %s", i, ranks[i].rc, ranks[i].code);
        ck_assert_int_eq(rdzv_assignment_rank(a), i);
        ck_assert_int_eq(rdzv_assignment_world(a), 4);
        ck_assert_int_eq(rdzv_assignment_epoch(a), 1);
        ck_assert_str_eq(rdzv_assignment_master_addr(a), "127.0.0.1");
        ck_assert_int_eq(rdzv_assignment_master_port(a), 19500);
        /* The seed's layout: one Pod per rank, so every plan is 19500..19531. */
        ck_assert_uint_eq(rdzv_assignment_port_count(a), 32);
        ck_assert_int_eq(rdzv_assignment_port(a, 0), 19500);
        ck_assert_int_eq(rdzv_assignment_port(a, 31), 19531);
        /* O(1) in the world: no members list unless asked for. */
        ck_assert_uint_eq(rdzv_assignment_member_count(a), 0);
        ck_assert_ptr_null(strstr(rdzv_assignment_json(a), "\"members\""));
    }
    s_free_group(ranks, 4);
    s_members = true;
    ranks = s_run_group("four-members", 4, 4);
    s_members = false;
    for (int i = 0; i < 4; i++) {
        const rdzv_assignment_t *a = ranks[i].assignment;
        ck_assert_msg(ranks[i].rc == RDZV_OK, "rank %d: %d %s", i, ranks[i].rc, ranks[i].code);
        ck_assert_uint_eq(rdzv_assignment_member_count(a), 4);
        ck_assert_str_eq(rdzv_assignment_member_node(a, 2), "node-2");
    }
    s_free_group(ranks, 4);
}
END_TEST

START_TEST(test_sixty_four_ranks_on_two_nodes)
{
    s_rank_t *ranks = s_run_group("wide", 64, 2);
    int seen[64] = { 0 };
    for (int i = 0; i < 64; i++) {
        ck_assert_msg(ranks[i].rc == RDZV_OK, "rank %d: %s", i, ranks[i].code);
        int start = rdzv_assignment_port(ranks[i].assignment, 0);
        /* 32 ranks per node, each on its own block, in rank order. */
        ck_assert_int_eq(start, 19500 + 32 * (i / 2));
        seen[i / 2]++;
    }
    for (int b = 0; b < 32; b++)
        ck_assert_int_eq(seen[b], 2);
    s_free_group(ranks, 64);
}
END_TEST

START_TEST(test_two_groups_one_node_disjoint)
{
    s_rank_t *a = s_run_group("ga", 3, 1);
    s_rank_t *b = s_run_group("gb", 3, 1);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            int pa = rdzv_assignment_port(a[i].assignment, 0);
            int pb = rdzv_assignment_port(b[j].assignment, 0);
            ck_assert_msg(pa + 32 <= pb || pb + 32 <= pa, "overlap %d %d", pa, pb);
        }
    s_free_group(a, 3);
    s_free_group(b, 3);
}
END_TEST

START_TEST(test_same_plan_after_server_restart)
{
    s_rank_t *ranks = s_run_group("durable", 4, 2);
    char *before = strdup(rdzv_assignment_json(ranks[3].assignment));
    rdzv_test_server_stop(&server, SIGKILL);
    rdzv_test_server_restart(&server);
    /* The same process (same session) asks again: identical assignment. */
    s_rank_t again = { .group = "durable", .world = 4, .rank = 3 };
    snprintf(again.node, sizeof again.node, "%s", ranks[3].node);
    snprintf(again.session, sizeof again.session, "%s", ranks[3].session);
    s_join_thread(&again);
    ck_assert_int_eq(again.rc, RDZV_OK);
    ck_assert_str_eq(rdzv_assignment_json(again.assignment), before);
    rdzv_assignment_destroy(&again.assignment);
    free(before);
    s_free_group(ranks, 4);
}
END_TEST

START_TEST(test_rank_restart_moves_epoch)
{
    s_rank_t *ranks = s_run_group("restart", 2, 2);
    char err[256];
    rdzv_client_t *old = rdzv_client_new(server.endpoint, ranks[0].session, err, sizeof err);
    int64_t epoch = 0;
    ck_assert_int_eq(rdzv_heartbeat(old, "restart", 0, 1, &epoch), RDZV_OK);
    ck_assert_int_eq(epoch, 1);
    /* Rank 1's process restarts: a fresh session joins. */
    pthread_t t1, t0;
    s_rank_t r1 = { .group = "restart", .world = 2, .rank = 1, .node = "node-1" };
    ck_assert_int_eq(pthread_create(&t1, NULL, s_join_thread, &r1), 0);
    usleep(300000);
    ck_assert_int_eq(rdzv_heartbeat(old, "restart", 0, 1, &epoch), RDZV_ERR_REFUSED);
    ck_assert_str_eq(rdzv_client_error_code(old), "stale_epoch");
    /* Rank 0 learns of it and joins epoch 2 with its own session. */
    s_rank_t r0 = { .group = "restart", .world = 2, .rank = 0, .node = "node-0" };
    snprintf(r0.session, sizeof r0.session, "%s", ranks[0].session);
    ck_assert_int_eq(pthread_create(&t0, NULL, s_join_thread, &r0), 0);
    pthread_join(t0, NULL);
    pthread_join(t1, NULL);
    ck_assert_int_eq(r0.rc, RDZV_OK);
    ck_assert_int_eq(r1.rc, RDZV_OK);
    ck_assert_int_eq(rdzv_assignment_epoch(r0.assignment), 2);
    ck_assert_int_eq(rdzv_assignment_epoch(r1.assignment), 2);
    ck_assert_int_eq(rdzv_assignment_port(r1.assignment, 0),
                     rdzv_assignment_port(ranks[1].assignment, 0));
    ck_assert_int_eq(rdzv_kv_put(old, "restart", 1, "k", "v"), RDZV_ERR_REFUSED);
    ck_assert_str_eq(rdzv_client_error_code(old), "stale_epoch");
    rdzv_assignment_destroy(&r0.assignment);
    rdzv_assignment_destroy(&r1.assignment);
    rdzv_client_destroy(&old);
    s_free_group(ranks, 2);
}
END_TEST

START_TEST(test_join_rides_through_server_restart)
{
    pthread_t t[2];
    s_rank_t r[2] = { { .group = "ride", .world = 2, .rank = 0, .node = "a" },
                      { .group = "ride", .world = 2, .rank = 1, .node = "b" } };
    ck_assert_int_eq(pthread_create(&t[0], NULL, s_join_thread, &r[0]), 0);
    usleep(300000);
    rdzv_test_server_stop(&server, SIGKILL);
    rdzv_test_server_restart(&server);
    ck_assert_int_eq(pthread_create(&t[1], NULL, s_join_thread, &r[1]), 0);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(r[i].rc == RDZV_OK, "rank %d: %s", i, r[i].code);
        ck_assert_int_eq(rdzv_assignment_epoch(r[i].assignment), 1);
        rdzv_assignment_destroy(&r[i].assignment);
    }
}
END_TEST

START_TEST(test_timeout_and_refusals)
{
    s_rank_t lone = { .group = "lonely", .world = 2, .rank = 0, .node = "n", .timeout_ms = 500 };
    s_join_thread(&lone);
    ck_assert_int_eq(lone.rc, RDZV_ERR_TIMEOUT);
    s_rank_t wrong = { .group = "lonely", .world = 3, .rank = 1, .node = "n" };
    s_join_thread(&wrong);
    ck_assert_int_eq(wrong.rc, RDZV_ERR_REFUSED);
    ck_assert_str_eq(wrong.code, "world_mismatch");
}
END_TEST

START_TEST(test_kv_and_status)
{
    s_rank_t *ranks = s_run_group("kv", 2, 2);
    char err[256];
    rdzv_client_t *c = rdzv_client_new(server.endpoint, NULL, err, sizeof err);
    ck_assert_int_eq(rdzv_kv_put(c, "kv", 1, "answer", "42"), RDZV_OK);
    /* Values are UTF-8 text (rdzvd refuses other bytes): Latin-1 is the
     * caller's mistake, said before anything is sent. */
    ck_assert_int_eq(rdzv_kv_put(c, "kv", 1, "latin1", "caf\xe9"), RDZV_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(rdzv_client_error(c), "UTF-8"));
    ck_assert_int_eq(rdzv_kv_put(c, "kv", 1, "utf8", "caf\xc3\xa9"), RDZV_OK);
    char *value = NULL;
    ck_assert_int_eq(rdzv_kv_wait(c, "kv", 1, "answer", 1000, &value), RDZV_OK);
    ck_assert_str_eq(value, "42");
    free(value);
    ck_assert_int_eq(rdzv_kv_get(c, "kv", 1, "missing", &value), RDZV_ERR_REFUSED);
    ck_assert_str_eq(rdzv_client_error_code(c), "not_found");
    char *status = NULL;
    ck_assert_int_eq(rdzv_status(c, "kv", &status), RDZV_OK);
    ck_assert_ptr_nonnull(strstr(status, "\"joined\":[0,1]"));
    free(status);
    ck_assert_int_eq(rdzv_group_delete(c, "kv"), RDZV_OK);
    ck_assert_int_eq(rdzv_status(c, "kv", &status), RDZV_ERR_REFUSED);
    rdzv_client_destroy(&c);
    s_free_group(ranks, 2);
}
END_TEST

/* alive flag of rank in `rdzv status` of group. */
static bool s_alive(rdzv_client_t *c, const char *group, int rank)
{
    char *status = NULL;
    ck_assert_int_eq(rdzv_status(c, group, &status), RDZV_OK);
    cJSON *groups = cJSON_Parse(status);
    const cJSON *members = cJSON_GetObjectItem(cJSON_GetArrayItem(groups, 0), "members");
    bool alive = cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(members, rank), "alive"));
    cJSON_Delete(groups);
    free(status);
    return alive;
}

START_TEST(test_background_heartbeat)
{
    rdzv_test_server_cleanup(&server);
    rdzv_test_server_start(&server, "--no-nccl --dead-after 1");
    s_rank_t *ranks = s_run_group("hb", 2, 2);
    char err[256];
    rdzv_heartbeat_t *hb = rdzv_heartbeat_start(server.endpoint, ranks[0].session,
                                                ranks[0].assignment, 200, err, sizeof err);
    ck_assert_msg(hb != NULL, "%s", err);
    rdzv_client_t *c = rdzv_client_new(server.endpoint, NULL, err, sizeof err);
    usleep(1500000);
    ck_assert(s_alive(c, "hb", 0));          /* beating */
    ck_assert(!s_alive(c, "hb", 1));         /* silent for over --dead-after */
    ck_assert_uint_ge(rdzv_heartbeat_count(hb), 4);
    ck_assert(!rdzv_heartbeat_stale(hb));
    /* Rank 1 restarts: the group moves on and the heartbeat notices. */
    pthread_t t;
    s_rank_t again = { .group = "hb", .world = 2, .rank = 1, .node = "node-1", .timeout_ms = 3000 };
    ck_assert_int_eq(pthread_create(&t, NULL, s_join_thread, &again), 0);
    usleep(800000);
    ck_assert(rdzv_heartbeat_stale(hb));
    pthread_join(t, NULL);
    rdzv_heartbeat_stop(&hb);
    rdzv_heartbeat_stop(&hb);
    ck_assert_ptr_null(hb);
    usleep(1500000);
    ck_assert(!s_alive(c, "hb", 0));         /* stopped: dead after --dead-after */
    rdzv_client_destroy(&c);
    rdzv_assignment_destroy(&again.assignment);
    s_free_group(ranks, 2);
}
END_TEST

/* Polls rdzv_heartbeat_stale for up to 10 s. */
static bool s_turns_stale(const rdzv_heartbeat_t *hb)
{
    for (int i = 0; i < 200 && !rdzv_heartbeat_stale(hb); i++)
        usleep(50000);
    return rdzv_heartbeat_stale(hb);
}

START_TEST(test_heartbeat_stale_after_delete)
{
    s_rank_t *ranks = s_run_group("hbdel", 1, 1);
    char err[256];
    rdzv_heartbeat_t *hb = rdzv_heartbeat_start(server.endpoint, ranks[0].session,
                                                ranks[0].assignment, 200, err, sizeof err);
    ck_assert_msg(hb != NULL, "%s", err);
    rdzv_client_t *c = rdzv_client_new(server.endpoint, NULL, err, sizeof err);
    ck_assert_int_eq(rdzv_group_delete(c, "hbdel"), RDZV_OK);
    ck_assert_msg(s_turns_stale(hb), "a deleted group's heartbeat never turned stale");
    rdzv_heartbeat_stop(&hb);
    rdzv_client_destroy(&c);
    s_free_group(ranks, 1);
}
END_TEST

/* rdzvd gone: stop must not wait out the client's 10 s request deadline. */
START_TEST(test_heartbeat_stop_with_rdzvd_away)
{
    s_rank_t *ranks = s_run_group("hbaway", 1, 1);
    char err[256];
    rdzv_heartbeat_t *hb = rdzv_heartbeat_start(server.endpoint, ranks[0].session,
                                                ranks[0].assignment, 1000, err, sizeof err);
    ck_assert_msg(hb != NULL, "%s", err);
    rdzv_test_server_stop(&server, SIGKILL);
    usleep(1500000);                 /* the second beat is waiting on rdzvd */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rdzv_heartbeat_stop(&hb);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double) (t1.tv_sec - t0.tv_sec) + (double) (t1.tv_nsec - t0.tv_nsec) / 1e9;
    ck_assert_msg(took < 3.0, "rdzv_heartbeat_stop took %.1f s with rdzvd away", took);
    s_free_group(ranks, 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("join_api");
    TCase *tc = tcase_create("rdzv_join");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_four_ranks);
    tcase_add_test(tc, test_sixty_four_ranks_on_two_nodes);
    tcase_add_test(tc, test_two_groups_one_node_disjoint);
    tcase_add_test(tc, test_same_plan_after_server_restart);
    tcase_add_test(tc, test_rank_restart_moves_epoch);
    tcase_add_test(tc, test_join_rides_through_server_restart);
    tcase_add_test(tc, test_timeout_and_refusals);
    tcase_add_test(tc, test_kv_and_status);
    tcase_add_test(tc, test_background_heartbeat);
    tcase_add_test(tc, test_heartbeat_stale_after_delete);
    tcase_add_test(tc, test_heartbeat_stop_with_rdzvd_away);
    suite_add_tcase(s, tc);
    return rdzv_check_run(s);
}
