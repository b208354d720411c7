#include "check_run.h"
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* What one line of each level leaves on stderr at threshold level. */
static char *s_written_at(rdzv_log_level_t level)
{
    char path[] = "/tmp/rdzv-log-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    rdzv_log_set_level(level);
    rdzv_core_log("fatal", "what=error-line");
    rdzv_core_log("open", "what=warn-line");
    rdzv_log_refuse("forbidden", "g", -1, "refuse-line");
    rdzv_core_log("start", "what=info-line");
    rdzv_core_log("auth", "what=debug-line");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char *text = calloc(1, 4096);
    ck_assert_int_ge(pread(fd, text, 4095, 0), 0);
    close(fd);
    unlink(path);
    rdzv_log_set_level(RDZV_LOG_INFO);
    return text;
}

START_TEST(test_level_threshold)
{
    char *text = s_written_at(RDZV_LOG_DEBUG);
    ck_assert_ptr_nonnull(strstr(text, "auth what=debug-line"));
    ck_assert_ptr_nonnull(strstr(text, "start what=info-line"));
    free(text);
    text = s_written_at(RDZV_LOG_INFO);
    ck_assert_ptr_null(strstr(text, "debug-line"));
    ck_assert_ptr_nonnull(strstr(text, "start what=info-line"));
    ck_assert_ptr_nonnull(strstr(text, "refuse code=forbidden group=g refuse-line"));
    free(text);
    text = s_written_at(RDZV_LOG_WARN);
    ck_assert_ptr_null(strstr(text, "info-line"));
    ck_assert_ptr_nonnull(strstr(text, "open what=warn-line"));
    ck_assert_ptr_nonnull(strstr(text, "refuse-line"));
    ck_assert_ptr_nonnull(strstr(text, "fatal what=error-line"));
    free(text);
    text = s_written_at(RDZV_LOG_ERROR);
    ck_assert_ptr_null(strstr(text, "warn-line"));
    ck_assert_ptr_null(strstr(text, "refuse-line"));
    ck_assert_ptr_nonnull(strstr(text, "fatal what=error-line"));
    free(text);
}
END_TEST

START_TEST(test_level_names)
{
    rdzv_log_level_t level = RDZV_LOG_INFO;
    ck_assert_int_eq(rdzv_log_level_parse("debug", &level), 0);
    ck_assert_int_eq(level, RDZV_LOG_DEBUG);
    ck_assert_int_eq(rdzv_log_level_parse("warn", &level), 0);
    ck_assert_int_eq(level, RDZV_LOG_WARN);
    ck_assert_int_eq(rdzv_log_level_parse("warning", &level), -1);
    ck_assert_int_eq(rdzv_log_level_parse("", &level), -1);
    ck_assert_int_eq(level, RDZV_LOG_WARN);
    char *line = rdzv_log_json_line("t", "auth", "key=k");
    ck_assert_ptr_nonnull(strstr(line, "\"level\":\"debug\""));
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
    TCase *levels = tcase_create("levels");
    tcase_add_test(levels, test_level_threshold);
    tcase_add_test(levels, test_level_names);
    suite_add_tcase(s, levels);
    return rdzv_check_run(s);
}
