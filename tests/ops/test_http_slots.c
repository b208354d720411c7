/* Which connections rdzvd's HTTP server keeps (rendezvous/net/http_slots.c):
 * a header has a deadline that trickling cannot move, and past the keep
 * the oldest connection gives its place to a newcomer. */
#include "check_run.h"
#include <check.h>

#include "http_slots.h"

#define DEADLINE RDZV_HTTP_HEADER_DEADLINE_MS

static int s_conns[RDZV_HTTP_CONNECTION_LIMIT + 8];

START_TEST(test_deadline_holds_whatever_trickles)
{
    rdzv_http_slots_t slots = { 0 };
    void *out[8];
    rdzv_http_slot_t *slow = rdzv_http_slots_open(&slots, &s_conns[0], 0);
    rdzv_http_slot_t *served = rdzv_http_slots_open(&slots, &s_conns[1], 10);
    rdzv_http_slots_request(&slots, served);
    /* Nothing the slow one sends moves its start: there is no call for it. */
    ck_assert_uint_eq(rdzv_http_slots_evict(&slots, DEADLINE - 1, out, 8), 0);
    ck_assert_uint_eq(rdzv_http_slots_evict(&slots, DEADLINE, out, 8), 1);
    ck_assert_ptr_eq(out[0], &s_conns[0]);
    /* Handed out once: the next look leaves it to close. */
    ck_assert_uint_eq(rdzv_http_slots_evict(&slots, 10 * DEADLINE, out, 8), 0);
    rdzv_http_slots_close(&slots, slow);
    /* Kept alive after its response: its next header has a new deadline. */
    rdzv_http_slots_response(&slots, served, 20 * DEADLINE);
    ck_assert_uint_eq(rdzv_http_slots_evict(&slots, 21 * DEADLINE - 1, out, 8), 0);
    ck_assert_uint_eq(rdzv_http_slots_evict(&slots, 21 * DEADLINE, out, 8), 1);
    ck_assert_ptr_eq(out[0], &s_conns[1]);
    rdzv_http_slots_close(&slots, served);
    ck_assert_uint_eq(slots.count, 0);
    ck_assert_ptr_null(slots.head);
}
END_TEST

START_TEST(test_full_gives_the_oldest_place)
{
    rdzv_http_slots_t slots = { 0 };
    rdzv_http_slot_t *v[RDZV_HTTP_SLOTS_KEEP + 1];
    void *out[8];
    for (int i = 0; i < RDZV_HTTP_SLOTS_KEEP; i++)
        v[i] = rdzv_http_slots_open(&slots, &s_conns[i], i);
    ck_assert_uint_eq(rdzv_http_slots_evict(&slots, 1000, out, 8), 0);
    /* One more: the oldest goes. */
    v[RDZV_HTTP_SLOTS_KEEP] = rdzv_http_slots_open(&slots, &s_conns[RDZV_HTTP_SLOTS_KEEP], 1001);
    ck_assert_uint_eq(rdzv_http_slots_evict(&slots, 1001, out, 8), 1);
    ck_assert_ptr_eq(out[0], &s_conns[0]);
    ck_assert_uint_eq(slots.count, RDZV_HTTP_SLOTS_KEEP);
    for (int i = 0; i <= RDZV_HTTP_SLOTS_KEEP; i++)
        rdzv_http_slots_close(&slots, v[i]);
    ck_assert_uint_eq(slots.count, 0);
}
END_TEST

/* Connections that asked and read their answers a byte at a time: the
 * deadline spares them, a newcomer does not, and the newcomer keeps its
 * place (before, with every other place being answered, it was evicted
 * itself). */
START_TEST(test_full_of_slow_readers_gives_the_oldest_place)
{
    rdzv_http_slots_t slots = { 0 };
    rdzv_http_slot_t *v[RDZV_HTTP_SLOTS_KEEP + 1];
    void *out[8];
    for (int i = 0; i < RDZV_HTTP_SLOTS_KEEP; i++) {
        v[i] = rdzv_http_slots_open(&slots, &s_conns[i], i);
        rdzv_http_slots_request(&slots, v[i]);
    }
    ck_assert_uint_eq(rdzv_http_slots_evict(&slots, 10 * DEADLINE, out, 8), 0);
    v[RDZV_HTTP_SLOTS_KEEP] = rdzv_http_slots_open(&slots, &s_conns[RDZV_HTTP_SLOTS_KEEP],
                                                   10 * DEADLINE);
    ck_assert_uint_eq(rdzv_http_slots_evict(&slots, 10 * DEADLINE, out, 8), 1);
    ck_assert_ptr_eq(out[0], &s_conns[0]);
    ck_assert_uint_eq(slots.count, RDZV_HTTP_SLOTS_KEEP);
    for (int i = 0; i <= RDZV_HTTP_SLOTS_KEEP; i++)
        rdzv_http_slots_close(&slots, v[i]);
    ck_assert_uint_eq(slots.count, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("http_slots");
    TCase *tc = tcase_create("rdzv_http_slots_evict");
    tcase_add_test(tc, test_deadline_holds_whatever_trickles);
    tcase_add_test(tc, test_full_gives_the_oldest_place);
    tcase_add_test(tc, test_full_of_slow_readers_gives_the_oldest_place);
    suite_add_tcase(s, tc);
    return rdzv_check_run(s);
}
