/* A group's router in the core (docs/protocol.md, "join"; docs/deployment.md,
 * "Routing"): a join names it, rdzvd records it only when --router-allow
 * lets it, the latest join's router is the group's, it survives a restart
 * and a compaction (journaled), and what the reconciler reports of it
 * (registered, draining, the last error) is soft state. */
#include "check_run.h"
#include <check.h>
#include <string.h>
#include <unistd.h>

#include "core_fixture.h"

static const char *const s_allow[] = { "haproxy:///run/h.sock", "http://router:8000" };

static void s_open_allowing(int n)
{
    rdzv_config_t cfg = fx_config();
    cfg.router_allow = s_allow;
    cfg.nrouter_allow = n;
    fx_reopen_cfg(cfg);
}

static void s_join_via(int who, int world, int rank, const char *router_json)
{
    fx_send(who, "{\"v\":1,\"id\":%d,\"op\":\"join\",\"group\":\"g\",\"world\":%d,\"rank\":%d,"
            "\"host\":\"10.0.0.%d\",\"node\":\"n%d\",\"session\":\"s%d\",\"timeout_ms\":5000,"
            "\"router\":%s}", who, world, rank, rank, rank, rank, router_json);
}

/* Group g's status object, NULL if there is none (the caller frees it). */
static cJSON *s_status(void)
{
    cJSON *all = rdzv_core_status_json(core, "g", now);
    cJSON *g = cJSON_DetachItemFromArray(all, 0);
    cJSON_Delete(all);
    return g;
}

static void s_expect_router(const char *url)
{
    cJSON *g = s_status();
    ck_assert_ptr_nonnull(g);
    const cJSON *r = cJSON_GetObjectItem(g, "router");
    if (url)
        ck_assert_str_eq(cJSON_GetStringValue(r), url);
    else
        ck_assert(cJSON_IsNull(r));
    cJSON_Delete(g);
}

static bool s_flag(int rank, const char *field)
{
    cJSON *g = s_status();
    bool v = cJSON_IsTrue(cJSON_GetObjectItem(
        cJSON_GetArrayItem(cJSON_GetObjectItem(g, "members"), rank), field));
    cJSON_Delete(g);
    return v;
}

START_TEST(test_recorded_and_replayed)
{
    s_open_allowing(1);
    s_join_via(0, 2, 0, "\"haproxy:///run/h.sock#engines\"");
    fx_join(1, "g", 2, 1, "n1", "s1");       /* names none: the group keeps its router */
    fx_collect();
    ck_assert_ptr_nonnull(fx_assignment(1));
    s_expect_router("haproxy:///run/h.sock#engines");
    s_open_allowing(1);                       /* a restart replays the journal */
    s_expect_router("haproxy:///run/h.sock#engines");
    fx_clear_replies();
}
END_TEST

/* Without --router-allow naming it, a join with a router is refused and
 * nothing is recorded; so are routers of the wrong type or form. */
START_TEST(test_refused)
{
    s_join_via(0, 1, 0, "\"haproxy:///run/h.sock#engines\"");
    ck_assert_str_eq(fx_error(0), RDZV_E_FORBIDDEN);
    ck_assert_ptr_null(s_status());
    s_open_allowing(2);
    static const char *const bad[] = {
        "1", "null", "\"\"", "\"ftp://router/x\"", "\"haproxy:///run/h.sock\"",
        "\"http://router:8000/?q=1\"", "\"http://router:70000\"",
        "\"haproxy:///run/h.sock#bad name\"",
        /* Climbing out of an allowed directory, or an empty segment. */
        "\"haproxy:///run/h.sock/../x.sock#b\"", "\"haproxy:///run//h.sock#b\"",
        "\"http://router:8000/./x\"", "\"http://router:8000/a/..\"", "\"http://:8000\"",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s_join_via(1, 1, 0, bad[i]);
        ck_assert_msg(strcmp(fx_error(1), RDZV_E_BAD_REQUEST) == 0, "%s: %s", bad[i],
                      fx_error(1));
    }
    /* Allowed: the entry whole, or extended by a backend or a path; not a
     * longer host or socket name. */
    s_join_via(2, 1, 0, "\"http://router:80001\"");
    ck_assert_str_eq(fx_error(2), RDZV_E_BAD_REQUEST);
    s_join_via(3, 1, 0, "\"haproxy:///run/h.sockX#engines\"");
    ck_assert_str_eq(fx_error(3), RDZV_E_FORBIDDEN);
    ck_assert_ptr_null(s_status());
    s_join_via(4, 1, 0, "\"http://router:8000/v1\"");
    ck_assert_ptr_nonnull(fx_assignment(4));
    s_expect_router("http://router:8000/v1");
    fx_clear_replies();
}
END_TEST

/* A rolling update that moves the ranks to another router moves the
 * group with its first new rank; compaction keeps the latest. */
