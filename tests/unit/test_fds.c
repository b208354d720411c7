/* rdzvd's watch on its open files (rendezvous/net/fds.c): near the limit is a
 * count of the open ones, whatever holes closed connections leave among
 * the numbers. Each test runs in a process of its own (libcheck forks), so
 * it may lower its limit. */
#include "check_run.h"
#include <check.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fds.h"

#define LIMIT 256
#define RESERVE 64

/* Opens sockets until count are open; returns the highest number. */
static int s_open_until(long count)
{
    int fd = -1;
    for (long n = rdzv_fds_open(); n < count; n++) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        ck_assert_int_ge(fd, 0);
    }
    return fd;
}

static void s_lower_limit(void)
{
    struct rlimit r = { .rlim_cur = LIMIT, .rlim_max = LIMIT };
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &r), 0);
    ck_assert_int_lt(rdzv_fds_open(), LIMIT - RESERVE);
}

START_TEST(test_count)
{
    long before = rdzv_fds_open();
    ck_assert_int_gt(before, 2);          /* stdin, stdout, stderr at least */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_eq(rdzv_fds_open(), before + 1);
    close(fd);
    ck_assert_int_eq(rdzv_fds_open(), before);
}
END_TEST

START_TEST(test_short_without_holes)
{
    s_lower_limit();
    ck_assert(!rdzv_fds_short(RESERVE));
    s_open_until(LIMIT - RESERVE);        /* exactly the reserve left */
    ck_assert(!rdzv_fds_short(RESERVE));
    s_open_until(LIMIT - RESERVE + 1);
    ck_assert(rdzv_fds_short(RESERVE));
    s_open_until(LIMIT);                  /* not one left to count with */
    ck_assert_int_eq(rdzv_fds_open(), -1);
    ck_assert(rdzv_fds_short(RESERVE));
    /* LeakSanitizer reads /proc at exit: give it descriptors back. */
    for (int fd = LIMIT - RESERVE; fd < LIMIT; fd++)
        close(fd);
}
END_TEST

START_TEST(test_short_with_holes)
{
    s_lower_limit();
    int top = s_open_until(LIMIT);
    ck_assert_int_eq(top, LIMIT - 1);
    /* Close a block below the top: the top numbers stay open, yet 100 of
     * them are free again. */
    for (int fd = LIMIT - 150; fd < LIMIT - 50; fd++)
        ck_assert_int_eq(close(fd), 0);
    ck_assert_int_eq(rdzv_fds_open(), LIMIT - 100);
    ck_assert(!rdzv_fds_short(RESERVE));
    /* New ones fill the block from its bottom, far below the top. */
    s_open_until(LIMIT - RESERVE + 1);
    ck_assert(rdzv_fds_short(RESERVE));
}
END_TEST

START_TEST(test_connection_cap)
{
    s_lower_limit();
    long open = rdzv_fds_open();
    ck_assert_int_eq(rdzv_fds_connection_cap(LIMIT), LIMIT - open - RESERVE / 2);
    ck_assert_int_eq(rdzv_fds_connection_cap(8), 1);    /* never none */
    ck_assert_int_eq(rdzv_fds_reserve(256), 64);
    ck_assert_int_eq(rdzv_fds_reserve(1 << 20), 52428);
    ck_assert_int_eq(rdzv_fds_reserve(1L << 30), 65536);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fds");
    TCase *tc = tcase_create("fds");
    tcase_add_test(tc, test_count);
    tcase_add_test(tc, test_short_without_holes);
    tcase_add_test(tc, test_short_with_holes);
    tcase_add_test(tc, test_connection_cap);
    suite_add_tcase(s, tc);
    return rdzv_check_run(s);
}
