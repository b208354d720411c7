/* rdzv group resize in the core (docs/protocol.md, "group_resize"): a formed
 * group moves to its next epoch with another world; the ranks that stay
 * keep their plans and rejoin with the world they were started with, new
 * ranks join with the new one, ranks past it leave and their plans go
 * back; a restart replays it to the same state; bad resizes change
 * nothing. */
#include "check_run.h"
#include <check.h>
#include <string.h>
#include <unistd.h>

#include "core_fixture.h"

static void s_resize(int who, const char *group, int world)
{
    fx_send(who, "{\"v\":1,\"id\":%d,\"op\":\"group_resize\",\"group\":\"%s\",\"world\":%d}", who,
            group, world);
}

/* Group g's status object (the caller frees it). */
static cJSON *s_status(void)
{
    cJSON *all = rdzv_core_status_json(core, "g", now);
    cJSON *g = cJSON_DetachItemFromArray(all, 0);
    cJSON_Delete(all);
    ck_assert_ptr_nonnull(g);
    return g;
}

/* The first port of rank's plan in g, -1 without one. */
static int s_plan(int rank)
{
    cJSON *g = s_status();
    const cJSON *m, *found = NULL;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(g, "members"))
        if (cJSON_GetObjectItem(m, "rank")->valueint == rank)
            found = cJSON_GetObjectItem(m, "ports");
    int start = cJSON_IsArray(found) ? found->child->valueint : -1;
    cJSON_Delete(g);
    return start;
}

static int s_num(const char *field)
{
    cJSON *g = s_status();
    int v = cJSON_GetObjectItem(g, field)->valueint;
    cJSON_Delete(g);
    return v;
}

static bool s_complete(void)
{
    cJSON *g = s_status();
    bool complete = cJSON_IsTrue(cJSON_GetObjectItem(g, "complete"));
    cJSON_Delete(g);
    return complete;
}

START_TEST(test_grow_then_shrink)
{
    fx_join(0, "g", 2, 0, "n0", "s0");
    fx_join(1, "g", 2, 1, "n0", "s1");
    fx_collect();
    int p0 = s_plan(0), p1 = s_plan(1);
    ck_assert_int_ge(p0, 0);
    fx_clear_replies();
    s_resize(2, "g", 3);
    ck_assert_int_eq(fx_field(replies[2], "epoch"), 2);
    ck_assert_int_eq(s_num("world"), 3);
    ck_assert(!s_complete());
    /* The old ranks' heartbeats of epoch 1: stale_epoch; they rejoin with
     * the world they were started with and keep their plans. */
    fx_send(3, "{\"v\":1,\"op\":\"heartbeat\",\"group\":\"g\",\"rank\":0,\"session\":\"s0\","
            "\"epoch\":1,\"serving\":false}");
    ck_assert_str_eq(fx_error(3), RDZV_E_STALE_EPOCH);
    /* ... and "not serving" counts even so (a draining agent's). */
    cJSON *st = s_status();
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(
        cJSON_GetArrayItem(cJSON_GetObjectItem(st, "members"), 0), "serving")));
    cJSON_Delete(st);
    fx_join(4, "g", 2, 0, "n0", "s0");
    fx_join(5, "g", 2, 1, "n0", "s1");
    ck_assert_ptr_null(replies[4]);               /* waiting for rank 2 */
    fx_join(6, "g", 3, 2, "n0", "s2");
    const cJSON *a = fx_assignment(4);
    ck_assert_int_eq(fx_field(a, "world"), 3);
    ck_assert_int_eq(fx_field(a, "epoch"), 2);
    ck_assert_int_eq(s_plan(0), p0);
    ck_assert_int_eq(s_plan(1), p1);
    int p2 = s_plan(2);
    ck_assert(p2 >= 0 && p2 != p0 && p2 != p1);
    fx_clear_replies();

    s_resize(7, "g", 2);
    ck_assert_int_eq(fx_field(replies[7], "epoch"), 3);
    /* Rank 2 is no longer a member: its heartbeat says so, and its plan
     * went back (the next rank of another group on n0 may take it). */
    fx_send(8, "{\"v\":1,\"op\":\"heartbeat\",\"group\":\"g\",\"rank\":2,\"session\":\"s2\","
            "\"epoch\":2}");
    ck_assert_str_eq(fx_error(8), RDZV_E_NOT_FOUND);
    ck_assert_int_eq(s_plan(2), -1);
    fx_join(9, "g", 3, 0, "n0", "s0");
    fx_join(10, "g", 3, 1, "n0", "s1");
    ck_assert_int_eq(fx_field(fx_assignment(9), "world"), 2);
    ck_assert_int_eq(s_plan(0), p0);
    fx_join(11, "h", 1, 0, "n0", "t0");
    ck_assert_int_eq(fx_field(fx_assignment(11), "master_port"), p2);
    fx_clear_replies();

    /* A restart replays the resizes to the same state. */
    fx_reopen_cfg(fx_config());
    ck_assert_int_eq(s_num("world"), 2);
    ck_assert_int_eq(s_num("epoch"), 3);
    ck_assert_int_eq(s_plan(0), p0);
    ck_assert_int_eq(s_plan(2), -1);
    fx_clear_replies();
}
END_TEST

