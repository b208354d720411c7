/* Sizing rdzvd's threads (rendezvous/net/cpus.c): cgroup CPU limits as
 * Kubernetes writes them, and the count never above the affinity mask. */
#include "check_run.h"
#include <check.h>
#include <sched.h>
#include <stdlib.h>

#include "cpus.h"

START_TEST(test_cpu_max)
{
    ck_assert_int_eq(rdzv_cpus_from_cpu_max("max 100000\n"), 0);
    ck_assert_int_eq(rdzv_cpus_from_cpu_max("100000 100000\n"), 1);
    ck_assert_int_eq(rdzv_cpus_from_cpu_max("150000 100000\n"), 2);   /* 1.5 CPUs: 2 threads */
    ck_assert_int_eq(rdzv_cpus_from_cpu_max("25000 100000"), 1);      /* 250m */
    ck_assert_int_eq(rdzv_cpus_from_cpu_max("800000 100000"), 8);
    ck_assert_int_eq(rdzv_cpus_from_cpu_max("-1 100000"), 0);        /* cgroup v1: no quota */
    ck_assert_int_eq(rdzv_cpus_from_cpu_max("100000 0"), 0);
    ck_assert_int_eq(rdzv_cpus_from_cpu_max(""), 0);
    ck_assert_int_eq(rdzv_cpus_from_cpu_max("garbage"), 0);
    ck_assert_int_eq(rdzv_cpus_from_cpu_max(NULL), 0);
}
END_TEST

START_TEST(test_io_affinity)
{
    /* Threads dealt in turn: 2 shards of 4 threads own {0,2} and {1,3}. */
    ck_assert_uint_eq(rdzv_io_affinity(0, 2, 4), 0x5);
    ck_assert_uint_eq(rdzv_io_affinity(1, 2, 4), 0xa);
    /* 8 shards, 16 threads: every thread owned by exactly one shard. */
    unsigned long long all = 0;
    for (int s = 0; s < 8; s++) {
        unsigned long long m = rdzv_io_affinity(s, 8, 16);
        ck_assert_int_eq(__builtin_popcountll(m), 2);
        ck_assert_uint_eq(all & m, 0);
        all |= m;
    }
    ck_assert_uint_eq(all, 0xffff);
    /* Fewer threads than shards: shards share, none is left without one. */
    ck_assert_uint_eq(rdzv_io_affinity(0, 3, 2), 0x1);
    ck_assert_uint_eq(rdzv_io_affinity(2, 3, 2), 0x1);
    ck_assert_uint_eq(rdzv_io_affinity(1, 3, 2), 0x2);
    ck_assert_uint_eq(rdzv_io_affinity(0, 1, 1), 0x1);
    /* Uneven: 3 shards of 7 threads own {0,3,6} {1,4} {2,5}. */
    ck_assert_uint_eq(rdzv_io_affinity(0, 3, 7), 0x49);
    ck_assert_uint_eq(rdzv_io_affinity(2, 3, 7), 0x24);
    ck_assert_uint_eq(rdzv_io_affinity(3, 3, 7), 0);
}
END_TEST

START_TEST(test_usable_within_affinity)
{
    cpu_set_t set;
    ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
    int usable = rdzv_cpus_usable();
    ck_assert_int_ge(usable, 1);
    ck_assert_int_le(usable, CPU_COUNT(&set));
    /* Narrow the mask to one CPU: the count follows. */
    int first = 0;
    while (!CPU_ISSET(first, &set))
        first++;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
    ck_assert_int_eq(rdzv_cpus_usable(), 1);
    ck_assert_int_eq(sched_setaffinity(0, sizeof set, &set), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cpus");
    TCase *tc = tcase_create("cpus");
    tcase_add_test(tc, test_cpu_max);
    tcase_add_test(tc, test_io_affinity);
    tcase_add_test(tc, test_usable_within_affinity);
    suite_add_tcase(s, tc);
    return rdzv_check_run(s);
}
