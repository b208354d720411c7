/* The core's limits: on groups, waits and requests per connection, on the
 * ranks all groups may hold and a connection's share of them, and the
 * forming groups --forming-ttl deletes. */
#include "check_run.h"
#include <check.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>

#include "core_fixture.h"

START_TEST(test_limits)
{
    rdzv_core_destroy(&core);
    char err[256];
    rdzv_config_t cfg = fx_config();
    cfg.limits = (rdzv_limits_t) { .max_groups = 1, .max_kv_bytes = 10, .max_waits = 2, .max_rps = 5 };
    core = rdzv_core_new(&cfg, err, sizeof err);
    ck_assert_ptr_nonnull(core);
    fx_join(0, "a", 3, 0, "n", "s0");
    fx_join(1, "b", 1, 0, "n", "s0");
    ck_assert_str_eq(fx_error(1), RDZV_E_LIMIT);                 /* groups */
    fx_join(2, "a", 3, 1, "n", "s1");
    fx_send(3, "{\"v\":1,\"op\":\"kv_wait\",\"group\":\"a\",\"epoch\":1,\"key\":\"k\"}");
    ck_assert_str_eq(fx_error(3), RDZV_E_LIMIT);                 /* pending waits */
    fx_send(4, "{\"v\":1,\"op\":\"kv_put\",\"group\":\"a\",\"epoch\":1,\"key\":\"k\",\"value\":\"12345678\"}");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[4], "ok")));
    fx_send(5, "{\"v\":1,\"op\":\"kv_put\",\"group\":\"a\",\"epoch\":1,\"key\":\"j\",\"value\":\"x\"}");
    ck_assert_str_eq(fx_error(5), RDZV_E_LIMIT);                 /* KV bytes */
    /* Requests per second per connection: a burst of 5, then refused. */
    fx_clear_replies();
    for (int i = 0; i < 5; i++) {
        fx_send(6, "{\"v\":1,\"op\":\"status\"}");
        ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[6], "ok")));
    }
    fx_send(6, "{\"v\":1,\"op\":\"status\"}");
    ck_assert_str_eq(fx_error(6), RDZV_E_LIMIT);
    /* The same ROUTER identity on another shard is another connection. */
    rdzv_peer_t other_shard = { .len = 1, .id = { 6 }, .shard = 1 };
    const char *status = "{\"v\":1,\"op\":\"status\"}";
    drive_request(core, &other_shard, status, strlen(status), now);
    fx_collect();
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[6], "ok")));
    now += 1000;                                                   /* refilled */
    fx_send(6, "{\"v\":1,\"op\":\"status\"}");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[6], "ok")));
    fx_send(7, "{\"v\":1,\"op\":\"status\"}");               /* another connection */
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[7], "ok")));
    fx_clear_replies();
}
END_TEST

/* A join refused for the wait limit records nothing: its group is not made,
 * so its world is not fixed and it does not count against --max-groups. */
START_TEST(test_join_refused_for_waits_makes_no_group)
{
    fx_reopen_with((rdzv_limits_t) { .max_groups = 2, .max_waits = 1 });
    fx_join(0, "w1", 2, 0, "n", "s0");
    ck_assert_ptr_null(replies[0]);
    uint64_t size = rdzv_journal_size(core->journal);
    fx_join(1, "w2", 2, 0, "n", "s0");
    ck_assert_str_eq(fx_error(1), RDZV_E_LIMIT);
    ck_assert_uint_eq(rdzv_journal_size(core->journal), size);
    ck_assert_ptr_null(rdzv_state_group(&core->state, "w2"));
    fx_send(2, "{\"v\":1,\"op\":\"status\",\"group\":\"w2\"}");
    ck_assert_str_eq(fx_error(2), RDZV_E_NOT_FOUND);
    /* Once w1's wait times out, w2 is made with the world its creator asks for. */
    now += 6000;
    drive_tick(core, now);
    fx_collect();
    ck_assert_str_eq(fx_error(0), RDZV_E_TIMEOUT);
    fx_join(4, "w2", 1, 0, "n", "s0");
    ck_assert_int_eq(fx_field(fx_assignment(4), "world"), 1);
    fx_clear_replies();
}
END_TEST