START_TEST(test_latest_wins)
{
    s_open_allowing(2);
    s_join_via(0, 2, 0, "\"http://router:8000\"");
    s_join_via(1, 2, 1, "\"haproxy:///run/h.sock#b\"");
    fx_collect();
    s_expect_router("haproxy:///run/h.sock#b");
    rdzv_config_t cfg = fx_config();
    cfg.router_allow = s_allow;
    cfg.nrouter_allow = 2;
    cfg.compact_bytes = 1;                    /* compact at once */
    fx_reopen_cfg(cfg);
    fx_send(5, "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"k\","
            "\"value\":\"v\"}");
    for (int i = 0; core->compaction && i < 5000; i++) {
        usleep(1000);
        ck_assert_int_eq(drive_commit(core, now, NULL, NULL), 0);
    }
    ck_assert_uint_ge(core->metrics.compactions, 1);
    s_open_allowing(2);
    s_expect_router("haproxy:///run/h.sock#b");
    fx_clear_replies();
}
END_TEST

/* What the reconciler reports is shown, counted, and forgotten at a
 * restart; a report about a router the group no longer names is ignored. */
START_TEST(test_reports_are_soft)
{
    s_open_allowing(1);
    s_join_via(0, 2, 0, "\"haproxy:///run/h.sock#b\"");
    s_join_via(1, 2, 1, "\"haproxy:///run/h.sock#b\"");
    fx_collect();
    int ready[] = { 0 }, out[] = { 1 };
    rdzv_router_report_t rep = {
        .group = "g", .router = "haproxy:///run/h.sock#b", .known = true, .registered = ready,
        .nregistered = 1, .draining = out, .ndraining = 1, .reason = -1,
    };
    rdzv_core_router_report(core, &rep);
    ck_assert(s_flag(0, "registered") && !s_flag(0, "draining"));
    ck_assert(!s_flag(1, "registered") && s_flag(1, "draining"));
    /* A router that could not be read says nothing of who left. */
    rep.reason = RDZV_ROUTER_ERR_UNREACHABLE;
    rep.error = "cannot connect";
    rep.known = false;
    rep.nregistered = rep.ndraining = 0;
    rdzv_core_router_report(core, &rep);
    ck_assert(s_flag(0, "registered") && s_flag(1, "draining"));
    rep.reason = RDZV_ROUTER_ERR_SERVER;
    rep.error = "add_worker: HTTP 503";
    rep.known = true;
    rdzv_core_router_report(core, &rep);
    cJSON *g = s_status();
    ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(g, "router_error")),
                     "add_worker: HTTP 503");
    ck_assert_int_eq(cJSON_GetObjectItem(g, "registered_count")->valueint, 0);
    cJSON_Delete(g);
    rdzv_core_stats_t *st = calloc(1, sizeof *st);
    rdzv_core_stats(core, now, st);
    ck_assert_uint_eq(st->ngroup, 1);
    ck_assert(st->group[0].routed);
    ck_assert_uint_eq(st->group[0].router_errors[RDZV_ROUTER_ERR_SERVER], 1);
    ck_assert_uint_eq(st->group[0].router_errors[RDZV_ROUTER_ERR_UNREACHABLE], 1);
    free(st);
    rep.router = "http://router:8000";        /* not the group's: ignored */
    rep.reason = -1;
    rep.error = NULL;
    rep.nregistered = 1;
    rdzv_core_router_report(core, &rep);
    ck_assert(!s_flag(0, "registered"));
    rep.router = "haproxy:///run/h.sock#b";
    rdzv_core_router_report(core, &rep);
    ck_assert(s_flag(0, "registered"));
    s_open_allowing(1);
    ck_assert(!s_flag(0, "registered"));
    g = s_status();
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(g, "router_error")));
    cJSON_Delete(g);
    fx_clear_replies();
}
END_TEST

/* g's leaving rank's field, -1 when the rank is not leaving. */
static int s_leaving(int rank, const char *field)
{
    cJSON *g = s_status();
    const cJSON *l;
    int v = -1;
    cJSON_ArrayForEach(l, cJSON_GetObjectItem(g, "leaving"))
        if (cJSON_GetObjectItem(l, "rank")->valueint == rank) {
            const cJSON *f = cJSON_GetObjectItem(l, field);
            v = cJSON_IsNumber(f) ? f->valueint : cJSON_IsTrue(f);
        }
    cJSON_Delete(g);
    return v;
}

/* A shrink of a routed group: the ranks it drops are listed as leaving,
 * with their API's address, until a reconcile finds the router without
 * them; their heartbeats (not_found) keep them alive meanwhile. A grow
 * takes a leaving rank back as a member. */