/* A named port of assignment a. */
static int s_named(const cJSON *a, const char *role)
{
    return cJSON_GetObjectItem(cJSON_GetObjectItem(a, "named_ports"), role)->valueint;
}

/* The group's store and DP RPC ports alternate between P, P+1 and P+3,
 * P+4 of rank 0's plan from one epoch to the next, so a resized epoch
 * binds them while the last epoch's are still held; a rank's own api port
 * stays. Plans too short for that keep P and P+1. */
START_TEST(test_store_moves_between_epochs)
{
    fx_join(0, "g", 2, 0, "n0", "s0");
    fx_join(1, "g", 2, 1, "n0", "s1");
    const cJSON *a = fx_assignment(0);
    int p0 = s_plan(0);
    ck_assert_int_eq(s_named(a, "store"), p0);
    ck_assert_int_eq(s_named(a, "dp_rpc"), p0 + 1);
    ck_assert_int_eq(fx_field(a, "master_port"), p0);
    fx_clear_replies();
    s_resize(2, "g", 1);
    fx_join(3, "g", 2, 0, "n0", "s0");
    a = fx_assignment(3);
    ck_assert_int_eq(fx_field(a, "epoch"), 2);
    ck_assert_int_eq(s_named(a, "store"), p0 + 3);
    ck_assert_int_eq(s_named(a, "dp_rpc"), p0 + 4);
    ck_assert_int_eq(fx_field(a, "master_port"), p0 + 3);
    ck_assert_int_eq(s_named(a, "api"), p0 + 2);
    fx_clear_replies();
    s_resize(4, "g", 2);
    fx_join(5, "g", 2, 0, "n0", "s0");
    fx_join(6, "g", 2, 1, "n0", "s7");
    a = fx_assignment(6);
    ck_assert_int_eq(fx_field(a, "epoch"), 3);
    ck_assert_int_eq(s_named(a, "store"), p0);
    ck_assert_int_eq(fx_field(a, "master_port"), p0);
    fx_clear_replies();
    ck_assert_int_eq(rdzv_role_shift(11, 2), 0);
    ck_assert_int_eq(rdzv_role_shift(12, 2), RDZV_ROLE_ALT_SHIFT);
    ck_assert_int_eq(rdzv_role_shift(12, 3), 0);
}
END_TEST

/* The epoch a resize made survives a compaction and a restart as that
 * resize: a rank whose waiting join went with a restarted rdzvd while the
 * epoch formed resumes with the world it was started with, and is still
 * taken once the epoch has formed. */
START_TEST(test_resumed_old_world_after_compaction)
{
    rdzv_config_t cfg = fx_config();
    cfg.compact_bytes = 4096;
    fx_reopen_cfg(cfg);
    fx_join(0, "g", 2, 0, "n0", "s0");
    fx_join(1, "g", 2, 1, "n0", "s1");
    fx_clear_replies();
    s_resize(2, "g", 3);
    fx_join(3, "g", 2, 0, "n0", "s0");
    fx_join(4, "g", 2, 1, "n0", "s1");
    fx_join(5, "g", 3, 2, "n0", "s2");
    ck_assert_int_eq(fx_field(fx_assignment(3), "epoch"), 2);
    fx_clear_replies();
    char big[1501];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    for (int i = 0; i < 8 && core->metrics.compactions == 0; i++) {
        fx_send(6, "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":2,\"key\":\"k%d\","
                "\"value\":\"%s\"}", i, big);
        for (int k = 0; core->compaction && k < 5000; k++) {
            usleep(1000);
            ck_assert_int_eq(drive_commit(core, now, NULL, NULL), 0);
        }
    }
    ck_assert_uint_ge(core->metrics.compactions, 1);
    fx_reopen_cfg(cfg);
    fx_join(7, "g", 2, 0, "n0", "s0");
    const cJSON *a = fx_assignment(7);
    ck_assert_int_eq(fx_field(a, "epoch"), 2);
    ck_assert_int_eq(fx_field(a, "world"), 3);
    fx_clear_replies();
}
END_TEST

