#include "check_run.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "reply.h"
#include "rdzv_proto.h"
#include "rdzv_util.h"

typedef struct {
    const char *json;
    const char *code;            /* NULL: must parse */
} s_case_t;

#define JOIN_OK "\"op\":\"join\",\"group\":\"g\",\"host\":\"h\",\"node\":\"n\",\"session\":\"s\""

static const s_case_t s_cases[] = {
    { "{\"v\":1," JOIN_OK ",\"world\":4,\"rank\":3}", NULL },
    { "{\"v\":1," JOIN_OK ",\"world\":4,\"rank\":3,\"nccl_id\":\"none\",\"members\":false}", NULL },
    { "not json", RDZV_E_BAD_JSON },
    { "[1,2]", RDZV_E_BAD_JSON },
    { "{\"v\":1," JOIN_OK ",\"world\":4,\"rank\":3", RDZV_E_BAD_JSON },
    { "{" JOIN_OK ",\"world\":4,\"rank\":3}", RDZV_E_BAD_VERSION },
    { "{\"v\":2," JOIN_OK ",\"world\":4,\"rank\":3}", RDZV_E_BAD_VERSION },
    { "{\"v\":\"1\"," JOIN_OK ",\"world\":4,\"rank\":3}", RDZV_E_BAD_VERSION },
    { "{\"v\":1,\"op\":\"fly\"}", RDZV_E_UNKNOWN_OP },
    { "{\"v\":1,\"op\":7}", RDZV_E_UNKNOWN_OP },
    { "{\"v\":1}", RDZV_E_UNKNOWN_OP },
    { "{\"v\":1," JOIN_OK ",\"world\":4,\"rank\":4}", RDZV_E_BAD_RANK },
    { "{\"v\":1," JOIN_OK ",\"world\":4,\"rank\":-1}", RDZV_E_BAD_RANK },
    { "{\"v\":1," JOIN_OK ",\"world\":0,\"rank\":0}", RDZV_E_BAD_WORLD },
    { "{\"v\":1," JOIN_OK ",\"world\":65537,\"rank\":0}", RDZV_E_BAD_WORLD },
    { "{\"v\":1," JOIN_OK ",\"world\":\"4\",\"rank\":0}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1," JOIN_OK ",\"world\":4.5,\"rank\":0}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1," JOIN_OK ",\"world\":4}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1," JOIN_OK ",\"world\":4,\"rank\":0,\"timeout_ms\":0}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1," JOIN_OK ",\"world\":4,\"rank\":0,\"nccl_id\":\"gpu\"}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1," JOIN_OK ",\"world\":4,\"rank\":0,\"members\":1}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"join\",\"group\":\"a b\",\"host\":\"h\",\"node\":\"n\",\"session\":\"s\",\"world\":1,\"rank\":0}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"join\",\"group\":\"\",\"host\":\"h\",\"node\":\"n\",\"session\":\"s\",\"world\":1,\"rank\":0}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"join\",\"group\":\"g\",\"host\":\"h\\n\",\"node\":\"n\",\"session\":\"s\",\"world\":1,\"rank\":0}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"status\"}", NULL },
    { "{\"v\":1,\"op\":\"status\",\"group\":5}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\",\"value\":\"x\"}", NULL },
    { "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\",\"value\":3}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"kv_get\",\"group\":\"g\",\"epoch\":0,\"key\":\"k\"}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"kv_wait\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\",\"timeout_ms\":10}", NULL },
    { "{\"v\":1,\"op\":\"heartbeat\",\"group\":\"g\",\"rank\":0,\"session\":\"s\",\"epoch\":1}", NULL },
    { "{\"v\":1,\"op\":\"heartbeat\",\"group\":\"g\",\"rank\":0,\"session\":\"s\"}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"group_delete\"}", RDZV_E_BAD_REQUEST },
    /* Only JSON whitespace may follow the object. */
    { "{\"v\":1,\"op\":\"status\"} \t\r\n", NULL },
    { "{\"v\":1,\"op\":\"status\"} garbage", RDZV_E_BAD_JSON },
    { "{\"v\":1,\"op\":\"status\"}{}", RDZV_E_BAD_JSON },
    { "{\"v\":1,\"op\":\"status\"}\f", RDZV_E_BAD_JSON },
    /* An encoded NUL would cut a string short; a literal backslash is fine. */
    { "{\"v\":1,\"op\":\"status\",\"group\":\"a\\u0000b\"}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"status\\u0000x\"}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\",\"value\":\"ab\\u0000cd\"}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"status\",\"x\\u0000\":1}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\",\"value\":\"a\\\\u0000b\"}", NULL },
    { "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\",\"value\":\"\\\\\\u0000\"}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\",\"value\":\"\\u00001\"}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\",\"value\":\"\\u0001\\u1000\"}", NULL },
    /* Control characters: escaped in strings, and only space, tab, LF and
     * CR between tokens (cJSON alone takes any byte below 0x20 for both). */
    { "\t{\"v\":1,\r\n\"op\":\"status\"}", NULL },
    { "\x01{\"v\":1,\"op\":\"status\"}", RDZV_E_BAD_JSON },
    { "{\"v\":1,\x0b\"op\":\"status\"}", RDZV_E_BAD_JSON },
    { "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\",\"value\":\"a\x01" "b\"}", RDZV_E_BAD_JSON },
    { "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\",\"value\":\"a\nb\"}", RDZV_E_BAD_JSON },
    { "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\",\"value\":\"a\\\\\\\"\\nb\"}", NULL },
    { "{\"v\":1,\"op\":\"status\",\"x\\\"\t\":1}", RDZV_E_BAD_JSON },
    /* Strings must be well-formed UTF-8, raw or escaped. */
    { "{\"v\":1," JOIN_OK ",\"world\":4,\"rank\":3,\"x\":\"caf\xc3\xa9 \\ud83d\\ude00\"}", NULL },
    { "{\"v\":1,\"op\":\"join\",\"group\":\"g\",\"host\":\"h\xff\",\"node\":\"n\",\"session\":\"s\",\"world\":1,\"rank\":0}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"join\",\"group\":\"g\",\"host\":\"h\",\"node\":\"\xc0\xae\",\"session\":\"s\",\"world\":1,\"rank\":0}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"join\",\"group\":\"g\",\"host\":\"h\",\"node\":\"n\",\"session\":\"\xed\xa0\x80\",\"world\":1,\"rank\":0}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\",\"value\":\"\xf4\x90\x80\x80\"}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\",\"value\":\"\\ud800\"}", RDZV_E_BAD_JSON },
    { "{\"v\":1,\"op\":\"status\",\"\xe2\x82\":1}", RDZV_E_BAD_REQUEST },
    /* A key may appear once per object, nested objects included. */
    { "{\"v\":1,\"op\":\"status\",\"op\":\"group_delete\",\"group\":\"g\"}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"status\",\"group\":\"g\",\"group\":\"h\"}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"v\":1,\"op\":\"status\"}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"status\",\"x\":[{\"a\":1,\"b\":2,\"a\":3}]}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"status\",\"x\":{\"y\":{\"z\":1,\"z\":1}}}", RDZV_E_BAD_REQUEST },
    { "{\"v\":1,\"op\":\"status\",\"x\":{\"op\":1,\"v\":2},\"y\":[{\"a\":1},{\"a\":2}]}", NULL },
    { "{\"v\":1,\"op\":\"status\",\"Op\":1}", NULL },
};

