#include "check_run.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include <cjson/cJSON.h>

START_TEST(test_json_fields)
{
    char *line = rdzv_log_json_line("2026-01-01T00:00:00.000Z", "join",
                                    "group=llm rank=3 world=4 host=10.0.0.1 node=pod-3");
    cJSON *o = cJSON_Parse(line);
    ck_assert_ptr_nonnull(o);
    ck_assert_str_eq(cJSON_GetObjectItem(o, "time")->valuestring, "2026-01-01T00:00:00.000Z");
    ck_assert_str_eq(cJSON_GetObjectItem(o, "level")->valuestring, "info");
    ck_assert_str_eq(cJSON_GetObjectItem(o, "event")->valuestring, "join");
    ck_assert_str_eq(cJSON_GetObjectItem(o, "group")->valuestring, "llm");
    ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(o, "rank")));
    ck_assert_int_eq(cJSON_GetObjectItem(o, "rank")->valueint, 3);
    ck_assert_str_eq(cJSON_GetObjectItem(o, "host")->valuestring, "10.0.0.1");
    cJSON_Delete(o);
    free(line);
}
END_TEST

START_TEST(test_json_quotes_words_and_level)
{
    char *line = rdzv_log_json_line("t", "refuse",
                                    "code=bad_rank rank 9 is outside world 4 reason=\"a b\"");
    cJSON *o = cJSON_Parse(line);
    ck_assert_ptr_nonnull(o);
    ck_assert_str_eq(cJSON_GetObjectItem(o, "level")->valuestring, "warn");
    ck_assert_str_eq(cJSON_GetObjectItem(o, "code")->valuestring, "bad_rank");
    ck_assert_str_eq(cJSON_GetObjectItem(o, "reason")->valuestring, "a b");
    ck_assert_str_eq(cJSON_GetObjectItem(o, "message")->valuestring, "rank 9 is outside world 4");
    cJSON_Delete(o);
    free(line);
}
END_TEST

START_TEST(test_json_escapes)
{
    char *line = rdzv_log_json_line("t", "refuse", "unknown op \"x\\y\"");
    cJSON *o = cJSON_Parse(line);
    ck_assert_ptr_nonnull(o);
    ck_assert_str_eq(cJSON_GetObjectItem(o, "message")->valuestring, "unknown op \"x\\y\"");
    cJSON_Delete(o);
    free(line);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("rdzv_log_json_line");
    tcase_add_test(tc, test_json_fields);
    tcase_add_test(tc, test_json_quotes_words_and_level);
    tcase_add_test(tc, test_json_escapes);
    suite_add_tcase(s, tc);
    return rdzv_check_run(s);
}