static void s_resize_fresh(int who, const char *group, int world)
{
    fx_send(who, "{\"v\":1,\"id\":%d,\"op\":\"group_resize\",\"group\":\"%s\",\"world\":%d,"
            "\"fresh\":true}", who, group, world);
}

/* A forming epoch closes at the ranks 0..N-1 that joined it: they get
 * their assignments at once, of world N, in the same epoch; a close that
 * would leave a hole, or count ranks that did not join, is refused. */
START_TEST(test_close_at_the_ranks_that_joined)
{
    fx_join(0, "g", 3, 0, "n0", "s0");
    fx_join(1, "g", 3, 2, "n0", "s2");
    s_resize(2, "g", 2);                          /* ranks 0 and 2: a hole */
    ck_assert_str_eq(fx_error(2), RDZV_E_BAD_REQUEST);
    s_resize(3, "g", 1);                          /* two joined, not one */
    ck_assert_str_eq(fx_error(3), RDZV_E_BAD_REQUEST);
    ck_assert_ptr_null(replies[0]);
    ck_assert_int_eq(s_num("world"), 3);
    fx_clear_replies();

    fx_join(0, "h", 3, 0, "n0", "t0");
    fx_join(1, "h", 3, 1, "n1", "t1");
    ck_assert_ptr_null(replies[0]);
    fx_send(2, "{\"v\":1,\"id\":2,\"op\":\"group_resize\",\"group\":\"h\",\"world\":2}");
    ck_assert_int_eq(fx_field(replies[2], "epoch"), 1);
    for (int who = 0; who < 2; who++) {
        const cJSON *a = fx_assignment(who);
        ck_assert_int_eq(fx_field(a, "world"), 2);
        ck_assert_int_eq(fx_field(a, "epoch"), 1);
        ck_assert_int_eq(fx_field(a, "rank"), who);
    }
    fx_clear_replies();
    /* A rank whose join went with a restart asks again with the world it
     * started with, and is answered; a restart replays the close. */
    fx_join(3, "h", 3, 1, "n1", "t1");
    ck_assert_int_eq(fx_field(fx_assignment(3), "world"), 2);
    fx_clear_replies();
    fx_reopen_cfg(fx_config());
    fx_join(4, "h", 3, 0, "n0", "t0");
    ck_assert_int_eq(fx_field(fx_assignment(4), "world"), 2);
    ck_assert_int_eq(fx_field(fx_assignment(4), "epoch"), 1);
    fx_clear_replies();
}
END_TEST

/* A fresh resize starts a round no rank keeps its place in: every member
 * goes (its heartbeat: not_found) with its plan, and the ranks join anew,
 * first come first served. */
START_TEST(test_fresh_round)
{
    fx_join(0, "g", 2, 0, "n0", "s0");
    fx_join(1, "g", 2, 1, "n1", "s1");
    fx_collect();
    fx_clear_replies();
    s_resize_fresh(2, "g", 2);                    /* the same world: a new round still */
    ck_assert_int_eq(fx_field(replies[2], "epoch"), 2);
    ck_assert_int_eq(s_plan(0), -1);
    ck_assert_int_eq(s_plan(1), -1);
    fx_send(3, "{\"v\":1,\"op\":\"heartbeat\",\"group\":\"g\",\"rank\":0,\"session\":\"s0\","
            "\"epoch\":1}");
    ck_assert_str_eq(fx_error(3), RDZV_E_NOT_FOUND);
    s_resize_fresh(4, "g", 3);                    /* forming: refused, ordered */
    ck_assert_str_eq(fx_error(4), RDZV_E_BAD_REQUEST);
    fx_clear_replies();
    /* The node that was rank 1 comes first this time and takes rank 0. */
    fx_join(5, "g", 2, 0, "n1", "u1");
    fx_join(6, "g", 2, 1, "n0", "u0");
    ck_assert_int_eq(fx_field(fx_assignment(5), "epoch"), 2);
    ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(fx_assignment(6), "master_addr")),
                     cJSON_GetStringValue(cJSON_GetObjectItem(fx_assignment(5), "master_addr")));
    fx_clear_replies();
    fx_reopen_cfg(fx_config());
    ck_assert_int_eq(s_num("epoch"), 2);
    ck_assert(s_complete());
    fx_clear_replies();
}
END_TEST