START_TEST(test_parse_table)
{
    const s_case_t *c = &s_cases[_i];
    rdzv_request_t req;
    const char *code = NULL;
    char msg[256] = "";
    int rc = rdzv_request_parse(c->json, strlen(c->json), RDZV_DEFAULT_MAX_WORLD, &req,
                                &code, msg, sizeof msg);
    if (c->code) {
        ck_assert_msg(rc == -1, "case %d parsed: %s", _i, c->json);
        ck_assert_str_eq(code, c->code);
        ck_assert_msg(strlen(msg) > 0, "case %d has no message", _i);
    } else {
        ck_assert_msg(rc == 0, "case %d refused (%s: %s): %s", _i, code, msg, c->json);
        rdzv_request_clear(&req);
    }
}
END_TEST

/* A raw NUL byte inside a string: strlen would stop at it. */
START_TEST(test_raw_nul_refused)
{
    static const char json[] = "{\"v\":1,\"op\":\"status\",\"group\":\"a\0b\"}";
    rdzv_request_t req;
    const char *code;
    char msg[128];
    ck_assert_int_eq(rdzv_request_parse(json, sizeof json - 1, 100, &req, &code, msg, sizeof msg), -1);
    ck_assert_str_eq(code, RDZV_E_BAD_REQUEST);
}
END_TEST

