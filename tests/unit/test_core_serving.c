/* What the core makes of its ranks' health (docs/protocol.md, "heartbeat"
 * and "status"): the group's state, the counts /metrics shows, each rank's
 * serving field, and that none of it is journaled. */
#include "check_run.h"
#include <check.h>
#include <string.h>

#include "core_fixture.h"

/* One heartbeat of rank of group g, session s<rank>, epoch 1; serving is
 * the JSON text of the field, or NULL to leave it out. */
static void s_beat(int who, int rank, const char *serving)
{
    if (serving)
        fx_send(who, "{\"v\":1,\"op\":\"heartbeat\",\"group\":\"g\",\"rank\":%d,"
                "\"session\":\"s%d\",\"epoch\":1,\"serving\":%s}", rank, rank, serving);
    else
        fx_send(who, "{\"v\":1,\"op\":\"heartbeat\",\"group\":\"g\",\"rank\":%d,"
                "\"session\":\"s%d\",\"epoch\":1}", rank, rank);
}

/* Group g's status object (the caller's to free). */
static cJSON *s_status(void)
{
    cJSON *all = rdzv_core_status_json(core, "g", now);
    cJSON *g = cJSON_DetachItemFromArray(all, 0);
    cJSON_Delete(all);
    ck_assert_ptr_nonnull(g);
    return g;
}

static void s_expect(const char *state, int live, int serving, const char *not_serving)
{
    cJSON *g = s_status();
    char *down = cJSON_PrintUnformatted(cJSON_GetObjectItem(g, "not_serving"));
    ck_assert_str_eq(cJSON_GetObjectItem(g, "state")->valuestring, state);
    ck_assert_int_eq(cJSON_GetObjectItem(g, "live_count")->valueint, live);
    ck_assert_int_eq(cJSON_GetObjectItem(g, "serving_count")->valueint, serving);
    ck_assert_str_eq(down, not_serving);
    free(down);
    cJSON_Delete(g);
}

static const cJSON *s_member(const cJSON *g, int rank)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItem(g, "members"), rank);
}

static void s_form(void)
{
    fx_join(0, "g", 2, 0, "n0", "s0");
    s_expect("forming", 0, 0, "[]");
    fx_join(1, "g", 2, 1, "n1", "s1");
    fx_clear_replies();
}

START_TEST(test_states)
{
    s_form();
    s_expect("complete", 2, 0, "[0,1]");          /* assigned, engines starting */
    s_beat(2, 0, "true");
    s_expect("complete", 2, 1, "[1]");
    s_beat(3, 1, "false");                         /* not yet up: still starting */
    s_expect("complete", 2, 1, "[1]");
    s_beat(4, 1, "true");
    s_expect("serving", 2, 2, "[]");
    cJSON *g = s_status();
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(s_member(g, 1), "serving")));
    cJSON_Delete(g);
    s_beat(5, 1, NULL);                            /* says nothing: keeps what it said */
    s_expect("serving", 2, 2, "[]");
    s_beat(6, 1, "false");                         /* served, then stopped answering */
    s_expect("degraded", 2, 1, "[1]");
    s_beat(7, 1, "true");
    s_expect("serving", 2, 2, "[]");
    now += 20000;                                  /* past --dead-after 15 s */
    s_beat(8, 0, "true");
    s_expect("degraded", 1, 1, "[1]");             /* rank 1 went silent */
    fx_clear_replies();
}
END_TEST

/* A heartbeat's serving must be a boolean; a refused one changes nothing. */
START_TEST(test_bad_serving)
{
    s_form();
    s_beat(2, 0, "true");
    static const char *const bad[] = { "\"yes\"", "1", "null", "[]" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s_beat(3, 0, bad[i]);
        ck_assert_str_eq(fx_error(3), RDZV_E_BAD_REQUEST);
    }
    s_expect("complete", 2, 1, "[1]");
    /* Another session's heartbeat says nothing of this rank's engine. */
    fx_send(4, "{\"v\":1,\"op\":\"heartbeat\",\"group\":\"g\",\"rank\":1,"
            "\"session\":\"other\",\"epoch\":1,\"serving\":true}");
    ck_assert_str_eq(fx_error(4), RDZV_E_NOT_FOUND);
    s_expect("complete", 2, 1, "[1]");
    fx_clear_replies();
}
END_TEST

/* Soft state: a restart forgets what the heartbeats said (the journal
 * holds none of it), and the next heartbeats say it again. */
START_TEST(test_not_journaled)
{
    s_form();
    s_beat(2, 0, "true");
    s_beat(3, 1, "true");
    s_expect("serving", 2, 2, "[]");
    fx_reopen_cfg(fx_config());
    cJSON *g = s_status();
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(s_member(g, 0), "serving")));
    ck_assert_str_eq(cJSON_GetObjectItem(g, "state")->valuestring, "complete");
    cJSON_Delete(g);
    s_beat(4, 0, "true");
    s_beat(5, 1, "true");
    s_expect("serving", 2, 2, "[]");
    fx_clear_replies();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("core_serving");
    TCase *tc = fx_tcase(s, "serving");
    tcase_add_test(tc, test_states);
    tcase_add_test(tc, test_bad_serving);
    tcase_add_test(tc, test_not_journaled);
    return rdzv_check_run(s);
}
