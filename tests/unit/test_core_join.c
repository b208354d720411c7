/* The core's joins: the barrier that holds ranks until the world has
 * joined and releases them with their assignments, the port blocks each rank
 * gets, and the groups status reports and delete removes. Each test is one
 * rule of docs/protocol.md. */
#include "check_run.h"
#include <check.h>

#include "core_fixture.h"

START_TEST(test_barrier_and_assignment)
{
    for (int r = 0; r < 3; r++) {
        fx_join(r, "g", 4, r, "pod", "s");
        ck_assert_ptr_null(replies[r]);       /* held until all have joined */
    }
    fx_join(3, "g", 4, 3, "pod", "s");
    for (int r = 0; r < 4; r++) {
        const cJSON *a = fx_assignment(r);
        ck_assert_int_eq(fx_field(a, "rank"), r);
        ck_assert_int_eq(fx_field(a, "epoch"), 1);
        ck_assert_int_eq(fx_field(a, "master_port"), 19500);
        ck_assert_str_eq(cJSON_GetObjectItem(a, "master_addr")->valuestring, "10.0.0.0");
        const cJSON *ports = cJSON_GetObjectItem(a, "ports");
        ck_assert_int_eq(cJSON_GetArraySize(ports), 32);
        ck_assert_int_eq((int) cJSON_GetArrayItem(ports, 0)->valuedouble, 19500 + 32 * r);
        ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(a, "members")), 4);
        ck_assert(cJSON_IsNull(cJSON_GetObjectItem(a, "nccl_unique_id")));
    }
    fx_clear_replies();
}
END_TEST

/* Every assignment says where its rank stands on its node, O(1) in the
 * world: the release and a later resume agree. */
START_TEST(test_local_ranks)
{
    static const char *const nodes[] = { "n0", "n1", "n0", "n0" };
    static const int want_rank[] = { 0, 0, 1, 2 }, want_world[] = { 3, 1, 3, 3 };
    static const int want_group[] = { 0, 1, 0, 0 };
    for (int r = 0; r < 4; r++)
        fx_join(r, "g", 4, r, nodes[r], r == 1 ? "b" : "s");
    for (int pass = 0; pass < 2; pass++) {
        for (int r = 0; r < 4; r++) {
            const cJSON *a = fx_assignment(r);
            ck_assert_int_eq(fx_field(a, "local_rank"), want_rank[r]);
            ck_assert_int_eq(fx_field(a, "local_world"), want_world[r]);
            ck_assert_int_eq(fx_field(a, "group_rank"), want_group[r]);
            ck_assert_int_eq(fx_field(a, "group_world"), 2);
        }
        fx_clear_replies();
        for (int r = 0; r < 4; r++)          /* resumes: the same answers */
            fx_join(r, "g", 4, r, nodes[r], r == 1 ? "b" : "s");
    }
    fx_clear_replies();
}
END_TEST

START_TEST(test_bad_input_changes_nothing)
{
    fx_join(0, "g", 2, 0, "n", "a");
    uint64_t size = rdzv_journal_size(core->journal);
    static const char *bad[] = {
        "{\"v\":1,\"op\":\"join\",\"group\":\"g\",\"world\":3,\"rank\":1,\"host\":\"h\",\"node\":\"n\",\"session\":\"x\"}",
        "{\"v\":1,\"op\":\"join\",\"group\":\"g\",\"world\":2,\"rank\":2,\"host\":\"h\",\"node\":\"n\",\"session\":\"x\"}",
        "{\"v\":1,\"op\":\"join\",\"group\":\"g\",\"world\":2,\"rank\":1,\"host\":5,\"node\":\"n\",\"session\":\"x\"}",
        "{\"v\":1,\"op\":\"kv_put\",\"group\":\"nope\",\"epoch\":1,\"key\":\"k\",\"value\":\"v\"}",
        "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":7,\"key\":\"k\",\"value\":\"v\"}",
        "{\"v\":1,\"op\":\"group_delete\",\"group\":\"nope\"}",
        "garbage",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fx_send(9, "%s", bad[i]);
        ck_assert_ptr_nonnull(cJSON_GetObjectItem(replies[9], "error"));
    }
    ck_assert_uint_eq(rdzv_journal_size(core->journal), size);
    /* The waiting rank is still served. */
    fx_join(1, "g", 2, 1, "n", "b");
    ck_assert_int_eq(fx_field(fx_assignment(0), "rank"), 0);
    fx_clear_replies();
}
END_TEST