/* A reply refused for --max-rps echoes the request's id like any other,
 * also for a request that does not parse past its id. */
START_TEST(test_rate_limited_reply_keeps_id)
{
    fx_reopen_with((rdzv_limits_t) { .max_rps = 2 });
    for (int i = 0; i < 2; i++)
        fx_send(1, "{\"v\":1,\"id\":%d,\"op\":\"status\"}", 10 + i);
    fx_send(1, "{\"v\":1,\"id\":42,\"op\":\"status\"}");
    ck_assert_str_eq(fx_error(1), RDZV_E_LIMIT);
    ck_assert_int_eq(fx_field(replies[1], "id"), 42);
    fx_send(1, "{\"v\":1,\"id\":43,\"op\":\"no_such_op\"}");
    ck_assert_str_eq(fx_error(1), RDZV_E_LIMIT);
    ck_assert_int_eq(fx_field(replies[1], "id"), 43);
    fx_clear_replies();
}
END_TEST

/* The worlds of every group held are a budget: a join that would make a
 * group past it is refused, and a delete gives its world back. */
START_TEST(test_max_ranks)
{
    fx_reopen_with((rdzv_limits_t) { .max_ranks = 100 });
    fx_join(1, "a", 60, 0, "n", "s");
    ck_assert_ptr_null(replies[1]);                  /* waits: world 60 held */
    fx_join(2, "b", 50, 0, "n", "s");
    ck_assert_str_eq(fx_error(2), RDZV_E_LIMIT);
    ck_assert_ptr_nonnull(strstr(cJSON_GetObjectItem(cJSON_GetObjectItem(replies[2], "error"),
                                                     "message")->valuestring, "--max-ranks"));
    fx_join(3, "c", 40, 0, "n", "s");                 /* 100: at the budget */
    ck_assert_ptr_null(replies[3]);
    fx_send(4, "{\"v\":1,\"op\":\"group_delete\",\"group\":\"a\"}");
    fx_clear_replies();
    fx_join(2, "b", 50, 0, "n", "s");
    ck_assert_ptr_null(replies[2]);                  /* 90 now */
    fx_clear_replies();
}
END_TEST

/* Waits that last do not let one connection hold more than its share once
 * another needs room: under --max-ranks 100 (a share of 25), a connection
 * waiting alone in two groups of 30 gives up the one heard from least
 * recently, its wait answered limit; its only remaining group it keeps, so
 * the next newcomer that does not fit is refused. */
START_TEST(test_connection_share)
{
    fx_reopen_with((rdzv_limits_t) { .max_ranks = 100 });
    fx_join(1, "a", 30, 0, "n", "s");
    now += 10;
    fx_join(1, "b", 30, 0, "n", "s");
    ck_assert_ptr_null(replies[1]);                  /* both wait: 60 held by peer 1 */
    fx_join(2, "c", 50, 0, "n", "s");
    ck_assert_ptr_null(replies[2]);                  /* taken: a gave its place */
    ck_assert_str_eq(fx_error(1), RDZV_E_LIMIT);
    ck_assert_ptr_nonnull(strstr(cJSON_GetObjectItem(cJSON_GetObjectItem(replies[1], "error"),
                                                     "message")->valuestring, "group a was"));
    fx_clear_replies();
    fx_send(4, "{\"v\":1,\"op\":\"status\",\"group\":\"a\"}");
    ck_assert_str_eq(fx_error(4), RDZV_E_NOT_FOUND);
    fx_join(3, "d", 30, 0, "n", "s");                 /* 110: b is peer 1's only group */
    ck_assert_str_eq(fx_error(3), RDZV_E_LIMIT);
    ck_assert_ptr_null(replies[1]);
    fx_clear_replies();
    fx_send(4, "{\"v\":1,\"op\":\"status\",\"group\":\"b\"}");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[4], "ok")));
    fx_clear_replies();
}
END_TEST

/* A group costs memory for the ranks that joined it, not for its world:
 * 2000 groups of world 65536 with one rank each. */
