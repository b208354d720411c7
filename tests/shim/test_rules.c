/* Which binds the shim takes (shim/shim_rules.c), table-driven. */
#include "shim_rules.h"

#include "check_run.h"
#include <check.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

#define BASE 20000
#define LIMIT 20016

typedef struct {
    const char *what;
    rdzv_shim_bind_t bind;
    rdzv_shim_action_t want;
} s_case_t;

/* ... already_bound, wildcard address */
#define TCP4(port, ra, rp) { AF_INET, SOCK_STREAM, IPPROTO_TCP, AF_INET, port, ra, rp, false, true }
#define TCP6(port, ra, rp) { AF_INET6, SOCK_STREAM, IPPROTO_TCP, AF_INET6, port, ra, rp, false, true }
#define TCP4_AT(port, ra, rp) { AF_INET, SOCK_STREAM, IPPROTO_TCP, AF_INET, port, ra, rp, false, false }

static const s_case_t s_cases[] = {
    { "probe v4", TCP4(20003, false, false), RDZV_SHIM_PROBE },
    { "probe v6", TCP6(20003, false, false), RDZV_SHIM_PROBE },
    { "listener SO_REUSEADDR", TCP4(20003, true, false), RDZV_SHIM_LISTENER },
    { "listener SO_REUSEPORT", TCP6(20015, false, true), RDZV_SHIM_LISTENER },
    { "port-0 probe", TCP4(0, false, false), RDZV_SHIM_PROBE0 },
    { "port 0 SO_REUSEADDR", TCP4(0, true, false), RDZV_SHIM_PASS },
    /* NCCL's bootstrap and proxy listeners: port 0 on the interface address. */
    { "port 0 on one address, no flags", TCP4_AT(0, false, false), RDZV_SHIM_PASS },
    { "probe of a plan port on one address", TCP4_AT(20003, false, false), RDZV_SHIM_PROBE },
    { "listener on one address", TCP4_AT(20003, true, false), RDZV_SHIM_LISTENER },
    { "port 0 SO_REUSEPORT", TCP6(0, false, true), RDZV_SHIM_PASS },
    { "below the range", TCP4(19999, false, false), RDZV_SHIM_PASS },
    { "at the limit", TCP4(20016, true, false), RDZV_SHIM_PASS },
    { "udp", { AF_INET, SOCK_DGRAM, IPPROTO_UDP, AF_INET, 20003, false, false, false, true },
      RDZV_SHIM_PASS },
    { "sctp stream", { AF_INET, SOCK_STREAM, IPPROTO_SCTP, AF_INET, 20003, false, false, false, true },
      RDZV_SHIM_PASS },
    { "family mismatch", { AF_INET6, SOCK_STREAM, IPPROTO_TCP, AF_INET, 20003, false, false,
                           false, true }, RDZV_SHIM_PASS },
    { "unix", { AF_UNIX, SOCK_STREAM, 0, AF_UNIX, 0, false, false, false, false }, RDZV_SHIM_PASS },
    { "already bound", { AF_INET, SOCK_STREAM, IPPROTO_TCP, AF_INET, 20003, true, false, true, true },
      RDZV_SHIM_PASS },
};

START_TEST(test_classify)
{
    const s_case_t *c = &s_cases[_i];
    ck_assert_msg(rdzv_shim_classify(&c->bind, BASE, LIMIT) == c->want, "%s", c->what);
}
END_TEST

/* The address alone never lets through a bind that classify takes. */
START_TEST(test_passes_agrees)
{
    const s_case_t *c = &s_cases[_i];
    if (rdzv_shim_passes_on_address(c->bind.port, c->bind.wildcard, BASE, LIMIT))
        ck_assert_msg(c->want == RDZV_SHIM_PASS, "%s", c->what);
}
END_TEST

START_TEST(test_passes_on_address)
{
    ck_assert(rdzv_shim_passes_on_address(19999, true, BASE, LIMIT));
    ck_assert(rdzv_shim_passes_on_address(LIMIT, false, BASE, LIMIT));
    ck_assert(!rdzv_shim_passes_on_address(BASE, false, BASE, LIMIT));
    ck_assert(!rdzv_shim_passes_on_address(LIMIT - 1, true, BASE, LIMIT));
    /* Port 0: on one address it passes; on the wildcard it may be a probe. */
    ck_assert(rdzv_shim_passes_on_address(0, false, BASE, LIMIT));
    ck_assert(!rdzv_shim_passes_on_address(0, true, BASE, LIMIT));
    /* The range not known yet: only port 0 on one address. */
    ck_assert(!rdzv_shim_passes_on_address(19999, true, 0, 0));
    ck_assert(rdzv_shim_passes_on_address(0, false, 0, 0));
    ck_assert(!rdzv_shim_passes_on_address(-1, false, BASE, LIMIT));
}
END_TEST

START_TEST(test_parse_range)
{
    int base = 0, limit = 0;
    ck_assert_int_eq(rdzv_shim_parse_range("19500-32768", &base, &limit), 0);
    ck_assert_int_eq(base, 19500);
    ck_assert_int_eq(limit, 32768);
    static const char *const bad[] = { "", "19500", "19500-", "-5", "5-5", "9-2", "1-70000",
                                       "0-10", "10-20x" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(rdzv_shim_parse_range(bad[i], &base, &limit) == -1, "%s", bad[i]);
    ck_assert_int_eq(rdzv_shim_parse_range(NULL, &base, &limit), -1);
}
END_TEST

static Suite *s_suite(void)
{
    Suite *s = suite_create("shim_rules");
    TCase *tc = tcase_create("classify");
    tcase_add_loop_test(tc, test_classify, 0, (int) (sizeof s_cases / sizeof s_cases[0]));
    tcase_add_loop_test(tc, test_passes_agrees, 0, (int) (sizeof s_cases / sizeof s_cases[0]));
    tcase_add_test(tc, test_passes_on_address);
    tcase_add_test(tc, test_parse_range);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return rdzv_check_run(s_suite());
}