/* The roles sit where docs/concepts.md says: the store and DP RPC ports
 * at the start of rank 0's plan, each rank's probe pool from the tenth
 * port of its own plan; on one node no role is inside any rank's pool. */
START_TEST(test_named_ports)
{
    for (int r = 0; r < 4; r++)
        fx_join(r, "g", 4, r, r == 1 ? "n1" : "n0", "s");
    for (int pass = 0; pass < 2; pass++) {
        for (int r = 0; r < 4; r++) {
            const cJSON *a = fx_assignment(r);
            const cJSON *named = cJSON_GetObjectItem(a, "named_ports");
            const cJSON *ports = cJSON_GetObjectItem(a, "ports");
            int first = (int) cJSON_GetArrayItem(ports, 0)->valuedouble;
            int store = fx_field(named, "store"), rpc = fx_field(named, "dp_rpc");
            const cJSON *probe = cJSON_GetObjectItem(named, "probe");
            int lo = (int) cJSON_GetArrayItem(probe, 0)->valuedouble;
            int hi = (int) cJSON_GetArrayItem(probe, 1)->valuedouble;
            ck_assert_int_eq(store, 19500);
            ck_assert_int_eq(store, fx_field(a, "master_port"));
            ck_assert_int_eq(rpc, 19501);
            ck_assert_int_eq(lo, first + 10);
            ck_assert_int_eq(hi, first + 31);
            if (r != 1)        /* rank 0's node: the roles are never probed */
                ck_assert(store < lo && rpc < lo);
        }
        fx_clear_replies();
        for (int r = 0; r < 4; r++)          /* resumes: the same answers */
            fx_join(r, "g", 4, r, r == 1 ? "n1" : "n0", "s");
    }
    fx_clear_replies();
}
END_TEST

START_TEST(test_plans_do_not_depend_on_join_order)
{
    static const int order[] = { 3, 1, 0, 2 };
    for (int i = 0; i < 4; i++)
        fx_join(order[i], "g", 4, order[i], "pod", "s");
    for (int r = 0; r < 4; r++) {
        const cJSON *ports = cJSON_GetObjectItem(fx_assignment(r), "ports");
        ck_assert_int_eq((int) cJSON_GetArrayItem(ports, 0)->valuedouble, 19500 + 32 * r);
    }
    fx_clear_replies();
}
END_TEST

START_TEST(test_separate_nodes_share_numbers)
{
    const char *nodes[] = { "pod-0", "pod-1", "pod-2", "pod-3" };
    for (int r = 0; r < 4; r++)
        fx_join(r, "g", 4, r, nodes[r], "s");
    for (int r = 0; r < 4; r++)
        ck_assert_int_eq((int) cJSON_GetArrayItem(cJSON_GetObjectItem(fx_assignment(r), "ports"), 0)->valuedouble, 19500);
    fx_clear_replies();
}
END_TEST

START_TEST(test_two_groups_on_one_node_are_disjoint)
{
    fx_join(0, "a", 2, 0, "node", "s");
    fx_join(1, "a", 2, 1, "node", "s");
    fx_join(2, "b", 2, 0, "node", "s");
    fx_join(3, "b", 2, 1, "node", "s");
    int starts[4];
    for (int p = 0; p < 4; p++)
        starts[p] = (int) cJSON_GetArrayItem(cJSON_GetObjectItem(fx_assignment(p), "ports"), 0)->valuedouble;
    ck_assert_int_eq(starts[0], 19500);
    ck_assert_int_eq(starts[1], 19532);
    ck_assert_int_eq(starts[2], 19564);
    ck_assert_int_eq(starts[3], 19596);
    fx_clear_replies();
}
END_TEST

START_TEST(test_ports_exhausted)
{
    /* The range holds 8 blocks; a 9-rank group on one node cannot fit. */
    for (int r = 0; r < 9; r++)
        fx_join(r, "big", 9, r, "node", "s");
    for (int r = 0; r < 9; r++)
        ck_assert_str_eq(fx_error(r), RDZV_E_PORTS_EXHAUSTED);
    /* All or nothing: the eight blocks that fitted are not left behind. */
    ck_assert_int_eq(rdzv_plans_count(core->state.plans, "node"), 0);
    fx_clear_replies();
}
END_TEST

/* Two nodes of one host address are one network namespace: their plans
 * must not overlap, and when they do, status says so. Nodes of different
 * addresses reuse numbers freely. */