/* The value keeps its literal backslash and every byte after it. */
START_TEST(test_escaped_backslash_kept)
{
    const char *json = "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\",\"value\":\"ab\\\\u0000cd\"}";
    rdzv_request_t req;
    const char *code;
    char msg[128];
    ck_assert_int_eq(rdzv_request_parse(json, strlen(json), 100, &req, &code, msg, sizeof msg), 0);
    ck_assert_str_eq(req.value, "ab\\u0000cd");
    rdzv_request_clear(&req);
}
END_TEST

/* The echoed op is cut on a character boundary, so the reply stays UTF-8. */
START_TEST(test_unknown_op_echo_is_utf8)
{
    char json[256], op[80];
    memset(op, 'o', 63);
    strcpy(op + 63, "\xc3\xa9\xc3\xa9");
    snprintf(json, sizeof json, "{\"v\":1,\"op\":\"%s\"}", op);
    rdzv_request_t req;
    const char *code;
    char msg[256];
    ck_assert_int_eq(rdzv_request_parse(json, strlen(json), 100, &req, &code, msg, sizeof msg), -1);
    ck_assert_str_eq(code, RDZV_E_UNKNOWN_OP);
    ck_assert_msg(rdzv_utf8_valid(msg, strlen(msg)), "not UTF-8: %s", msg);
}
END_TEST

/* The message names the key, and the request's id still comes back. */
START_TEST(test_duplicate_key_message)
{
    const char *json = "{\"v\":1,\"id\":7,\"op\":\"status\",\"group\":\"g\",\"group\":\"h\"}";
    rdzv_request_t req;
    const char *code;
    char msg[128];
    ck_assert_int_eq(rdzv_request_parse(json, strlen(json), 100, &req, &code, msg, sizeof msg), -1);
    ck_assert_str_eq(msg, "duplicate key \"group\"");
    ck_assert_int_eq(req.id, 7);
}
END_TEST

/* An object with more keys than the check keeps on its stack: a repeat is
 * still found, and unique keys still pass. */
START_TEST(test_duplicate_key_many_keys)
{
    char json[2048];
    for (int dup = 0; dup < 2; dup++) {
        int n = snprintf(json, sizeof json, "{\"v\":1,\"id\":8,\"op\":\"status\",\"x\":{");
        for (int i = 0; i < 40; i++)
            n += snprintf(json + n, sizeof json - (size_t) n, "%s\"k%d\":%d", i ? "," : "",
                          dup && i == 39 ? 5 : i, i);
        snprintf(json + n, sizeof json - (size_t) n, "}}");
        rdzv_request_t req;
        const char *code;
        char msg[128] = "";
        int rc = rdzv_request_parse(json, strlen(json), 100, &req, &code, msg, sizeof msg);
        if (dup) {
            ck_assert_int_eq(rc, -1);
            ck_assert_str_eq(msg, "duplicate key \"k5\"");
        } else {
            ck_assert_msg(rc == 0, "unique keys refused: %s", msg);
            rdzv_request_clear(&req);
        }
    }
}
END_TEST

/* An id must come back exactly: anything but an integer in [0, 2^53 - 1] is
 * refused, and the refusal echoes 0, not a rounded or truncated number. */
