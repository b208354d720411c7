#include "check_run.h"
#include <check.h>
#include <stdlib.h>

#include "plan.h"

static rdzv_plans_t *plans;

static void setup(void) { plans = rdzv_plans_new(19500, 32, 19500 + 4 * 32); }
static void teardown(void) { rdzv_plans_destroy(&plans); }

START_TEST(test_new_refuses_bad_ranges)
{
    ck_assert_ptr_null(rdzv_plans_new(0, 32, 32768));
    ck_assert_ptr_null(rdzv_plans_new(19500, 32, 19510));
    ck_assert_ptr_null(rdzv_plans_new(19500, 32, 70000));
}
END_TEST

START_TEST(test_first_free_is_lowest_aligned_block)
{
    ck_assert_int_eq(rdzv_plans_first_free(plans, "n0"), 19500);
    ck_assert_int_eq(rdzv_plans_record(plans, "n0", "g", 0, 19500, 32), 0);
    ck_assert_int_eq(rdzv_plans_first_free(plans, "n0"), 19532);
    /* Another node is another network namespace: same numbers allowed. */
    ck_assert_int_eq(rdzv_plans_first_free(plans, "n1"), 19500);
}
END_TEST

START_TEST(test_gap_is_reused)
{
    ck_assert_int_eq(rdzv_plans_record(plans, "n0", "a", 0, 19500, 32), 0);
    ck_assert_int_eq(rdzv_plans_record(plans, "n0", "b", 0, 19532, 32), 0);
    ck_assert_int_eq(rdzv_plans_record(plans, "n0", "c", 0, 19564, 32), 0);
    ck_assert_int_eq(rdzv_plans_release_group(plans, "b"), 1);
    ck_assert_int_eq(rdzv_plans_first_free(plans, "n0"), 19532);
}
END_TEST

START_TEST(test_overlap_refused)
{
    ck_assert_int_eq(rdzv_plans_record(plans, "n0", "a", 0, 19500, 32), 0);
    ck_assert_int_eq(rdzv_plans_record(plans, "n0", "b", 0, 19510, 32), -1);
    ck_assert_int_eq(rdzv_plans_record(plans, "n0", "b", 0, 19490, 32), -1);
    ck_assert_int_eq(rdzv_plans_record(plans, "n0", "b", 0, 19600, 32), -1);  /* past limit */
    ck_assert_int_eq(rdzv_plans_count(plans, "n0"), 1);
}
END_TEST

START_TEST(test_exhausted)
{
    for (int r = 0; r < 4; r++) {
        int start = rdzv_plans_first_free(plans, "n0");
        ck_assert_int_eq(start, 19500 + 32 * r);
        ck_assert_int_eq(rdzv_plans_record(plans, "n0", "g", r, start, 32), 0);
    }
    ck_assert_int_eq(rdzv_plans_first_free(plans, "n0"), -1);
}
END_TEST

START_TEST(test_find_by_owner)
{
    ck_assert_int_eq(rdzv_plans_record(plans, "n0", "g", 3, 19532, 32), 0);
    ck_assert_int_eq(rdzv_plans_find(plans, "n0", "g", 3), 19532);
    ck_assert_int_eq(rdzv_plans_find(plans, "n0", "g", 2), -1);
    ck_assert_int_eq(rdzv_plans_find(plans, "n1", "g", 3), -1);
}
END_TEST

START_TEST(test_place_keeps_or_takes_lowest)
{
    bool placed = false;
    /* A known node without blocks: placing takes the first block. */
    rdzv_plan_node_t *n0 = rdzv_plans_node(plans, "n0");
    ck_assert_ptr_nonnull(n0);
    ck_assert_ptr_eq(rdzv_plans_node(plans, "n0"), n0);
    ck_assert_int_eq(rdzv_plans_count(plans, "n0"), 0);
    ck_assert_int_eq(rdzv_plans_place(plans, n0, "g", 1, &placed), 19500);
    ck_assert(placed);
    /* The same (group, rank) keeps its block and records nothing new. */
    ck_assert_int_eq(rdzv_plans_place(plans, n0, "g", 1, &placed), 19500);
    ck_assert(!placed);
    ck_assert_int_eq(rdzv_plans_count(plans, "n0"), 1);
    /* Another owner gets the next block, in a gap first. */
    ck_assert_int_eq(rdzv_plans_record(plans, "n0", "h", 0, 19564, 32), 0);
    ck_assert_int_eq(rdzv_plans_place(plans, n0, "g", 2, &placed), 19532);
    ck_assert_int_eq(rdzv_plans_place(plans, n0, "g", 3, &placed), 19596);
    ck_assert_int_eq(rdzv_plans_find(plans, "n0", "g", 3), 19596);
    /* Full: -1 and nothing recorded; other nodes are separate. */
    ck_assert_int_eq(rdzv_plans_place(plans, n0, "g", 4, &placed), -1);
    ck_assert(!placed);
    ck_assert_int_eq(rdzv_plans_count(plans, "n0"), 4);
    ck_assert_int_eq(rdzv_plans_place(plans, rdzv_plans_node(plans, "n1"), "g", 4, &placed), 19500);
    /* Blocks share their group's name: releasing one group keeps the
     * other's, and a name dropped and made again still matches. */
    ck_assert_int_eq(rdzv_plans_release_group(plans, "g"), 4);
    ck_assert_int_eq(rdzv_plans_find(plans, "n0", "h", 0), 19564);
    ck_assert_int_eq(rdzv_plans_place(plans, n0, "g", 1, &placed), 19500);
    ck_assert(placed);
    rdzv_plans_forget(plans, "n0", "h", 0);
    ck_assert_int_eq(rdzv_plans_find(plans, "n0", "h", 0), -1);
    ck_assert_int_eq(rdzv_plans_record(plans, "n0", "h", 0, 19532, 32), 0);
    ck_assert_int_eq(rdzv_plans_find(plans, "n0", "h", 0), 19532);
}
END_TEST

START_TEST(test_unaligned_block_skipped_to_grid)
{
    /* A block written under other settings: the next one starts on the grid. */
    ck_assert_int_eq(rdzv_plans_record(plans, "n0", "old", 0, 19500, 40), 0);
    ck_assert_int_eq(rdzv_plans_first_free(plans, "n0"), 19564);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("plans");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_new_refuses_bad_ranges);
    tcase_add_test(tc, test_first_free_is_lowest_aligned_block);
    tcase_add_test(tc, test_gap_is_reused);
    tcase_add_test(tc, test_overlap_refused);
    tcase_add_test(tc, test_exhausted);
    tcase_add_test(tc, test_find_by_owner);
    tcase_add_test(tc, test_unaligned_block_skipped_to_grid);
    tcase_add_test(tc, test_place_keeps_or_takes_lowest);
    suite_add_tcase(s, tc);
    return rdzv_check_run(s);
}
