/* The core's refusals as log lines: each JSON "refuse" line carries its
 * code, and the group and rank it concerns, as fields of their own, read
 * here by parsing the lines rdzvd writes on stderr. */
#include "check_run.h"
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core_fixture.h"
#include "log.h"

static char s_log_path[96];
static int s_saved_stderr = -1;

/* stderr into a file of this test's own until s_lines. */
static void s_capture(bool json)
{
    rdzv_log_set_json(json);
    snprintf(s_log_path, sizeof s_log_path, "%s.log", dir);
    fflush(stderr);
    s_saved_stderr = dup(2);
    int fd = open(s_log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    dup2(fd, 2);
    close(fd);
}

/* Every line written since s_capture, as one string (the caller frees). */
static char *s_lines(void)
{
    fflush(stderr);
    dup2(s_saved_stderr, 2);
    close(s_saved_stderr);
    FILE *f = fopen(s_log_path, "r");
    ck_assert_ptr_nonnull(f);
    char *text = calloc(1, 1 << 16);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    text[n] = '\0';
    fclose(f);
    unlink(s_log_path);
    return text;
}

/* The n-th JSON line (from 0) whose event is "refuse" and code is code. */
static cJSON *s_refusal(const char *text, const char *code, int n)
{
    char *copy = strdup(text), *save = NULL;
    cJSON *found = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line && !found;
         line = strtok_r(NULL, "\n", &save)) {
        cJSON *o = cJSON_Parse(line);
        ck_assert_msg(o != NULL, "not JSON: %s", line);
        const cJSON *event = cJSON_GetObjectItem(o, "event"), *c = cJSON_GetObjectItem(o, "code");
        if (strcmp(event->valuestring, "refuse") == 0 && cJSON_IsString(c)
            && strcmp(c->valuestring, code) == 0 && n-- == 0)
            found = o;
        else
            cJSON_Delete(o);
    }
    free(copy);
    ck_assert_msg(found != NULL, "no refusal %s in:\n%s", code, text);
    return found;
}

static const char *s_str(const cJSON *o, const char *name)
{
    const cJSON *item = cJSON_GetObjectItem(o, name);
    return cJSON_IsString(item) ? item->valuestring : NULL;
}

/* A refused join: its group and rank. */
START_TEST(test_refused_join_names_group_and_rank)
{
    s_capture(true);
    fx_join(0, "llm", 4, 2, "n0", "a");
    fx_join(1, "llm", 4, 2, "n1", "intruder");
    char *text = s_lines();
    cJSON *o = s_refusal(text, RDZV_E_RANK_TAKEN, 0);
    ck_assert_str_eq(s_str(o, "level"), "warn");
    ck_assert_str_eq(s_str(o, "group"), "llm");
    ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(o, "rank")));
    ck_assert_int_eq(cJSON_GetObjectItem(o, "rank")->valueint, 2);
    ck_assert_ptr_nonnull(strstr(s_str(o, "message"), "group llm rank 2 is held by"));
    cJSON_Delete(o);
    free(text);
    fx_clear_replies();
}
END_TEST

/* An op that names no rank: the group alone. */
START_TEST(test_refused_kv_names_the_group_only)
{
    s_capture(true);
    fx_send(0, "{\"v\":1,\"op\":\"kv_get\",\"group\":\"nowhere\",\"epoch\":1,\"key\":\"k\"}");
    char *text = s_lines();
    cJSON *o = s_refusal(text, RDZV_E_NOT_FOUND, 0);
    ck_assert_str_eq(s_str(o, "group"), "nowhere");
    ck_assert_ptr_null(cJSON_GetObjectItem(o, "rank"));
    cJSON_Delete(o);
    free(text);
    fx_clear_replies();
}
END_TEST

/* A rank's wait refused while another request is handled (a delete of its
 * group) names that rank's group and rank, not the request's. */
START_TEST(test_refused_wait_names_the_waiter)
{
    fx_join(0, "w", 3, 1, "n0", "a");
    s_capture(true);
    fx_send(1, "{\"v\":1,\"op\":\"group_delete\",\"group\":\"w\"}");
    char *text = s_lines();
    cJSON *o = s_refusal(text, RDZV_E_NOT_FOUND, 0);
    ck_assert_str_eq(s_str(o, "group"), "w");
    ck_assert_int_eq(cJSON_GetObjectItem(o, "rank")->valueint, 1);
    cJSON_Delete(o);
    free(text);
    fx_clear_replies();
}
END_TEST

/* A request that does not parse names nothing it might not have meant. */
START_TEST(test_unparsed_request_names_no_group)
{
    s_capture(true);
    fx_send(0, "{\"v\":1,\"op\":\"join\",\"group\":\"g\",\"world\":4,\"rank\":9,"
            "\"host\":\"h\",\"node\":\"n\",\"session\":\"s\"}");
    char *text = s_lines();
    cJSON *o = s_refusal(text, RDZV_E_BAD_RANK, 0);
    ck_assert_ptr_null(cJSON_GetObjectItem(o, "group"));
    ck_assert_ptr_null(cJSON_GetObjectItem(o, "rank"));
    ck_assert_str_eq(s_str(o, "message"), "rank 9 is outside world 4");
    cJSON_Delete(o);
    free(text);
    fx_clear_replies();
}
END_TEST

/* A group name is a client's text: quotes and '=' in it stay in the group
 * field and the message, and make no fields of their own. */
START_TEST(test_group_text_makes_no_fields)
{
    s_capture(true);
    fx_send(0, "{\"v\":1,\"op\":\"kv_get\",\"group\":\"q\\\"x=1\",\"epoch\":1,\"key\":\"k\"}");
    char *text = s_lines();
    cJSON *o = s_refusal(text, RDZV_E_NOT_FOUND, 0);
    ck_assert_str_eq(s_str(o, "group"), "q\"x=1");
    ck_assert_ptr_null(cJSON_GetObjectItem(o, "x"));
    ck_assert_ptr_null(cJSON_GetObjectItem(o, "q\"x"));
    ck_assert_ptr_nonnull(strstr(s_str(o, "message"), "q\"x=1"));
    cJSON_Delete(o);
    free(text);
    fx_clear_replies();
}
END_TEST

/* The text form says the same as key=value words. */
START_TEST(test_text_line_names_group_and_rank)
{
    s_capture(false);
    fx_join(0, "llm", 4, 2, "n0", "a");
    fx_join(1, "llm", 4, 2, "n1", "intruder");
    char *text = s_lines();
    ck_assert_msg(strstr(text, " refuse code=rank_taken group=llm rank=2 group llm rank 2 is held")
                  != NULL, "%s", text);
    free(text);
    fx_clear_replies();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("core_log");
    TCase *tc = fx_tcase(s, "refuse");
    tcase_add_test(tc, test_refused_join_names_group_and_rank);
    tcase_add_test(tc, test_refused_kv_names_the_group_only);
    tcase_add_test(tc, test_refused_wait_names_the_waiter);
    tcase_add_test(tc, test_unparsed_request_names_no_group);
    tcase_add_test(tc, test_group_text_makes_no_fields);
    tcase_add_test(tc, test_text_line_names_group_and_rank);
    return rdzv_check_run(s);
}
