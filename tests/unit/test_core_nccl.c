/* The core's NCCL unique IDs: brought by rank 0 (rank0 mode), or made by
 * the server's rdzv-nccl-root helper, whose state a restart keeps or reports
 * lost. */
#include "check_run.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core_fixture.h"

static const char *s_hex(char fill)
{
    static char hex[257];
    memset(hex, fill, 256);
    hex[256] = '\0';
    return hex;
}

START_TEST(test_rank0_mode)
{
    /* Rank 1 creates the group in rank0 mode and waits for rank 0's IDs. */
    fx_send(1, "{\"v\":1,\"id\":1,\"op\":\"join\",\"group\":\"r0\",\"world\":2,\"rank\":1,"
            "\"host\":\"h\",\"node\":\"b\",\"session\":\"s1\",\"nccl_id\":\"rank0\",\"nccl_ids\":2}");
    ck_assert_ptr_null(replies[1]);
    /* Rank 0 without its IDs, or with the wrong count: refused, nothing joins. */
    fx_send(0, "{\"v\":1,\"id\":2,\"op\":\"join\",\"group\":\"r0\",\"world\":2,\"rank\":0,"
            "\"host\":\"h\",\"node\":\"a\",\"session\":\"s0\"}");
    ck_assert_str_eq(fx_error(0), RDZV_E_BAD_REQUEST);
    fx_send(0, "{\"v\":1,\"id\":3,\"op\":\"join\",\"group\":\"r0\",\"world\":2,\"rank\":0,"
            "\"host\":\"h\",\"node\":\"a\",\"session\":\"s0\",\"nccl_unique_ids_from_rank0\":[\"%s\"]}",
            s_hex('a'));
    ck_assert_str_eq(fx_error(0), RDZV_E_BAD_REQUEST);
    ck_assert_ptr_null(replies[1]);
    fx_clear_replies();
    char ids[600];
    snprintf(ids, sizeof ids, "[\"%s\",", s_hex('a'));
    snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "\"%s\"]", s_hex('b'));
    fx_send(0, "{\"v\":1,\"id\":4,\"op\":\"join\",\"group\":\"r0\",\"world\":2,\"rank\":0,"
            "\"host\":\"h\",\"node\":\"a\",\"session\":\"s0\",\"nccl_unique_ids_from_rank0\":%s}", ids);
    for (int r = 0; r < 2; r++) {
        const cJSON *a = fx_assignment(r);
        ck_assert_str_eq(cJSON_GetObjectItem(a, "nccl_unique_id")->valuestring, s_hex('a'));
        const cJSON *all = cJSON_GetObjectItem(a, "nccl_unique_ids");
        ck_assert_int_eq(cJSON_GetArraySize(all), 2);
        ck_assert_str_eq(cJSON_GetArrayItem(all, 1)->valuestring, s_hex('b'));
    }
    /* Only rank 0 brings IDs. */
    fx_send(2, "{\"v\":1,\"op\":\"join\",\"group\":\"r0\",\"world\":2,\"rank\":1,\"host\":\"h\","
            "\"node\":\"b\",\"session\":\"s1\",\"nccl_unique_ids_from_rank0\":%s}", ids);
    ck_assert_str_eq(fx_error(2), RDZV_E_BAD_REQUEST);
    fx_clear_replies();
}
END_TEST

/* A helper speaking rdzv-nccl-root's protocol: count IDs of 256 hex
 * digits (its pid in them: each helper's differ), then "done" (every rank
 * reached the root) if done, and it lives until rdzvd closes its stdin. */
static void s_fake_helper(bool done)
{
    snprintf(nccl_helper, sizeof nccl_helper, "%s/nccl-root", dir);
    FILE *f = fopen(nccl_helper, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "#!/bin/sh\ni=0\nwhile [ $i -lt \"$2\" ]; do printf '%%0256d\\n' $(($$ * 100 + i)); i=$((i+1)); done\n"
               "%s\nexec cat >/dev/null\n", done ? "echo done" : "");
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(chmod(nccl_helper, 0755), 0);
    fx_reopen_with((rdzv_limits_t) { 0 });
}

/* Forms group g of two server-made-ID ranks and puts k=v in epoch 1;
 * returns the epoch's ID (the caller frees it). */
