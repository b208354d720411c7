/* Assignment parsing, getters and the environment it gives a rank. */
#include "rdzv.h"

#include <cjson/cJSON.h>
#include "check_run.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCCL_HEX_LEN 256

/* Rank 1 of 2; members deliberately out of rank order. */
#define S_VALID_FMT \
    "{\"group\":\"llm\",\"epoch\":3,\"rank\":1,\"world\":2," \
    "\"local_rank\":0,\"local_world\":1,\"group_rank\":1,\"group_world\":2," \
    "\"named_ports\":{\"store\":19500,\"dp_rpc\":19501,\"probe\":[19534,19534]}," \
    "\"master_addr\":\"10.0.0.11\",\"master_port\":19500," \
    "\"ports\":[19532,19533,19534],\"nccl_unique_id\":\"%s\"," \
    "\"members\":[{\"rank\":1,\"host\":\"10.0.0.12\",\"node\":\"pod-1\"}," \
    "{\"rank\":0,\"host\":\"10.0.0.11\",\"node\":\"pod-0\"}]}"

static char s_nccl[NCCL_HEX_LEN + 1];
static char s_valid[2048];

static void s_setup(void)
{
    for (int i = 0; i < NCCL_HEX_LEN; i++)
        s_nccl[i] = "0123456789abcdef"[i % 16];
    s_nccl[NCCL_HEX_LEN] = '\0';
    snprintf(s_valid, sizeof s_valid, S_VALID_FMT, s_nccl);
}

