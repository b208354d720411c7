/* Default host (the local address routing to rdzvd) and node (hostname). */
#include "route.h"

#include "check_run.h"
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *endpoint;
    const char *host;       /* NULL: must be rejected */
} s_case_t;

static const s_case_t s_hosts[] = {
    { "tcp://127.0.0.1:29400", "127.0.0.1" },
    { "tcp://rdzv.example.com:1", "rdzv.example.com" },
    { "tcp://[::1]:29400", "::1" },
    { "tcp://eth0;10.0.0.5:29400", "10.0.0.5" },
    { "tcp://10.0.0.1:0;10.0.0.5:29400", "10.0.0.5" },
    { "tcp://host", NULL },
    { "tcp://host:", NULL },
    { "tcp://:29400", NULL },
    { "tcp://[::1:29400", NULL },
    { "ipc:///tmp/rdzv", NULL },
    { "", NULL },
};

START_TEST(test_endpoint_host)
{
    const s_case_t *c = &s_hosts[_i];
    char out[256] = "";
    int rc = rdzv_route_endpoint_host(c->endpoint, out, sizeof out);
    if (c->host) {
        ck_assert_int_eq(rc, 0);
        ck_assert_str_eq(out, c->host);
    } else {
        ck_assert_int_eq(rc, -1);
    }
}
END_TEST

START_TEST(test_endpoint_host_too_long)
{
    char out[4];
    ck_assert_int_eq(rdzv_route_endpoint_host("tcp://abcd:1", out, sizeof out), -1);
    ck_assert_int_eq(rdzv_route_endpoint_host(NULL, out, sizeof out), -1);
}
END_TEST

START_TEST(test_default_host_loopback)
{
    char out[64], err[128];
    ck_assert_int_eq(rdzv_route_default_host("tcp://127.0.0.1:29400", out, sizeof out,
                                             err, sizeof err), 0);
    ck_assert_str_eq(out, "127.0.0.1");
    /* Any 127/8 destination is routed through lo with source 127.0.0.1. */
    ck_assert_int_eq(rdzv_route_default_host("tcp://127.0.0.9:1", out, sizeof out,
                                             err, sizeof err), 0);
    ck_assert_str_eq(out, "127.0.0.1");
}
END_TEST

START_TEST(test_default_host_not_tcp)
{
    char out[64], err[128];
    ck_assert_int_eq(rdzv_route_default_host("ipc:///tmp/x", out, sizeof out,
                                             err, sizeof err), 0);
    ck_assert_str_eq(out, "127.0.0.1");
}
END_TEST

START_TEST(test_default_host_unresolvable)
{
    char out[64], err[128] = "";
    ck_assert_int_eq(rdzv_route_default_host("tcp://no-such-host.invalid:1", out,
                                             sizeof out, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "no-such-host.invalid"));
    ck_assert_int_eq(rdzv_route_default_host("tcp://nohostport", out, sizeof out,
                                             err, sizeof err), -1);
}
END_TEST

/* A name that does not resolve is told apart (EAGAIN: worth asking again),
 * and said with getaddrinfo's reason. .invalid never resolves (RFC 6761). */
START_TEST(test_resolve)
{
    char out[64], err[160] = "";
    errno = 0;
    ck_assert_int_eq(rdzv_route_default_host("tcp://no-such-host.invalid:1", out,
                                             sizeof out, err, sizeof err), -1);
    ck_assert_int_eq(errno, EAGAIN);
    ck_assert_ptr_nonnull(strstr(err, "cannot resolve server host 'no-such-host.invalid' (DNS: "));
    errno = 0;
    err[0] = '\0';
    ck_assert_int_eq(rdzv_route_resolve("tcp://no-such-host.invalid:1", err, sizeof err), -1);
    ck_assert_int_eq(errno, EAGAIN);
    ck_assert_ptr_nonnull(strstr(err, "cannot resolve server host 'no-such-host.invalid' (DNS: "));
    ck_assert_int_eq(rdzv_route_resolve("tcp://127.0.0.1:1", err, sizeof err), 0);
    ck_assert_int_eq(rdzv_route_resolve("ipc:///tmp/x", err, sizeof err), 0);
    errno = 0;
    ck_assert_int_eq(rdzv_route_resolve("tcp://nohostport", err, sizeof err), -1);
    ck_assert_int_eq(errno, EINVAL);
}
END_TEST

START_TEST(test_default_node)
{
    char expected[HOST_NAME_MAX + 1], out[256], err[128];
    ck_assert_int_eq(gethostname(expected, sizeof expected), 0);
    ck_assert_int_eq(rdzv_route_default_node(out, sizeof out, err, sizeof err), 0);
    ck_assert_str_eq(out, expected);
}
END_TEST

static Suite *s_suite(void)
{
    Suite *s = suite_create("route");
    TCase *tc = tcase_create("endpoint_host");
    tcase_add_loop_test(tc, test_endpoint_host, 0, (int) (sizeof s_hosts / sizeof s_hosts[0]));
    tcase_add_test(tc, test_endpoint_host_too_long);
    suite_add_tcase(s, tc);
    tc = tcase_create("default_host");
    tcase_add_test(tc, test_default_host_loopback);
    tcase_add_test(tc, test_default_host_not_tcp);
    tcase_add_test(tc, test_default_host_unresolvable);
    tcase_add_test(tc, test_resolve);
    suite_add_tcase(s, tc);
    tc = tcase_create("default_node");
    tcase_add_test(tc, test_default_node);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return rdzv_check_run(s_suite());
}