/* To its own world: nothing changes. To 0, past --max-world, of a forming
 * group or of none: refused, nothing changes. */
START_TEST(test_refusals)
{
    fx_join(0, "g", 2, 0, "n0", "s0");
    s_resize(1, "g", 3);
    ck_assert_str_eq(fx_error(1), RDZV_E_BAD_REQUEST);           /* forming */
    fx_join(2, "g", 2, 1, "n0", "s1");
    fx_collect();
    fx_clear_replies();
    s_resize(3, "g", 2);
    ck_assert_int_eq(fx_field(replies[3], "epoch"), 1);
    s_resize(4, "g", 0);
    ck_assert_str_eq(fx_error(4), RDZV_E_BAD_WORLD);
    s_resize(5, "g", 1 << 30);
    ck_assert_str_eq(fx_error(5), RDZV_E_BAD_WORLD);
    /* A process started with another world resuming its session in the
     * formed group: that world's, refused. */
    fx_join(10, "g", 8, 0, "n0", "s0");
    ck_assert_str_eq(fx_error(10), RDZV_E_WORLD_MISMATCH);
    s_resize(6, "nosuch", 2);
    ck_assert_str_eq(fx_error(6), RDZV_E_NOT_FOUND);
    fx_send(7, "{\"v\":1,\"op\":\"group_resize\",\"group\":\"g\",\"world\":\"3\"}");
    ck_assert_str_eq(fx_error(7), RDZV_E_BAD_REQUEST);
    ck_assert_int_eq(s_num("world"), 2);
    ck_assert_int_eq(s_num("epoch"), 1);
    ck_assert(s_complete());
    /* Two resizes in a row: the second sees the first's epoch, forming. */
    s_resize(8, "g", 3);
    s_resize(9, "g", 4);
    ck_assert_int_eq(fx_field(replies[8], "epoch"), 2);
    ck_assert_str_eq(fx_error(9), RDZV_E_BAD_REQUEST);
    ck_assert_int_eq(s_num("world"), 3);
    fx_clear_replies();
}
END_TEST

/* A rank that moved node holds a block on both; a shrink past it frees
 * both. A block left behind belonged to a rank past the world: the next
 * compaction would write it in a "plans" record that does not apply, and
 * the journal would not load again. */
START_TEST(test_shrink_after_a_move)
{
    fx_join(0, "g", 3, 0, "n0", "s0");
    fx_join(1, "g", 3, 1, "n0", "s1");
    fx_join(2, "g", 3, 2, "n0", "s2");
    fx_collect();
    int p2 = s_plan(2);
    fx_clear_replies();
    /* Rank 2 comes back on another node (its Pod rescheduled). */
    fx_send(3, "{\"v\":1,\"id\":3,\"op\":\"join\",\"group\":\"g\",\"world\":3,\"rank\":2,"
            "\"host\":\"10.0.0.2\",\"node\":\"n1\",\"session\":\"s2b\",\"timeout_ms\":5000,"
            "\"replace\":true}");
    fx_join(4, "g", 3, 0, "n0", "s0");
    fx_join(5, "g", 3, 1, "n0", "s1");
    ck_assert_int_eq(fx_field(fx_assignment(3), "epoch"), 2);
    fx_clear_replies();
    s_resize(6, "g", 2);
    ck_assert_int_eq(fx_field(replies[6], "epoch"), 3);
    fx_join(7, "g", 3, 0, "n0", "s0");
    fx_join(8, "g", 3, 1, "n0", "s1");
    ck_assert_ptr_nonnull(fx_assignment(7));
    /* Rank 2's old block on n0 is free again: the next group there gets it. */
    fx_join(9, "h", 1, 0, "n0", "t0");
    ck_assert_int_eq(fx_field(fx_assignment(9), "master_port"), p2);
    fx_clear_replies();
    fx_reopen_cfg(fx_config());
    ck_assert_int_eq(s_num("world"), 2);
    ck_assert_int_eq(s_plan(2), -1);
    fx_clear_replies();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("core_resize");
    TCase *tc = fx_tcase(s, "resize");
    tcase_add_test(tc, test_grow_then_shrink);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_store_moves_between_epochs);
    tcase_add_test(tc, test_resumed_old_world_after_compaction);
    tcase_add_test(tc, test_close_at_the_ranks_that_joined);
    tcase_add_test(tc, test_fresh_round);
    tcase_add_test(tc, test_shrink_after_a_move);
    return rdzv_check_run(s);
}