static void s_join_at(int who, const char *group, const char *host, const char *node)
{
    fx_send(who, "{\"v\":1,\"op\":\"join\",\"group\":\"%s\",\"world\":1,\"rank\":0,"
            "\"host\":\"%s\",\"node\":\"%s\",\"session\":\"s\"}", group, host, node);
}

static const cJSON *s_status_of(int who, const char *group)
{
    drive_tick(core, now);                           /* the check runs at the tick */
    fx_send(who, "{\"v\":1,\"op\":\"status\",\"group\":\"%s\"}", group);
    return cJSON_GetArrayItem(cJSON_GetObjectItem(replies[who], "groups"), 0);
}

START_TEST(test_overlapping_plans_on_one_host)
{
    s_join_at(1, "a", "10.1.0.1", "pod-a");
    s_join_at(2, "b", "10.1.0.2", "pod-b");          /* another address: fine */
    ck_assert_int_eq(fx_field(fx_assignment(1), "master_port"), 19500);
    ck_assert_int_eq(fx_field(fx_assignment(2), "master_port"), 19500);
    ck_assert_ptr_null(cJSON_GetObjectItem(s_status_of(5, "b"), "plan_overlaps"));
    s_join_at(3, "c", "10.1.0.1", "pod-c");          /* a's address, another node name */
    ck_assert_int_eq(fx_field(fx_assignment(3), "master_port"), 19500);
    const cJSON *o = cJSON_GetArrayItem(cJSON_GetObjectItem(s_status_of(5, "c"), "plan_overlaps"), 0);
    ck_assert_ptr_nonnull(o);
    ck_assert_str_eq(cJSON_GetObjectItem(o, "other_node")->valuestring, "pod-a");
    ck_assert_str_eq(cJSON_GetObjectItem(o, "other_group")->valuestring, "a");
    ck_assert_str_eq(cJSON_GetObjectItem(o, "host")->valuestring, "10.1.0.1");
    s_join_at(4, "d", "10.1.0.1", "pod-a");          /* the same node: a block of its own */
    ck_assert_int_eq(fx_field(fx_assignment(4), "master_port"), 19532);
    ck_assert_ptr_null(cJSON_GetObjectItem(s_status_of(5, "d"), "plan_overlaps"));
    fx_clear_replies();
}
END_TEST

START_TEST(test_status)
{
    fx_join(0, "g", 2, 0, "n", "a");
    fx_send(1, "{\"v\":1,\"op\":\"status\",\"group\":\"g\"}");
    const cJSON *g = cJSON_GetArrayItem(cJSON_GetObjectItem(replies[1], "groups"), 0);
    ck_assert_int_eq(fx_field(g, "world"), 2);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(g, "joined")), 1);
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(g, "complete")));
    fx_send(2, "{\"v\":1,\"op\":\"status\",\"group\":\"none\"}");
    ck_assert_str_eq(fx_error(2), RDZV_E_NOT_FOUND);
    fx_clear_replies();
}
END_TEST

START_TEST(test_delete_frees_plans_and_waiters)
{
    fx_join(0, "a", 2, 0, "node", "s");
    fx_join(1, "a", 2, 1, "node", "s");
    fx_join(2, "b", 2, 0, "node", "s");
    fx_send(3, "{\"v\":1,\"op\":\"group_delete\",\"group\":\"b\"}");
    ck_assert_str_eq(fx_error(2), RDZV_E_NOT_FOUND);
    fx_send(4, "{\"v\":1,\"op\":\"group_delete\",\"group\":\"a\"}");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[4], "ok")));
    ck_assert_int_eq(rdzv_plans_count(core->state.plans, "node"), 0);
    fx_clear_replies();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("core_join");
    TCase *release = fx_tcase(s, "release");
    tcase_add_test(release, test_barrier_and_assignment);
    tcase_add_test(release, test_local_ranks);
    tcase_add_test(release, test_bad_input_changes_nothing);
    TCase *ports = fx_tcase(s, "ports");
    tcase_add_test(ports, test_named_ports);
    tcase_add_test(ports, test_plans_do_not_depend_on_join_order);
    tcase_add_test(ports, test_separate_nodes_share_numbers);
    tcase_add_test(ports, test_two_groups_on_one_node_are_disjoint);
    tcase_add_test(ports, test_ports_exhausted);
    tcase_add_test(ports, test_overlapping_plans_on_one_host);
    TCase *groups = fx_tcase(s, "groups");
    tcase_add_test(groups, test_status);
    tcase_add_test(groups, test_delete_frees_plans_and_waiters);
    return rdzv_check_run(s);
}