START_TEST(test_id_must_be_exact)
{
    static const struct { const char *id; int ok; int64_t want; } cases[] = {
        { "7", 1, 7 }, { "0", 1, 0 }, { "9007199254740991", 1, 9007199254740991LL },
        { "9007199254740992", 0, 0 }, { "9007199254740993", 0, 0 }, { "9007199254740994", 0, 0 },
        { "\"abc\"", 0, 0 }, { "1e300", 0, 0 },
        { "1.5", 0, 0 }, { "-1", 0, 0 }, { "true", 0, 0 }, { "null", 0, 0 }, { "[1]", 0, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[128];
        snprintf(json, sizeof json, "{\"v\":1,\"id\":%s,\"op\":\"status\"}", cases[i].id);
        rdzv_request_t req;
        const char *code = NULL;
        char msg[128] = "";
        int rc = rdzv_request_parse(json, strlen(json), 100, &req, &code, msg, sizeof msg);
        ck_assert_msg((rc == 0) == cases[i].ok, "id %s: rc %d (%s)", cases[i].id, rc, msg);
        ck_assert_int_eq(req.id, cases[i].want);
        if (rc == 0) {
            rdzv_request_clear(&req);
        } else {
            ck_assert_str_eq(code, RDZV_E_BAD_REQUEST);
            ck_assert_str_eq(msg, "field \"id\" must be an integer in [0, 2^53 - 1]");
        }
    }
    /* The largest id comes back as sent, not as 9.00719925474099e+15. */
    char *text = rdzv_reply_ok(9007199254740991LL);
    ck_assert_ptr_nonnull(strstr(text, "\"id\":9007199254740991,"));
    free(text);
}
END_TEST

/* Frames cJSON refuses get a reason a client can act on, not just "not a
 * JSON object". */
START_TEST(test_bad_json_says_why)
{
    static char deep[2100];
    memset(deep, '[', 1001);
    memset(deep + 1001, ']', 1001);
    static const struct { const char *json; const char *says; } cases[] = {
        { deep, "deeper than 1000 levels" },
        { "{\"v\":1,\"op\":\"status\",\"group\":\"\\ud83d\"}", "lone UTF-16 surrogate \\uD83D at byte 30" },
        { "{\"v\":1,\"op\":\"status\",\"group\":\"\\udc00x\"}", "lone UTF-16 surrogate \\uDC00" },
        { "{\"v\":1,\"id\":NaN}", "NaN or Infinity at byte 12" },
        { "{\"v\":-Infinity}", "NaN or Infinity at byte 6" },
        { "[1,2]", "request is an array, not a JSON object" },
        { "\"s\"", "request is a string, not a JSON object" },
        { "", "request is empty" },
        { "{\"v\":1,}", "not valid JSON: it stops making sense at byte 7" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rdzv_request_t req;
        const char *code = NULL;
        char msg[256] = "";
        ck_assert_int_eq(rdzv_request_parse(cases[i].json, strlen(cases[i].json), 100, &req,
                                            &code, msg, sizeof msg), -1);
        ck_assert_str_eq(code, RDZV_E_BAD_JSON);
        ck_assert_msg(strstr(msg, cases[i].says), "case %zu: \"%s\" does not say \"%s\"", i,
                      msg, cases[i].says);
    }
    /* A surrogate pair is a character, not an error. */
    const char *pair = "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\","
                       "\"value\":\"\\ud83d\\ude00\"}";
    rdzv_request_t req;
    const char *code = NULL;
    char msg[256] = "";
    ck_assert_msg(rdzv_request_parse(pair, strlen(pair), 100, &req, &code, msg, sizeof msg) == 0,
                  "%s", msg);
    rdzv_request_clear(&req);
}
END_TEST

START_TEST(test_join_fields)
{
    const char *json = "{\"v\":1,\"id\":42," JOIN_OK ",\"world\":8,\"rank\":5,\"timeout_ms\":1500,\"members\":false}";
    rdzv_request_t req;
    const char *code;
    char msg[128];
    ck_assert_int_eq(rdzv_request_parse(json, strlen(json), 100, &req, &code, msg, sizeof msg), 0);
    ck_assert_int_eq(req.op, RDZV_OP_JOIN);
    ck_assert_int_eq(req.id, 42);
    ck_assert_int_eq(req.world, 8);
    ck_assert_int_eq(req.rank, 5);
    ck_assert_int_eq(req.timeout_ms, 1500);
    ck_assert(!req.members);
    ck_assert_str_eq(req.group, "g");
    rdzv_request_clear(&req);
}
END_TEST

START_TEST(test_error_keeps_id_and_oversize)
{
    const char *json = "{\"v\":1,\"id\":9,\"op\":\"nope\"}";
    rdzv_request_t req;
    const char *code;
    char msg[128];
    ck_assert_int_eq(rdzv_request_parse(json, strlen(json), 100, &req, &code, msg, sizeof msg), -1);
    ck_assert_int_eq(req.id, 9);
    size_t big = RDZV_MAX_FRAME + 1;
    char *frame = malloc(big);
    memset(frame, ' ', big);
    ck_assert_int_eq(rdzv_request_parse(frame, big, 100, &req, &code, msg, sizeof msg), -1);
    ck_assert_str_eq(code, RDZV_E_TOO_LARGE);
    free(frame);
}
END_TEST

START_TEST(test_max_world_option)
{
    const char *json = "{\"v\":1," JOIN_OK ",\"world\":101,\"rank\":0}";
    rdzv_request_t req;
    const char *code;
    char msg[128];
    ck_assert_int_eq(rdzv_request_parse(json, strlen(json), 100, &req, &code, msg, sizeof msg), -1);
    ck_assert_str_eq(code, RDZV_E_BAD_WORLD);
}
END_TEST

/* The assignment text, field by field, against what cJSON reads back: the
 * ports are formatted by incrementing digits, so cross 9 -> 10, 99 -> 100,
 * 9999 -> 10000, and start anywhere. */
START_TEST(test_render_assignment)
{
    static const struct { int first, count; int64_t id; } cases[] = {
        { 8, 4, 1 }, { 95, 10, -3 }, { 9990, 20, 9007199254740991LL },
        { 19500, 32, 0 }, { 65534, 2, 42 }, { 0, 1, 7 }, { 1000, 0, 5 },
    };
    const char *fields = "\"group\":\"g\\\"q\",\"world\":2";
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        rdzv_reply_t reply = { .rank = 3, .first_port = cases[c].first,
                               .ports = cases[c].count, .peer.req = cases[c].id,
                               .shared = rdzv_shared_new(fields, strlen(fields)) };
        ck_assert_int_eq(rdzv_reply_render(&reply), 0);
        ck_assert_ptr_null(reply.shared);
        cJSON *root = cJSON_Parse(reply.text);
        ck_assert_msg(root != NULL, "not JSON: %s", reply.text);
        ck_assert_double_eq(cJSON_GetObjectItem(root, "id")->valuedouble, (double) cases[c].id);
        cJSON *a = cJSON_GetObjectItem(root, "assignment");
        ck_assert_int_eq(cJSON_GetObjectItem(a, "rank")->valueint, 3);
        ck_assert_str_eq(cJSON_GetObjectItem(a, "group")->valuestring, "g\"q");
        cJSON *ports = cJSON_GetObjectItem(a, "ports");
        ck_assert_int_eq(cJSON_GetArraySize(ports), cases[c].count);
        for (int i = 0; i < cases[c].count; i++)
            ck_assert_int_eq(cJSON_GetArrayItem(ports, i)->valueint, cases[c].first + i);
        cJSON_Delete(root);
        rdzv_reply_clear(&reply);
    }
}
END_TEST

/* Any sequence comes out as snprintf would write it, whatever the steps. */
START_TEST(test_decimal_sequence)
{
    static const int v[] = { 5, 6, 6, 9, 10, 99, 100, 101, -1, 0, 1, 9, 10, 19500, 19532,
                             19532, 19533, -2147483647 - 1, 2147483646, 2147483647, 0 };
    rdzv_decimal_t d;
    rdzv_decimal_set(&d, v[0]);
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char got[32], want[32];
        *rdzv_decimal_put(&d, got, v[i]) = '\0';
        snprintf(want, sizeof want, "%d", v[i]);
        ck_assert_str_eq(got, want);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("proto");
    TCase *tc = tcase_create("rdzv_request_parse");
    tcase_add_loop_test(tc, test_parse_table, 0, (int) (sizeof s_cases / sizeof s_cases[0]));
    tcase_add_test(tc, test_raw_nul_refused);
    tcase_add_test(tc, test_escaped_backslash_kept);
    tcase_add_test(tc, test_unknown_op_echo_is_utf8);
    tcase_add_test(tc, test_duplicate_key_message);
    tcase_add_test(tc, test_id_must_be_exact);
    tcase_add_test(tc, test_bad_json_says_why);
    tcase_add_test(tc, test_duplicate_key_many_keys);
    tcase_add_test(tc, test_join_fields);
    tcase_add_test(tc, test_error_keeps_id_and_oversize);
    tcase_add_test(tc, test_max_world_option);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("rdzv_reply_render");
    tcase_add_test(tr, test_render_assignment);
    tcase_add_test(tr, test_decimal_sequence);
    suite_add_tcase(s, tr);
    return rdzv_check_run(s);
}