/* s_valid with field replaced by the JSON text value (NULL: removed). */
static char *s_variant(const char *field, const char *value)
{
    cJSON *root = cJSON_Parse(s_valid);
    cJSON_DeleteItemFromObjectCaseSensitive(root, field);
    if (value)
        cJSON_AddItemToObject(root, field, cJSON_Parse(value));
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

START_TEST(test_valid_getters)
{
    rdzv_assignment_t *a = rdzv_assignment_from_json(s_valid);
    ck_assert_ptr_nonnull(a);
    ck_assert_str_eq(rdzv_assignment_group(a), "llm");
    ck_assert_int_eq(rdzv_assignment_epoch(a), 3);
    ck_assert_int_eq(rdzv_assignment_rank(a), 1);
    ck_assert_int_eq(rdzv_assignment_world(a), 2);
    ck_assert_str_eq(rdzv_assignment_master_addr(a), "10.0.0.11");
    ck_assert_int_eq(rdzv_assignment_master_port(a), 19500);
    ck_assert_int_eq(rdzv_assignment_local_rank(a), 0);
    ck_assert_int_eq(rdzv_assignment_local_world(a), 1);
    ck_assert_int_eq(rdzv_assignment_group_rank(a), 1);
    ck_assert_int_eq(rdzv_assignment_group_world(a), 2);
    ck_assert_int_eq(rdzv_assignment_store_port(a), 19500);
    ck_assert_int_eq(rdzv_assignment_dp_rpc_port(a), 19501);
    int lo = 0, hi = 0;
    ck_assert_int_eq(rdzv_assignment_probe_ports(a, &lo, &hi), RDZV_OK);
    ck_assert_int_eq(lo, 19534);
    ck_assert_int_eq(hi, 19534);
    char *args = rdzv_assignment_vllm_args(a);
    ck_assert_str_eq(args, "--data-parallel-size 2 --data-parallel-rank 1 "
                     "--data-parallel-address 10.0.0.11 --data-parallel-rpc-port 19501");
    free(args);
    ck_assert_uint_eq(rdzv_assignment_port_count(a), 3);
    ck_assert_int_eq(rdzv_assignment_port(a, 0), 19532);
    ck_assert_int_eq(rdzv_assignment_port(a, 2), 19534);
    ck_assert_int_eq(rdzv_assignment_port(a, 3), -1);
    ck_assert_str_eq(rdzv_assignment_nccl_id_hex(a), s_nccl);
    ck_assert_uint_eq(rdzv_assignment_member_count(a), 2);
    ck_assert_str_eq(rdzv_assignment_member_host(a, 0), "10.0.0.11");
    ck_assert_str_eq(rdzv_assignment_member_node(a, 0), "pod-0");
    ck_assert_str_eq(rdzv_assignment_member_host(a, 1), "10.0.0.12");
    ck_assert_str_eq(rdzv_assignment_member_node(a, 1), "pod-1");
    ck_assert_ptr_null(rdzv_assignment_member_host(a, 2));
    rdzv_assignment_destroy(&a);
    ck_assert_ptr_null(a);
    rdzv_assignment_destroy(&a);
}
END_TEST

START_TEST(test_nccl_bytes)
{
    rdzv_assignment_t *a = rdzv_assignment_from_json(s_valid);
    unsigned char raw[128];
    ck_assert_int_eq(rdzv_assignment_nccl_id(a, raw), RDZV_OK);
    ck_assert_uint_eq(raw[0], 0x01);
    ck_assert_uint_eq(raw[7], 0xef);
    rdzv_assignment_destroy(&a);

    char *upper = strdup(s_valid);
    char *at = strstr(upper, s_nccl);
    for (int i = 0; i < NCCL_HEX_LEN; i++)
        at[i] = (char) (at[i] >= 'a' ? at[i] - 32 : at[i]);
    a = rdzv_assignment_from_json(upper);
    ck_assert_ptr_nonnull(a);
    ck_assert_str_eq(rdzv_assignment_nccl_id_hex(a), s_nccl);   /* lowercased */
    rdzv_assignment_destroy(&a);
    free(upper);
}
END_TEST

START_TEST(test_nccl_null)
{
    char *text = s_variant("nccl_unique_id", "null");
    rdzv_assignment_t *a = rdzv_assignment_from_json(text);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_null(rdzv_assignment_nccl_id_hex(a));
    unsigned char raw[128];
    ck_assert_int_eq(rdzv_assignment_nccl_id(a, raw), RDZV_ERR_USAGE);
    char *env = rdzv_assignment_env(a);
    ck_assert_ptr_nonnull(strstr(env, "\nRDZV_NCCL_UNIQUE_ID=\n"));
    free(env);
    rdzv_assignment_destroy(&a);
    free(text);
}
END_TEST

START_TEST(test_json_roundtrip)
{
    rdzv_assignment_t *a = rdzv_assignment_from_json(s_valid);
    rdzv_assignment_t *b = rdzv_assignment_from_json(rdzv_assignment_json(a));
    ck_assert_ptr_nonnull(b);
    ck_assert_str_eq(rdzv_assignment_json(a), rdzv_assignment_json(b));
    ck_assert_ptr_null(strchr(rdzv_assignment_json(a), '\n'));     /* one line */
    rdzv_assignment_destroy(&a);
    rdzv_assignment_destroy(&b);
}
END_TEST

typedef struct {
    const char *field;
    const char *value;      /* JSON text; NULL removes the field */
} s_bad_t;

static const s_bad_t s_bad[] = {
    { "group", NULL }, { "group", "5" }, { "group", "\"\"" }, { "group", "\"a b\"" },
    { "epoch", NULL }, { "epoch", "\"3\"" }, { "epoch", "0" }, { "epoch", "1.5" },
    { "rank", NULL }, { "rank", "2" }, { "rank", "-1" }, { "rank", "\"1\"" },
    { "world", NULL }, { "world", "0" }, { "world", "\"2\"" }, { "world", "3" },
    { "master_addr", NULL }, { "master_addr", "7" }, { "master_addr", "\"\"" },
    { "master_port", NULL }, { "master_port", "0" }, { "master_port", "65536" },
    { "master_port", "\"19500\"" }, { "master_port", "19500.5" },
    { "ports", NULL }, { "ports", "[]" }, { "ports", "[0]" }, { "ports", "[\"19500\"]" },
    { "ports", "19500" }, { "ports", "[70000]" }, { "ports", "[19500,null]" },
    { "nccl_unique_id", NULL }, { "nccl_unique_id", "\"abc\"" },
    { "nccl_unique_id", "5" }, { "nccl_unique_id", "false" },
    { "members", "[]" }, { "members", "{}" },
    { "local_world", "0" }, { "local_world", "3" }, { "local_rank", "1" },
    { "local_rank", NULL },
    { "group_world", "0" }, { "group_world", "3" }, { "group_rank", "2" },
    { "group_rank", NULL }, { "group_rank", "\"1\"" },
    { "named_ports", "5" }, { "named_ports", "{}" },
    { "named_ports", "{\"store\":19500,\"dp_rpc\":19501}" },
    { "named_ports", "{\"store\":19501,\"dp_rpc\":19502,\"probe\":[19534,19534]}" },
    { "named_ports", "{\"store\":19500,\"dp_rpc\":19500,\"probe\":[19534,19534]}" },
    { "named_ports", "{\"store\":19500,\"dp_rpc\":0,\"probe\":[19534,19534]}" },
    { "named_ports", "{\"store\":19500,\"dp_rpc\":19501,\"probe\":[19531,19534]}" },
    { "named_ports", "{\"store\":19500,\"dp_rpc\":19501,\"probe\":[19534,19535]}" },
    { "named_ports", "{\"store\":19500,\"dp_rpc\":19501,\"probe\":[19534,19533]}" },
    { "named_ports", "{\"store\":19500,\"dp_rpc\":19501,\"probe\":[19534]}" },
    { "named_ports", "{\"store\":19500,\"dp_rpc\":\"19501\",\"probe\":[19534,19534]}" },
    /* The API port: in this rank's plan, outside its probe pool. */
    { "named_ports", "{\"store\":19500,\"dp_rpc\":19501,\"api\":19534,\"probe\":[19534,19534]}" },
    { "named_ports", "{\"store\":19500,\"dp_rpc\":19501,\"api\":19535,\"probe\":[19534,19534]}" },
    { "named_ports", "{\"store\":19500,\"dp_rpc\":19501,\"api\":\"19533\",\"probe\":[19534,19534]}" },
    { "named_ports", "{\"store\":19500,\"dp_rpc\":19501,\"api\":0,\"probe\":[19534,19534]}" },
    { "members", "[{\"rank\":0,\"host\":\"h\",\"node\":\"n\"}]" },
    { "members", "[{\"rank\":0,\"host\":\"h\",\"node\":\"n\"},"
                 "{\"rank\":0,\"host\":\"h\",\"node\":\"n\"}]" },
    { "members", "[{\"rank\":0,\"host\":\"h\",\"node\":\"n\"},{\"rank\":1,\"node\":\"n\"}]" },
    { "members", "[{\"rank\":0,\"host\":\"h\",\"node\":\"n\"},"
                 "{\"rank\":1,\"host\":5,\"node\":\"n\"}]" },
    { "members", "[{\"rank\":0,\"host\":\"h\",\"node\":\"n\"},"
                 "{\"rank\":2,\"host\":\"h\",\"node\":\"n\"}]" },
    { "members", "[{\"rank\":0,\"host\":\"h\",\"node\":\"n\"},\"x\"]" },
};

START_TEST(test_malformed_field)
{
    const s_bad_t *bad = &s_bad[_i];
    char *text = s_variant(bad->field, bad->value);
    rdzv_assignment_t *a = rdzv_assignment_from_json(text);
    if (a)
        ck_abort_msg("accepted %s = %s", bad->field, bad->value ? bad->value : "(absent)");
    free(text);
}
END_TEST

/* An rdzvd that plans the API port (P+2 of this rank's plan): the getter,
 * RDZV_PORT_API, and vLLM's --port among the flags. */
START_TEST(test_api_port)
{
    char *text = s_variant("named_ports",
                           "{\"store\":19500,\"dp_rpc\":19501,\"api\":19533,\"probe\":[19534,19534]}");
    rdzv_assignment_t *a = rdzv_assignment_from_json(text);
    free(text);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(rdzv_assignment_api_port(a), 19533);
    char *args = rdzv_assignment_vllm_args(a);
    ck_assert_str_eq(args, "--data-parallel-size 2 --data-parallel-rank 1 "
                     "--data-parallel-address 10.0.0.11 --data-parallel-rpc-port 19501 "
                     "--port 19533");
    free(args);
    char *env = rdzv_assignment_env(a);
    ck_assert_ptr_nonnull(strstr(env, "\nRDZV_PORT_DP_RPC=19501\nRDZV_PORT_API=19533\n"));
    free(env);
    rdzv_assignment_destroy(&a);
    /* Without "api" (an older rdzvd): no API port, no --port. */
    a = rdzv_assignment_from_json(s_valid);
    ck_assert_int_eq(rdzv_assignment_api_port(a), 0);
    env = rdzv_assignment_env(a);
    ck_assert_ptr_null(strstr(env, "RDZV_PORT_API"));
    ck_assert_ptr_null(strstr(env, "--port "));
    free(env);
    rdzv_assignment_destroy(&a);
    ck_assert_int_eq(rdzv_assignment_api_port(NULL), -1);
}
END_TEST

START_TEST(test_malformed_text)
{
    static const char *const texts[] = { "", "{", "[]", "null", "\"x\"", "42", "{}" };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        ck_assert_ptr_null(rdzv_assignment_from_json(texts[i]));
    ck_assert_ptr_null(rdzv_assignment_from_json(NULL));
}
END_TEST

START_TEST(test_env_lines)
{
    rdzv_assignment_t *a = rdzv_assignment_from_json(s_valid);
    char *env = rdzv_assignment_env(a);
    char expected[2048];
    snprintf(expected, sizeof expected,
             "RDZV_GROUP=llm\nRDZV_EPOCH=3\nRDZV_RANK=1\nRDZV_WORLD=2\n"
             "RDZV_MASTER_ADDR=10.0.0.11\nRDZV_MASTER_PORT=19500\n"
             "RDZV_PORTS=19532,19533,19534\n"
             "RDZV_PORT_STORE=19500\nRDZV_PORT_DP_RPC=19501\nRDZV_PORT_PROBE=19534-19534\n"
             "RDZV_NCCL_UNIQUE_ID=%s\nRDZV_NCCL_UNIQUE_IDS=%s\n"
             "RDZV_LOCAL_RANK=0\nRDZV_LOCAL_WORLD=1\n"
             "MASTER_ADDR=10.0.0.11\nMASTER_PORT=19500\nRANK=1\nWORLD_SIZE=2\n"
             "LOCAL_RANK=0\nLOCAL_WORLD_SIZE=1\nGROUP_RANK=1\nGROUP_WORLD_SIZE=2\n"
             "VLLM_PORT=19534\nVLLM_DP_RANK=1\nVLLM_DP_SIZE=2\n"
             "VLLM_DP_MASTER_IP=10.0.0.11\nVLLM_DP_MASTER_PORT=19500\n"
             "VLLM_DP_RANK_LOCAL=0\nVLLM_DP_SIZE_LOCAL=1\n"
             "RDZV_VLLM_ARGS='--data-parallel-size 2 --data-parallel-rank 1 "
             "--data-parallel-address 10.0.0.11 --data-parallel-rpc-port 19501'\n",
             s_nccl, s_nccl);
    ck_assert_str_eq(env, expected);
    free(env);
    rdzv_assignment_destroy(&a);
}
END_TEST

/* An even epoch of 32-port plans: the store is rank 0's P+3, and
 * VLLM_DP_MASTER_PORT stays P, the base of the ten ports vLLM's scans
 * skip (a scan from VLLM_PORT, P+10, would otherwise start inside them). */
START_TEST(test_env_even_epoch)
{
    cJSON *root = cJSON_Parse(s_valid);
    cJSON_ReplaceItemInObjectCaseSensitive(root, "epoch", cJSON_CreateNumber(2));
    int ports[32];
    for (int i = 0; i < 32; i++)
        ports[i] = 19532 + i;
    cJSON_ReplaceItemInObjectCaseSensitive(root, "ports", cJSON_CreateIntArray(ports, 32));
    cJSON_ReplaceItemInObjectCaseSensitive(root, "master_port", cJSON_CreateNumber(19503));
    cJSON *named = cJSON_GetObjectItemCaseSensitive(root, "named_ports");
    cJSON_ReplaceItemInObjectCaseSensitive(named, "store", cJSON_CreateNumber(19503));
    cJSON_ReplaceItemInObjectCaseSensitive(named, "dp_rpc", cJSON_CreateNumber(19504));
    int probe[2] = { 19542, 19563 };
    cJSON_ReplaceItemInObjectCaseSensitive(named, "probe", cJSON_CreateIntArray(probe, 2));
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    rdzv_assignment_t *a = rdzv_assignment_from_json(text);
    free(text);
    ck_assert_ptr_nonnull(a);
    char *env = rdzv_assignment_env(a);
    ck_assert_ptr_nonnull(strstr(env, "\nMASTER_PORT=19503\n"));
    ck_assert_ptr_nonnull(strstr(env, "\nVLLM_DP_MASTER_PORT=19500\n"));
    ck_assert_ptr_nonnull(strstr(env, "\nVLLM_PORT=19542\n"));
    free(env);
    rdzv_assignment_destroy(&a);
}
END_TEST

/* An rdzvd that names no ports and sends no local ranks: the layout it
 * had (VLLM_PORT the plan's first port), and nothing is made up. */
START_TEST(test_env_older_server)
{
    cJSON *root = cJSON_Parse(s_valid);
    static const char *const newer[] = { "named_ports", "local_rank", "local_world",
                                         "group_rank", "group_world" };
    for (size_t i = 0; i < sizeof newer / sizeof newer[0]; i++)
        cJSON_DeleteItemFromObjectCaseSensitive(root, newer[i]);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    rdzv_assignment_t *a = rdzv_assignment_from_json(text);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(rdzv_assignment_dp_rpc_port(a), 0);
    ck_assert_int_eq(rdzv_assignment_store_port(a), 19500);
    ck_assert_ptr_null(rdzv_assignment_vllm_args(a));
    char *env = rdzv_assignment_env(a);
    ck_assert_ptr_nonnull(strstr(env, "\nVLLM_PORT=19532\n"));
    ck_assert_ptr_nonnull(strstr(env, "\nRDZV_PORT_PROBE=19532-19534\n"));
    static const char *const absent[] = { "RDZV_PORT_DP_RPC=", "RDZV_VLLM_ARGS=", "LOCAL_RANK=",
                                          "GROUP_RANK=", "VLLM_DP_RANK_LOCAL=" };
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
        ck_assert_msg(!strstr(env, absent[i]), "%s in an older rdzvd's env", absent[i]);
    free(env);
    rdzv_assignment_destroy(&a);
    free(text);
}
END_TEST

/* A host a shell would split or expand is quoted, in the env line and in
 * the vLLM flags. */
START_TEST(test_env_quoting)
{
    char *text = s_variant("master_addr", "\"it's $HOME\"");
    rdzv_assignment_t *a = rdzv_assignment_from_json(text);
    ck_assert_ptr_nonnull(a);
    char *env = rdzv_assignment_env(a);
    ck_assert_ptr_nonnull(strstr(env, "\nMASTER_ADDR='it'\\''s $HOME'\n"));
    char *args = rdzv_assignment_vllm_args(a);
    ck_assert_ptr_nonnull(strstr(args, "--data-parallel-address 'it'\\''s $HOME' "));
    free(args);
    free(env);
    rdzv_assignment_destroy(&a);
    free(text);
}
END_TEST

START_TEST(test_null_safe)
{
    ck_assert_ptr_null(rdzv_assignment_group(NULL));
    ck_assert_int_eq(rdzv_assignment_rank(NULL), -1);
    ck_assert_uint_eq(rdzv_assignment_port_count(NULL), 0);
    ck_assert_ptr_null(rdzv_assignment_env(NULL));
    rdzv_assignment_destroy(NULL);
}
END_TEST

static Suite *s_suite(void)
{
    Suite *s = suite_create("assignment");
    TCase *tc = tcase_create("from_json");
    tcase_add_checked_fixture(tc, s_setup, NULL);
    tcase_add_test(tc, test_valid_getters);
    tcase_add_test(tc, test_nccl_bytes);
    tcase_add_test(tc, test_nccl_null);
    tcase_add_test(tc, test_json_roundtrip);
    tcase_add_loop_test(tc, test_malformed_field, 0, (int) (sizeof s_bad / sizeof s_bad[0]));
    tcase_add_test(tc, test_malformed_text);
    tcase_add_test(tc, test_api_port);
    tcase_add_test(tc, test_null_safe);
    suite_add_tcase(s, tc);
    TCase *env = tcase_create("env");
    tcase_add_checked_fixture(env, s_setup, NULL);
    tcase_add_test(env, test_env_lines);
    tcase_add_test(env, test_env_even_epoch);
    tcase_add_test(env, test_env_older_server);
    tcase_add_test(env, test_env_quoting);
    suite_add_tcase(s, env);
    return s;
}

int main(void)
{
    return rdzv_check_run(s_suite());
}
