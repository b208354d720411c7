/* The core's key-value store: put, get and wait within an epoch, and the
 * bytes a group, and all groups together, may hold. */
#include "check_run.h"
#include <check.h>
#include <string.h>

#include "core_fixture.h"

START_TEST(test_kv_put_get_wait)
{
    fx_join(0, "g", 1, 0, "n", "a");
    fx_send(1, "{\"v\":1,\"op\":\"kv_wait\",\"group\":\"g\",\"epoch\":1,\"key\":\"id\",\"timeout_ms\":1000}");
    ck_assert_ptr_null(replies[1]);
    fx_send(2, "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"id\",\"value\":\"abc\"}");
    ck_assert_str_eq(cJSON_GetObjectItem(replies[1], "value")->valuestring, "abc");
    fx_send(3, "{\"v\":1,\"op\":\"kv_get\",\"group\":\"g\",\"epoch\":1,\"key\":\"id\"}");
    ck_assert_str_eq(cJSON_GetObjectItem(replies[3], "value")->valuestring, "abc");
    fx_send(4, "{\"v\":1,\"op\":\"kv_get\",\"group\":\"g\",\"epoch\":1,\"key\":\"other\"}");
    ck_assert_str_eq(fx_error(4), RDZV_E_NOT_FOUND);
    fx_send(5, "{\"v\":1,\"op\":\"kv_wait\",\"group\":\"g\",\"epoch\":1,\"key\":\"late\",\"timeout_ms\":10}");
    now += 20;
    drive_tick(core, now);
    fx_collect();
    ck_assert_str_eq(fx_error(5), RDZV_E_TIMEOUT);
    fx_clear_replies();
}
END_TEST

/* Overwriting a key frees its old value: the limit counts what the group
 * holds after the put, up to and including the limit itself. */
START_TEST(test_kv_overwrite_limit)
{
    fx_reopen_with((rdzv_limits_t) { .max_kv_bytes = 10 });
    fx_join(0, "g", 1, 0, "n", "s0");
    fx_put(1, "k", "12345678");                       /* 9 of 10 bytes */
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[1], "ok")));
    fx_put(2, "k", "1234");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[2], "ok")));
    fx_put(3, "k", "123456789");                      /* exactly 10 */
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[3], "ok")));
    fx_put(4, "k", "12345678");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[4], "ok")));
    fx_put(5, "k", "1234567890");                     /* 11: over */
    ck_assert_str_eq(fx_error(5), RDZV_E_LIMIT);
    fx_put(6, "j", "x");                              /* 9 + 2: over */
    ck_assert_str_eq(fx_error(6), RDZV_E_LIMIT);
    fx_send(7, "{\"v\":1,\"op\":\"kv_get\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\"}");
    ck_assert_str_eq(cJSON_GetObjectItem(replies[7], "value")->valuestring, "12345678");
    fx_clear_replies();
}
END_TEST

/* Beside each group's limit, one for all groups together: counted across
 * overwrites, new epochs and deletes, and rebuilt the same by replay. */
START_TEST(test_kv_total_limit)
{
    rdzv_limits_t lim = { .max_kv_bytes = 12, .max_kv_total_bytes = 20 };
    fx_reopen_with(lim);
    fx_join(0, "g", 1, 0, "n", "s0");
    fx_join(0, "h", 1, 0, "n", "t0");
    fx_put(1, "k", "123456789");                      /* g 10, total 10 */
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[1], "ok")));
    fx_send(2, "{\"v\":1,\"op\":\"kv_put\",\"group\":\"h\",\"epoch\":1,\"key\":\"k\","
              "\"value\":\"12345678\"}");            /* h 9, total 19 */
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[2], "ok")));
    fx_send(3, "{\"v\":1,\"op\":\"kv_put\",\"group\":\"h\",\"epoch\":1,\"key\":\"k\","
              "\"value\":\"123456789\"}");           /* h 10, total 20: the limit */
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[3], "ok")));
    fx_put(4, "k", "1234567890");                     /* g 11, within its own: total 21 */
    ck_assert_str_eq(fx_error(4), RDZV_E_LIMIT);
    ck_assert_ptr_nonnull(strstr(cJSON_GetObjectItem(cJSON_GetObjectItem(replies[4], "error"),
                                                     "message")->valuestring, "all groups"));
    fx_put(5, "k", "12345678");                       /* an overwrite that shrinks: 19 */
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[5], "ok")));
    fx_reopen_with(lim);                              /* replay counts the same */
    fx_put(6, "j", "x");                              /* g 11, total 21 */
    ck_assert_str_eq(fx_error(6), RDZV_E_LIMIT);
    fx_send(7, "{\"v\":1,\"op\":\"group_delete\",\"group\":\"h\"}");   /* frees 10 */
    fx_put(8, "j", "x");                              /* g 11, total 11 */
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[8], "ok")));
    fx_clear_replies();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("core_kv");
    TCase *kv = fx_tcase(s, "kv");
    tcase_add_test(kv, test_kv_put_get_wait);
    TCase *kv_limits = fx_tcase(s, "kv_limits");
    tcase_add_test(kv_limits, test_kv_overwrite_limit);
    tcase_add_test(kv_limits, test_kv_total_limit);
    return rdzv_check_run(s);
}
