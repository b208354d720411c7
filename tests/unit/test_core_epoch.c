/* The core's epochs: a rank that resumes keeps its assignment, a restarted
 * rank or a resized world moves the group to a new epoch, one live session
 * holds each rank, and rdzvd's own restart changes nothing. Each test is one
 * rule of docs/protocol.md. */
#include "check_run.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core_fixture.h"

START_TEST(test_resume_same_session)
{
    fx_join(0, "g", 2, 0, "n", "a");
    fx_join(1, "g", 2, 1, "n", "b");
    fx_clear_replies();
    fx_join(5, "g", 2, 1, "n", "b");
    ck_assert_int_eq(fx_field(fx_assignment(5), "epoch"), 1);
    fx_clear_replies();
}
END_TEST

START_TEST(test_restart_moves_epoch)
{
    fx_join(0, "g", 2, 0, "n", "a");
    fx_join(1, "g", 2, 1, "n", "b");
    fx_send(2, "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\",\"value\":\"v1\"}");
    fx_clear_replies();
    fx_join(1, "g", 2, 1, "n", "b-restarted");
    ck_assert_ptr_null(replies[1]);          /* epoch 2 forms: rank 0 must rejoin */
    fx_send(2, "{\"v\":1,\"op\":\"kv_get\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\"}");
    ck_assert_str_eq(fx_error(2), RDZV_E_STALE_EPOCH);
    fx_send(3, "{\"v\":1,\"op\":\"heartbeat\",\"group\":\"g\",\"rank\":0,\"session\":\"a\",\"epoch\":1}");
    ck_assert_str_eq(fx_error(3), RDZV_E_STALE_EPOCH);
    /* Joins while epoch 2 forms start no further epoch. */
    fx_join(0, "g", 2, 0, "n", "a");
    ck_assert_int_eq(fx_field(fx_assignment(0), "epoch"), 2);
    ck_assert_int_eq(fx_field(fx_assignment(1), "epoch"), 2);
    /* Same plan in the new epoch. */
    ck_assert_int_eq((int) cJSON_GetArrayItem(cJSON_GetObjectItem(fx_assignment(1), "ports"), 0)->valuedouble, 19532);
    fx_clear_replies();
}
END_TEST

/* Scaling a group's world: refused with world_mismatch (saying how) while
 * old ranks are alive; once none has been heard from for --dead-after, a
 * join with the new world lays the group out afresh at the next epoch, and
 * a restart agrees. */
START_TEST(test_resize_once_the_old_world_is_gone)
{
    fx_join(0, "g", 2, 0, "n0", "a");
    fx_join(1, "g", 2, 1, "n1", "b");
    fx_clear_replies();
    fx_join(2, "g", 3, 0, "n0", "c");
    ck_assert_str_eq(fx_error(2), RDZV_E_WORLD_MISMATCH);
    const char *msg = cJSON_GetObjectItem(cJSON_GetObjectItem(replies[2], "error"),
                                          "message")->valuestring;
    ck_assert_ptr_nonnull(strstr(msg, "2 of its ranks are alive; to resize"));
    fx_clear_replies();
    now += 16000;
    fx_join(2, "g", 3, 0, "n0", "c");
    ck_assert_ptr_null(replies[2]);          /* accepted: waits for ranks 1 and 2 */
    fx_join(3, "g", 3, 1, "n1", "d");
    fx_join(4, "g", 3, 2, "n2", "e");
    ck_assert_int_eq(fx_field(fx_assignment(2), "epoch"), 2);
    ck_assert_int_eq(fx_field(fx_assignment(4), "world"), 3);
    fx_clear_replies();
    rdzv_core_destroy(&core);
    fx_open();
    fx_join(5, "g", 3, 2, "n2", "e");         /* a resume gets the same assignment */
    ck_assert_int_eq(fx_field(fx_assignment(5), "epoch"), 2);
    ck_assert_int_eq(fx_field(fx_assignment(5), "world"), 3);
    fx_clear_replies();
}
END_TEST

START_TEST(test_state_survives_restart)
{
    fx_join(0, "g", 2, 0, "n", "a");
    fx_join(1, "g", 2, 1, "n", "b");
    char *before = cJSON_PrintUnformatted(fx_assignment(1));
    fx_clear_replies();
    rdzv_core_destroy(&core);
    fx_open();
    fx_join(1, "g", 2, 1, "n", "b");
    char *after = cJSON_PrintUnformatted(fx_assignment(1));
    ck_assert_str_eq(before, after);
    free(before);
    free(after);
    fx_clear_replies();
}
END_TEST