START_TEST(test_shrink_leaves_through_the_router)
{
    s_open_allowing(1);
    for (int r = 0; r < 3; r++)
        s_join_via(r, 3, r, "\"haproxy:///run/h.sock#b\"");
    int plan2 = cJSON_GetObjectItem(fx_assignment(2), "ports")->child->valueint;
    fx_clear_replies();
    fx_send(3, "{\"v\":1,\"id\":3,\"op\":\"group_resize\",\"group\":\"g\",\"world\":2}");
    ck_assert_int_eq(s_leaving(2, "api_port"), plan2 + RDZV_ROLE_API);
    ck_assert_int_eq(s_leaving(2, "registered"), 1);     /* not looked at yet */
    ck_assert_int_eq(s_leaving(2, "alive"), 1);
    /* A restart in the middle: the replayed resize lists it again, alive
     * for --dead-after from the load, so its agent keeps waiting and the
     * router drains it rather than cutting it. */
    s_open_allowing(1);
    ck_assert_int_eq(s_leaving(2, "api_port"), plan2 + RDZV_ROLE_API);
    ck_assert_int_eq(s_leaving(2, "registered"), 1);
    ck_assert_int_eq(s_leaving(2, "alive"), 1);
    now += 60 * 1000;
    ck_assert_int_eq(s_leaving(2, "alive"), 0);
    fx_send(4, "{\"v\":1,\"op\":\"heartbeat\",\"group\":\"g\",\"rank\":2,\"session\":\"s2\","
            "\"epoch\":1}");
    ck_assert_str_eq(fx_error(4), RDZV_E_NOT_FOUND);
    ck_assert_int_eq(s_leaving(2, "alive"), 1);
    /* Still draining at the router: it stays. */
    int out[] = { 2 };
    rdzv_router_report_t rep = {
        .group = "g", .router = "haproxy:///run/h.sock#b", .known = true, .draining = out,
        .ndraining = 1, .reason = -1,
    };
    rdzv_core_router_report(core, &rep);
    ck_assert_int_eq(s_leaving(2, "registered"), 1);
    /* A router that could not be read says nothing: it stays. */
    rep.known = false;
    rep.ndraining = 0;
    rdzv_core_router_report(core, &rep);
    ck_assert_int_eq(s_leaving(2, "registered"), 1);
    /* Gone from the router: it has left. */
    rep.known = true;
    rdzv_core_router_report(core, &rep);
    ck_assert_int_eq(s_leaving(2, "rank"), -1);
    fx_clear_replies();

    /* Dropped again, then grown back before it left: a member again. */
    s_join_via(5, 2, 0, "\"haproxy:///run/h.sock#b\"");
    s_join_via(6, 2, 1, "\"haproxy:///run/h.sock#b\"");
    fx_send(7, "{\"v\":1,\"id\":7,\"op\":\"group_resize\",\"group\":\"g\",\"world\":3}");
    s_join_via(8, 3, 0, "\"haproxy:///run/h.sock#b\"");
    s_join_via(9, 3, 1, "\"haproxy:///run/h.sock#b\"");
    s_join_via(10, 3, 2, "\"haproxy:///run/h.sock#b\"");
    fx_send(11, "{\"v\":1,\"id\":11,\"op\":\"group_resize\",\"group\":\"g\",\"world\":1}");
    ck_assert_int_eq(s_leaving(1, "rank"), 1);
    ck_assert_int_eq(s_leaving(2, "rank"), 2);
    s_join_via(13, 3, 0, "\"haproxy:///run/h.sock#b\"");
    fx_send(12, "{\"v\":1,\"id\":12,\"op\":\"group_resize\",\"group\":\"g\",\"world\":2}");
    ck_assert_int_eq(s_leaving(1, "rank"), -1);
    ck_assert_int_eq(s_leaving(2, "rank"), 2);
    fx_clear_replies();
}
END_TEST

/* The allow list: whole entries, or extended by a path or a backend; "*". */
START_TEST(test_allowed)
{
    static const char *const allow[] = { "haproxy:///run/h.sock", "http://r:8000/" };
    ck_assert(rdzv_router_allowed(allow, 2, "haproxy:///run/h.sock#b"));
    ck_assert(!rdzv_router_allowed(allow, 2, "haproxy:///run/h.sock2#b"));
    ck_assert(rdzv_router_allowed(allow, 2, "http://r:8000/v1"));
    ck_assert(!rdzv_router_allowed(allow, 2, "http://r:80001"));
    ck_assert(!rdzv_router_allowed(allow, 0, "http://r:8000/v1"));
    static const char *const any[] = { "*" };
    ck_assert(rdzv_router_allowed(any, 1, "http://elsewhere"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("core_router");
    TCase *tc = fx_tcase(s, "router");
    tcase_add_test(tc, test_recorded_and_replayed);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_latest_wins);
    tcase_add_test(tc, test_reports_are_soft);
    tcase_add_test(tc, test_allowed);
    tcase_add_test(tc, test_shrink_leaves_through_the_router);
    return rdzv_check_run(s);
}