START_TEST(test_memory_follows_joined_ranks)
{
    rdzv_config_t cfg = fx_config();
    cfg.max_world = 65536;
    cfg.limits.max_ranks = (int64_t) 1 << 40;
    fx_reopen_cfg(cfg);
    struct mallinfo2 before = mallinfo2();
    for (int i = 0; i < 2000; i++) {
        char group[32];
        snprintf(group, sizeof group, "big%d", i);
        fx_send(1, "{\"v\":1,\"op\":\"join\",\"group\":\"%s\",\"world\":65536,"
                  "\"rank\":%d,\"host\":\"h\",\"node\":\"n\",\"session\":\"s\","
                  "\"timeout_ms\":1}", group, i * 31 % 65536);
    }
    size_t used = mallinfo2().uordblks - before.uordblks;
    /* A slot per rank of the world was 512 KiB a group (1 GiB here). */
    ck_assert_msg(used < 2000 * 32 * 1024, "2000 one-rank groups of world 65536 hold %zu KiB",
                  used / 1024);
    fx_clear_replies();
}
END_TEST

/* A group whose first epoch never forms, with nobody waiting or heard from
 * in it for --forming-ttl, is deleted, and the delete is recorded; groups
 * that formed, or where a rank waits, are kept. */
START_TEST(test_forming_ttl)
{
    rdzv_config_t cfg = fx_config();
    cfg.forming_ttl_ms = 1000;
    fx_reopen_cfg(cfg);
    fx_send(1, "{\"v\":1,\"op\":\"join\",\"group\":\"gone\",\"world\":4,\"rank\":0,"
              "\"host\":\"h\",\"node\":\"n\",\"session\":\"s\",\"timeout_ms\":100}");
    fx_join(2, "waits", 2, 0, "n", "s");              /* a waiter for 5 s */
    fx_join(3, "formed", 1, 0, "n", "s");
    now += 200;
    drive_tick(core, now);                           /* gone's join timed out */
    now += 700;
    drive_tick(core, now);                           /* 900 ms since heard: kept */
    fx_send(5, "{\"v\":1,\"op\":\"status\",\"group\":\"gone\"}");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[5], "ok")));
    now += 400;
    drive_tick(core, now);                           /* 1300 ms: expired */
    fx_collect();
    fx_send(5, "{\"v\":1,\"op\":\"status\",\"group\":\"gone\"}");
    ck_assert_str_eq(fx_error(5), RDZV_E_NOT_FOUND);
    fx_send(6, "{\"v\":1,\"op\":\"status\",\"group\":\"waits\"}");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[6], "ok")));
    fx_send(7, "{\"v\":1,\"op\":\"status\",\"group\":\"formed\"}");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[7], "ok")));
    /* Recorded: the restarted core agrees, and counts the loaded forming
     * group from its first tick, not from a time it never saw. */
    fx_reopen_cfg(cfg);
    fx_send(5, "{\"v\":1,\"op\":\"status\",\"group\":\"gone\"}");
    ck_assert_str_eq(fx_error(5), RDZV_E_NOT_FOUND);
    now += 5000;                                     /* waits' waiter timed out long ago */
    drive_tick(core, now);
    fx_send(6, "{\"v\":1,\"op\":\"status\",\"group\":\"waits\"}");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[6], "ok")));
    now += 1500;
    drive_tick(core, now);
    fx_collect();
    fx_send(6, "{\"v\":1,\"op\":\"status\",\"group\":\"waits\"}");
    ck_assert_str_eq(fx_error(6), RDZV_E_NOT_FOUND);
    fx_send(7, "{\"v\":1,\"op\":\"status\",\"group\":\"formed\"}");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[7], "ok")));
    fx_clear_replies();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("core_limits");
    TCase *limits = fx_tcase(s, "limits");
    tcase_add_test(limits, test_limits);
    tcase_add_test(limits, test_join_refused_for_waits_makes_no_group);
    tcase_add_test(limits, test_rate_limited_reply_keeps_id);
    TCase *max_ranks = fx_tcase(s, "max_ranks");
    tcase_add_test(max_ranks, test_max_ranks);
    tcase_add_test(max_ranks, test_connection_share);
    tcase_add_test(max_ranks, test_memory_follows_joined_ranks);
    TCase *forming_ttl = fx_tcase(s, "forming_ttl");
    tcase_add_test(forming_ttl, test_forming_ttl);
    return rdzv_check_run(s);
}