static char *s_form_server_group(void)
{
    fx_join(0, "g", 2, 0, "n0", "s0");
    fx_join(1, "g", 2, 1, "n1", "s1");
    ck_assert_int_eq(fx_field(fx_assignment(0), "epoch"), 1);
    const char *id = cJSON_GetObjectItem(fx_assignment(0), "nccl_unique_id")->valuestring;
    ck_assert_ptr_nonnull(id);
    char *copy = strdup(id);
    fx_put(2, "k", "v");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[2], "ok")));
    fx_clear_replies();
    return copy;
}

static const char *s_root_state(void)
{
    fx_send(5, "{\"v\":1,\"op\":\"status\",\"group\":\"g\"}");
    const cJSON *g = cJSON_GetArrayItem(cJSON_GetObjectItem(replies[5], "groups"), 0);
    ck_assert_ptr_nonnull(g);
    const cJSON *root = cJSON_GetObjectItem(g, "nccl_root");
    return root ? root->valuestring : "(none)";
}

/* A restart keeps what it acknowledged: once every rank reached the root,
 * the epoch, the KV and a resumed rank's assignment stay as they were. */
START_TEST(test_restart_keeps_a_done_root_epoch)
{
    s_fake_helper(true);
    char *before = s_form_server_group();
    for (int i = 0; i < 200 && strcmp(s_root_state(), "done") != 0; i++) {
        usleep(10 * 1000);
        drive_tick(core, now);            /* reads the helper's "done" */
    }
    ck_assert_str_eq(s_root_state(), "done");
    fx_reopen_with((rdzv_limits_t) { 0 });
    ck_assert_str_eq(s_root_state(), "done");
    fx_send(3, "{\"v\":1,\"op\":\"kv_get\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\"}");
    ck_assert_str_eq(cJSON_GetObjectItem(replies[3], "value")->valuestring, "v");
    fx_join(0, "g", 2, 0, "n0", "s0");
    ck_assert_int_eq(fx_field(fx_assignment(0), "epoch"), 1);
    ck_assert_str_eq(cJSON_GetObjectItem(fx_assignment(0), "nccl_unique_id")->valuestring, before);
    free(before);
    fx_clear_replies();
}
END_TEST

/* A root that died with rdzvd before every rank reached it: the restart
 * still changes nothing recorded, status says "lost", and the first rank
 * that asks for the IDs moves the group to a new epoch with new ones. */
START_TEST(test_restart_with_a_lost_root)
{
    s_fake_helper(false);
    char *before = s_form_server_group();
    ck_assert_str_eq(s_root_state(), "serving");
    fx_reopen_with((rdzv_limits_t) { 0 });
    ck_assert_str_eq(s_root_state(), "lost");
    fx_send(3, "{\"v\":1,\"op\":\"kv_get\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\"}");
    ck_assert_str_eq(cJSON_GetObjectItem(replies[3], "value")->valuestring, "v");
    fx_send(4, "{\"v\":1,\"op\":\"heartbeat\",\"group\":\"g\",\"rank\":1,\"session\":\"s1\","
              "\"epoch\":1}");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[4], "ok")));
    fx_join(0, "g", 2, 0, "n0", "s0");
    ck_assert_ptr_null(replies[0]);       /* waits for epoch 2 */
    fx_join(1, "g", 2, 1, "n1", "s1");
    ck_assert_int_eq(fx_field(fx_assignment(0), "epoch"), 2);
    ck_assert_int_eq(fx_field(fx_assignment(1), "epoch"), 2);
    ck_assert_str_ne(cJSON_GetObjectItem(fx_assignment(0), "nccl_unique_id")->valuestring, before);
    free(before);
    ck_assert_str_eq(s_root_state(), "serving");
    fx_clear_replies();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("core_nccl");
    TCase *rank0 = fx_tcase(s, "rank0");
    tcase_add_test(rank0, test_rank0_mode);
    TCase *nccl_root = fx_tcase(s, "nccl_root");
    tcase_add_test(nccl_root, test_restart_keeps_a_done_root_epoch);
    tcase_add_test(nccl_root, test_restart_with_a_lost_root);
    return rdzv_check_run(s);
}