START_TEST(test_rank_taken_while_forming)
{
    fx_join(0, "g", 2, 0, "n", "a");
    fx_join(1, "g", 2, 0, "m", "intruder");
    ck_assert_str_eq(fx_error(1), RDZV_E_RANK_TAKEN);
    /* The refusal names the holder as rule 3's does: where it runs. */
    const char *msg = cJSON_GetObjectItem(cJSON_GetObjectItem(replies[1], "error"),
                                          "message")->valuestring;
    ck_assert_ptr_nonnull(strstr(msg, "held by a live session from host 10.0.0.0 node n, "
                                      "waiting in forming epoch 1"));
    ck_assert_ptr_nonnull(strstr(msg, "this join comes from node m"));
    /* Once the first session's wait is over, a new session may take it. */
    now += 6000;
    drive_tick(core, now);
    fx_collect();
    ck_assert_str_eq(fx_error(0), RDZV_E_TIMEOUT);
    fx_clear_replies();
    fx_join(1, "g", 2, 0, "n", "intruder");
    ck_assert_ptr_null(replies[1]);           /* accepted: waits for rank 1 */
    fx_join(2, "g", 2, 1, "n", "b");
    ck_assert_int_eq(fx_field(fx_assignment(1), "rank"), 0);
    fx_clear_replies();
}
END_TEST

/* Two live processes claim one rank of a complete epoch: the second, from
 * another node while the holder is alive, is refused naming the holder; the
 * group stays. From the holder's own node it is a restart; once the holder
 * has been quiet for --dead-after, or with replace, it takes the rank. */
START_TEST(test_rank_taken_by_a_live_holder)
{
    fx_join(0, "g", 2, 0, "pod-0", "a");
    fx_join(1, "g", 2, 1, "pod-1", "b");
    fx_clear_replies();
    fx_join(2, "g", 2, 1, "pod-7", "dup");
    ck_assert_str_eq(fx_error(2), RDZV_E_RANK_TAKEN);
    const char *msg = cJSON_GetObjectItem(cJSON_GetObjectItem(replies[2], "error"),
                                          "message")->valuestring;
    ck_assert_ptr_nonnull(strstr(msg, "held by a live session from host 10.0.0.1 node pod-1"));
    fx_send(3, "{\"v\":1,\"op\":\"status\",\"group\":\"g\"}");
    ck_assert_int_eq(fx_field(cJSON_GetArrayItem(cJSON_GetObjectItem(replies[3], "groups"), 0),
                              "epoch"), 1);
    /* replace: taken at once, the group moves on. */
    fx_send(4, "{\"v\":1,\"id\":4,\"op\":\"join\",\"group\":\"g\",\"world\":2,\"rank\":1,"
            "\"host\":\"10.0.0.9\",\"node\":\"pod-7\",\"session\":\"dup\",\"timeout_ms\":5000,"
            "\"replace\":true}");
    ck_assert_ptr_null(replies[4]);          /* epoch 2 forms */
    fx_join(0, "g", 2, 0, "pod-0", "a");
    ck_assert_int_eq(fx_field(fx_assignment(0), "epoch"), 2);
    fx_clear_replies();
    /* The holder's own node: a restart. */
    fx_join(5, "g", 2, 1, "pod-7", "dup-restarted");
    ck_assert_ptr_null(replies[5]);
    fx_join(0, "g", 2, 0, "pod-0", "a");
    ck_assert_int_eq(fx_field(fx_assignment(0), "epoch"), 3);
    fx_clear_replies();
    /* A holder quiet for --dead-after (15 s here) gives way. */
    fx_join(6, "g", 2, 1, "pod-8", "late");
    ck_assert_str_eq(fx_error(6), RDZV_E_RANK_TAKEN);
    fx_clear_replies();
    now += 16000;
    fx_join(6, "g", 2, 1, "pod-8", "late");
    ck_assert_ptr_null(replies[6]);
    fx_clear_replies();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("core_epoch");
    TCase *epoch = fx_tcase(s, "epoch");
    tcase_add_test(epoch, test_resume_same_session);
    tcase_add_test(epoch, test_restart_moves_epoch);
    tcase_add_test(epoch, test_resize_once_the_old_world_is_gone);
    tcase_add_test(epoch, test_state_survives_restart);
    TCase *rank_claims = fx_tcase(s, "rank_claims");
    tcase_add_test(rank_claims, test_rank_taken_while_forming);
    tcase_add_test(rank_claims, test_rank_taken_by_a_live_holder);
    return rdzv_check_run(s);
}
