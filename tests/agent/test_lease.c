/* Lease rules of the agent (client/agent/agent_lease.c): probe, port-0
 * probe, listener, close, foreign port, exhausted plan, engine gone. */
#include "agent_lease.h"

#include "check_run.h"
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>

/* Listeners on dual-stack [::], which overlaps every other one on a port:
 * these tests are about the plan and the lease's states, not addresses
 * (test_lease_where.c). */
static const rdzv_lease_where_t s_everywhere = { .family = AF_INET6, .v6only = false };

static int s_listen(rdzv_lease_t *lease, int port, bool reuseport)
{
    return rdzv_lease_listen_at(lease, port, &s_everywhere, reuseport);
}

static void s_unlisten(rdzv_lease_t *lease, int port)
{
    rdzv_lease_unlisten_at(lease, port, &s_everywhere);
}

#define BASE 20000
#define LIMIT 20016

static const int s_plan[] = { 20000, 20001, 20002, 20003 };
static rdzv_lease_t *s_lease;

static void s_setup(void)
{
    s_lease = rdzv_lease_new(BASE, LIMIT, s_plan, 4);
    ck_assert_ptr_nonnull(s_lease);
}

static void s_teardown(void)
{
    rdzv_lease_destroy(&s_lease);
    ck_assert_ptr_null(s_lease);
    rdzv_lease_destroy(&s_lease);
}

START_TEST(test_new_rejects_bad_plans)
{
    const int outside[] = { 20000, 20016 };
    ck_assert_ptr_null(rdzv_lease_new(BASE, LIMIT, outside, 2));
    ck_assert_ptr_null(rdzv_lease_new(LIMIT, BASE, s_plan, 4));
    ck_assert_ptr_null(rdzv_lease_new(0, LIMIT, s_plan, 4));
    ck_assert_ptr_null(rdzv_lease_new(BASE, 70000, s_plan, 4));
}
END_TEST

START_TEST(test_probe_leases_once)
{
    ck_assert_int_eq(rdzv_lease_state(s_lease, 20001), RDZV_PORT_FREE);
    ck_assert_int_eq(rdzv_lease_probe(s_lease, 20001), 0);
    ck_assert_int_eq(rdzv_lease_state(s_lease, 20001), RDZV_PORT_LEASED);
    ck_assert_int_eq(rdzv_lease_probe(s_lease, 20001), EADDRINUSE);
}
END_TEST

START_TEST(test_scan_walks_the_plan)
{
    /* Two vLLM-style scans from the first port never return the same port. */
    int got[8], n = 0;
    for (int scan = 0; scan < 2; scan++)
        for (int port = BASE, hits = 0; port < LIMIT && hits < 2; port++)
            if (rdzv_lease_probe(s_lease, port) == 0)
                got[n++] = port, hits++;
    ck_assert_int_eq(n, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(got[i], s_plan[i]);
}
END_TEST

START_TEST(test_foreign_and_outside)
{
    ck_assert_int_eq(rdzv_lease_state(s_lease, 20010), RDZV_PORT_FOREIGN);
    ck_assert_int_eq(rdzv_lease_probe(s_lease, 20010), EADDRINUSE);
    ck_assert_int_eq(s_listen(s_lease, 20010, false), EADDRINUSE);
    ck_assert_int_eq(rdzv_lease_state(s_lease, LIMIT), RDZV_PORT_OUTSIDE);
    ck_assert_int_eq(rdzv_lease_probe(s_lease, LIMIT), EINVAL);
    ck_assert_int_eq(s_listen(s_lease, BASE - 1, true), EINVAL);
}
END_TEST

/* Port-0 probes take the probe pool first, then the ports below it from
 * the top down: the named roles last (the store's two places, P and P+3,
 * and the DP RPC's, P+1 and P+4, of a plan of 12 or more; P and P+1 of a
 * shorter one, whose pool starts at P+3). */
START_TEST(test_port0_order)
{
    size_t want32[32];
    for (size_t k = 0; k < 22; k++)
        want32[k] = 10 + k;
    for (size_t k = 22; k < 32; k++)
        want32[k] = 31 - k;
    for (size_t k = 0; k < 32; k++)
        ck_assert_uint_eq(rdzv_lease_port0_slot(32, k), want32[k]);
    static const size_t want4[] = { 3, 2, 1, 0 };
    for (size_t k = 0; k < 4; k++)
        ck_assert_uint_eq(rdzv_lease_port0_slot(4, k), want4[k]);
}
END_TEST

START_TEST(test_probe_any_and_exhaustion)
{
    int port = 0;
    ck_assert_int_eq(rdzv_lease_probe(s_lease, 20000), 0);
    ck_assert_int_eq(rdzv_lease_probe_any(s_lease, &port), 0);
    ck_assert_int_eq(port, 20003);                   /* the pool's */
    rdzv_lease_hold(s_lease, port, 1);               /* its socket is open */
    ck_assert_int_eq(s_listen(s_lease, 20002, false), 0);
    ck_assert_int_eq(rdzv_lease_probe_any(s_lease, &port), 0);
    ck_assert_int_eq(port, 20001);
    rdzv_lease_hold(s_lease, port, 1);
    ck_assert_int_eq(rdzv_lease_probe_any(s_lease, &port), EADDRINUSE);
    for (int p = BASE; p < LIMIT; p++)
        ck_assert_int_eq(rdzv_lease_probe(s_lease, p), EADDRINUSE);
}
END_TEST

/* get_open_port() probes port 0 and closes, again and again: once the plan
 * has no free port, the oldest port-0 lease whose socket is closed and that
 * no listener took is leased again. Explicit probes and listened ports
 * never are. */
START_TEST(test_probe_any_reuses_closed_port0_leases)
{
    int port = 0, first[3];
    ck_assert_int_eq(rdzv_lease_probe(s_lease, 20000), 0);      /* VLLM_PORT's scan */
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(rdzv_lease_probe_any(s_lease, &first[i]), 0);
        rdzv_lease_hold(s_lease, first[i], 1);
    }
    ck_assert_int_eq(first[0], 20003);
    ck_assert_int_eq(rdzv_lease_probe_any(s_lease, &port), EADDRINUSE);  /* all held */
    rdzv_lease_hold(s_lease, 20001, -1);             /* closed */
    rdzv_lease_hold(s_lease, 20003, -1);
    ck_assert_int_eq(rdzv_lease_probe_any(s_lease, &port), 0);
    ck_assert_int_eq(port, 20003);                   /* the oldest closed one */
    rdzv_lease_hold(s_lease, port, 1);
    ck_assert_int_eq(s_listen(s_lease, 20001, false), 0);   /* its owner binds it */
    s_unlisten(s_lease, 20001);
    ck_assert_int_eq(rdzv_lease_probe_any(s_lease, &port), EADDRINUSE);
    for (int i = 0; i < 100; i++) {                  /* a long run of probe, close */
        rdzv_lease_hold(s_lease, 20003, -1);
        ck_assert_int_eq(rdzv_lease_probe_any(s_lease, &port), 0);
        ck_assert_int_eq(port, 20003);
        rdzv_lease_hold(s_lease, port, 1);
    }
    ck_assert_int_eq(rdzv_lease_state(s_lease, 20000), RDZV_PORT_LEASED);
}
END_TEST

