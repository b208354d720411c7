/* Lease rules for listeners on several addresses of one port
 * (rdzv_lease_listen_at): what Linux lets share a port, what it refuses. */
#include "agent_lease.h"

#include "check_run.h"
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#define BASE 20000
#define LIMIT 20016
#define PORT 20000

static const int s_plan[] = { 20000, 20001 };
static rdzv_lease_t *s_lease;

static void s_setup(void)
{
    s_lease = rdzv_lease_new(BASE, LIMIT, s_plan, 2);
    ck_assert_ptr_nonnull(s_lease);
}

static void s_teardown(void)
{
    rdzv_lease_destroy(&s_lease);
}

/* "0.0.0.0", "::", "::/v6" (IPV6_V6ONLY), "127.0.0.1", ... */
static rdzv_lease_where_t s_where(const char *text)
{
    rdzv_lease_where_t w = { 0 };
    char addr[64];
    size_t n = strcspn(text, "/");
    ck_assert_uint_lt(n, sizeof addr);
    memcpy(addr, text, n);
    addr[n] = '\0';
    w.v6only = strcmp(text + n, "/v6") == 0;
    w.family = strchr(addr, ':') ? AF_INET6 : AF_INET;
    ck_assert_int_eq(inet_pton(w.family, addr, w.addr), 1);
    return w;
}

static int s_listen(const char *where, bool reuseport)
{
    rdzv_lease_where_t w = s_where(where);
    return rdzv_lease_listen_at(s_lease, PORT, &w, reuseport);
}

typedef struct {
    const char *first;
    const char *second;
    int want;                  /* the second listener's answer */
} s_pair_t;

static const s_pair_t s_pairs[] = {
    { "::/v6", "0.0.0.0", 0 },            /* asyncio.start_server(port=P) */
    { "0.0.0.0", "::/v6", 0 },
    { "127.0.0.1", "127.0.0.2", 0 },
    { "::1", "127.0.0.1", 0 },
    { "::1", "0.0.0.0", 0 },
    { "::", "0.0.0.0", EADDRINUSE },     /* dual-stack [::] holds IPv4 too */
    { "0.0.0.0", "::", EADDRINUSE },
    { "::", "127.0.0.1", EADDRINUSE },
    { "0.0.0.0", "127.0.0.1", EADDRINUSE },
    { "127.0.0.1", "127.0.0.1", EADDRINUSE },
    { "::/v6", "::1", EADDRINUSE },
    { "::/v6", "::", EADDRINUSE },
    { "::ffff:127.0.0.1", "127.0.0.1", EADDRINUSE },
    { "::ffff:127.0.0.1", "0.0.0.0", EADDRINUSE },
};

START_TEST(test_pairs)
{
    const s_pair_t *p = &s_pairs[_i];
    ck_assert_int_eq(s_listen(p->first, false), 0);
    ck_assert_msg(s_listen(p->second, false) == p->want, "%s then %s", p->first, p->second);
}
END_TEST

START_TEST(test_reuseport_pairs_share)
{
    const s_pair_t *p = &s_pairs[_i];
    ck_assert_int_eq(s_listen(p->first, true), 0);
    ck_assert_int_eq(s_listen(p->second, true), 0);
}
END_TEST

START_TEST(test_unlisten_frees_only_its_address)
{
    ck_assert_int_eq(s_listen("::/v6", false), 0);
    ck_assert_int_eq(s_listen("0.0.0.0", false), 0);
    rdzv_lease_where_t v4 = s_where("0.0.0.0");
    rdzv_lease_unlisten_at(s_lease, PORT, &v4);
    ck_assert_int_eq(rdzv_lease_state(s_lease, PORT), RDZV_PORT_TAKEN);
    ck_assert_int_eq(s_listen("::/v6", false), EADDRINUSE);
    ck_assert_int_eq(s_listen("0.0.0.0", false), 0);
    rdzv_lease_unlisten_at(s_lease, PORT, &v4);
    rdzv_lease_where_t v6 = s_where("::/v6");
    rdzv_lease_unlisten_at(s_lease, PORT, &v6);
    ck_assert_int_eq(rdzv_lease_state(s_lease, PORT), RDZV_PORT_LEASED);
    ck_assert_int_eq(s_listen("::", false), 0);
}
END_TEST

START_TEST(test_many_reuseport_listeners)
{
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(s_listen("0.0.0.0", true), 0);
    ck_assert_int_eq(s_listen("127.0.0.1", false), EADDRINUSE);
    ck_assert_int_eq(s_listen("::/v6", false), 0);
}
END_TEST

START_TEST(test_bad_family)
{
    rdzv_lease_where_t w = { .family = AF_UNIX };
    ck_assert_int_eq(rdzv_lease_listen_at(s_lease, PORT, &w, false), EINVAL);
}
END_TEST

static Suite *s_suite(void)
{
    Suite *s = suite_create("agent_lease_where");
    TCase *tc = tcase_create("where");
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_add_loop_test(tc, test_pairs, 0, (int) (sizeof s_pairs / sizeof s_pairs[0]));
    tcase_add_loop_test(tc, test_reuseport_pairs_share, 0,
                        (int) (sizeof s_pairs / sizeof s_pairs[0]));
    tcase_add_test(tc, test_unlisten_frees_only_its_address);
    tcase_add_test(tc, test_many_reuseport_listeners);
    tcase_add_test(tc, test_bad_family);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return rdzv_check_run(s_suite());
}