START_TEST(test_listener_after_probe)
{
    /* vLLM: a probe leases the port, the listener binds it seconds later. */
    ck_assert_int_eq(rdzv_lease_probe(s_lease, 20002), 0);
    ck_assert_int_eq(s_listen(s_lease, 20002, false), 0);
    ck_assert_int_eq(rdzv_lease_state(s_lease, 20002), RDZV_PORT_TAKEN);
    ck_assert_int_eq(s_listen(s_lease, 20002, false), EADDRINUSE);
    ck_assert_int_eq(rdzv_lease_probe(s_lease, 20002), EADDRINUSE);
}
END_TEST

START_TEST(test_reuseport_listeners_share)
{
    ck_assert_int_eq(s_listen(s_lease, 20000, true), 0);
    ck_assert_int_eq(s_listen(s_lease, 20000, true), 0);
    ck_assert_int_eq(s_listen(s_lease, 20000, false), EADDRINUSE);
    ck_assert_int_eq(s_listen(s_lease, 20001, false), 0);
    ck_assert_int_eq(s_listen(s_lease, 20001, true), EADDRINUSE);
    s_unlisten(s_lease, 20000);
    ck_assert_int_eq(rdzv_lease_state(s_lease, 20000), RDZV_PORT_TAKEN);
    s_unlisten(s_lease, 20000);
    ck_assert_int_eq(rdzv_lease_state(s_lease, 20000), RDZV_PORT_LEASED);
}
END_TEST

START_TEST(test_close_keeps_the_lease)
{
    ck_assert_int_eq(s_listen(s_lease, 20003, false), 0);
    s_unlisten(s_lease, 20003);
    ck_assert_int_eq(rdzv_lease_state(s_lease, 20003), RDZV_PORT_LEASED);
    ck_assert_int_eq(rdzv_lease_probe(s_lease, 20003), EADDRINUSE);
    ck_assert_int_eq(s_listen(s_lease, 20003, false), 0);
}
END_TEST

START_TEST(test_unprobe_and_reset)
{
    ck_assert_int_eq(rdzv_lease_probe(s_lease, 20000), 0);
    rdzv_lease_unprobe(s_lease, 20000);
    ck_assert_int_eq(rdzv_lease_state(s_lease, 20000), RDZV_PORT_FREE);
    ck_assert_int_eq(rdzv_lease_probe(s_lease, 20000), 0);
    ck_assert_int_eq(s_listen(s_lease, 20001, false), 0);
    rdzv_lease_reset(s_lease);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(rdzv_lease_state(s_lease, s_plan[i]), RDZV_PORT_FREE);
    ck_assert_int_eq(s_listen(s_lease, 20001, false), 0);
}
END_TEST

static Suite *s_suite(void)
{
    Suite *s = suite_create("agent_lease");
    TCase *tc = tcase_create("lease");
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_add_test(tc, test_new_rejects_bad_plans);
    tcase_add_test(tc, test_probe_leases_once);
    tcase_add_test(tc, test_scan_walks_the_plan);
    tcase_add_test(tc, test_foreign_and_outside);
    tcase_add_test(tc, test_port0_order);
    tcase_add_test(tc, test_probe_any_and_exhaustion);
    tcase_add_test(tc, test_probe_any_reuses_closed_port0_leases);
    tcase_add_test(tc, test_listener_after_probe);
    tcase_add_test(tc, test_reuseport_listeners_share);
    tcase_add_test(tc, test_close_keeps_the_lease);
    tcase_add_test(tc, test_unprobe_and_reset);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return rdzv_check_run(s_suite());
}
