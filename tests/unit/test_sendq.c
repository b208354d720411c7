/* What rdzvd does with a peer that leaves its replies unread
 * (rendezvous/net/sendq.c): the rule itself, table-driven, then real libzmq
 * sockets in-process (a ROUTER as rdzvd sets it up, and a DEALER that
 * reads or does not), where a reply counts as unread until the DEALER
 * takes it. */
#include "check_run.h"
#include <check.h>
#include <czmq.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_proto.h"
#include "sendq.h"

#define KIB 1024
#define MIB (1024 * KIB)

START_TEST(test_decide)
{
    static const struct {
        size_t queued, busy, total, len;
        rdzv_sendq_verdict_t want;
        const char *why;
    } cases[] = {
        { 0, 0, 0, 100, RDZV_SENDQ_SEND, "nothing unread" },
        { 0, 0, 1024 * MIB, 900 * KIB, RDZV_SENDQ_SEND, "nothing unread: always, whatever the total" },
        { 1, 0, 0, RDZV_SENDQ_PEER_BYTES - 1, RDZV_SENDQ_SEND, "up to the peer's budget" },
        { 1, 0, 0, RDZV_SENDQ_PEER_BYTES, RDZV_SENDQ_BUSY, "one byte past it" },
        { RDZV_SENDQ_PEER_BYTES, 0, 0, 0, RDZV_SENDQ_SEND, "a request at the budget" },
        { RDZV_SENDQ_PEER_BYTES + 1, 0, 0, 0, RDZV_SENDQ_BUSY, "a request past it" },
        { 200 * KIB, 0, RDZV_SENDQ_TOTAL_BYTES, 1, RDZV_SENDQ_BUSY, "the total spent" },
        { 1 * KIB, 0, RDZV_SENDQ_TOTAL_BYTES, 1 * KIB, RDZV_SENDQ_SEND,
          "the total spent, within the fair share" },
        { RDZV_SENDQ_FAIR_BYTES, 0, RDZV_SENDQ_TOTAL_BYTES, 1, RDZV_SENDQ_BUSY,
          "the total spent, past the fair share" },
        { 2 * MIB, RDZV_SENDQ_BUSY_BYTES - 100, 0, 0, RDZV_SENDQ_DROP, "busy errors unread" },
        { 2 * MIB, 0, 0, 0, RDZV_SENDQ_BUSY, "no busy error unread yet" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rdzv_sendq_load_t load = { cases[i].queued, cases[i].busy, cases[i].total };
        ck_assert_msg(rdzv_sendq_decide(load, cases[i].len) == cases[i].want, "%s", cases[i].why);
    }
}
END_TEST

typedef struct {
    void *router, *dealer;
    rdzv_peer_t peer;
    rdzv_sendq_t *q;
} s_pair_t;

/* A ROUTER as server.c makes it and a DEALER on inproc; the DEALER's
 * first message tells the ROUTER its identity. */
static void s_pair(s_pair_t *p)
{
    zsys_handler_set(NULL);
    void *ctx = zsys_init();
    p->router = zmq_socket(ctx, ZMQ_ROUTER);
    p->dealer = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0, one = 1;
    zmq_setsockopt(p->router, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(p->router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(p->dealer, ZMQ_RCVHWM, &zero, sizeof zero);
    ck_assert_int_eq(zmq_bind(p->router, "inproc://sendq"), 0);
    ck_assert_int_eq(zmq_connect(p->dealer, "inproc://sendq"), 0);
    ck_assert_int_eq(zmq_send(p->dealer, "hi", 2, 0), 2);
    unsigned char id[RDZV_PEER_MAX];
    int len = zmq_recv(p->router, id, sizeof id, 0);
    ck_assert_int_gt(len, 0);
    char body[8];
    ck_assert_int_eq(zmq_recv(p->router, body, sizeof body, 0), 2);
    memset(&p->peer, 0, sizeof p->peer);
    ck_assert_int_eq(rdzv_peer_set_id(&p->peer, id, (size_t) len), 0);
    p->q = rdzv_sendq_new();
    ck_assert_ptr_nonnull(p->q);
}

static void s_unpair(s_pair_t *p)
{
    rdzv_sendq_destroy(&p->q);
    rdzv_peer_clear(&p->peer);
    int zero = 0;
    zmq_setsockopt(p->router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(p->dealer, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(p->dealer);
    zmq_close(p->router);
}

static char *s_reply(int64_t id, size_t value_bytes)
{
    char *text = malloc(value_bytes + 64);
    int n = snprintf(text, 64, "{\"v\":1,\"id\":%lld,\"value\":\"", (long long) id);
    memset(text + n, 'x', value_bytes);
    strcpy(text + n + value_bytes, "\"}");
    return text;
}

/* Reads everything the DEALER has; returns how many messages. */
static int s_read_all(void *dealer, int *busy)
{
    static char buf[128 * KIB];
    int n = 0;
    for (int len; (len = zmq_recv(dealer, buf, sizeof buf - 1, ZMQ_DONTWAIT)) >= 0; n++) {
        buf[len < (int) sizeof buf - 1 ? len : (int) sizeof buf - 1] = '\0';
        *busy += strstr(buf, "\"code\":\"" RDZV_E_BUSY "\"") != NULL;
    }
    return n;
}

START_TEST(test_reader_keeps_nothing)
{
    s_pair_t p;
    s_pair(&p);
    /* 500 replies in flight, far more than libzmq's old count of 64. */
    for (int i = 0; i < 500; i++) {
        p.peer.req = i;
        ck_assert_int_eq(rdzv_sendq_send(p.q, p.router, &p.peer, s_reply(i, 100)),
                         RDZV_SENDQ_SEND);
    }
    ck_assert_uint_gt(rdzv_sendq_total(), 500 * 100);
    int busy = 0;
    ck_assert_int_eq(s_read_all(p.dealer, &busy), 500);
    ck_assert_int_eq(busy, 0);
    ck_assert_uint_eq(rdzv_sendq_total(), 0);        /* read: nothing unread */
    rdzv_sendq_sweep(p.q);
    ck_assert_int_eq(rdzv_sendq_intake(p.q, &p.peer), RDZV_SENDQ_SEND);
    s_unpair(&p);
}
END_TEST

START_TEST(test_non_reader_is_not_fed)
{
    s_pair_t p;
    s_pair(&p);
    int count[3] = { 0 };
    rdzv_sendq_verdict_t last = RDZV_SENDQ_SEND;
    for (int i = 0; i < 200; i++) {
        p.peer.req = i;
        int v = rdzv_sendq_send(p.q, p.router, &p.peer, s_reply(i, RDZV_MAX_VALUE));
        ck_assert_int_ge(v, (int) last);              /* send, then busy, then drop */
        last = (rdzv_sendq_verdict_t) v;
        count[v]++;
        ck_assert_uint_le(rdzv_sendq_total(), RDZV_SENDQ_PEER_BYTES + RDZV_SENDQ_BUSY_BYTES);
    }
    ck_assert_int_eq(count[RDZV_SENDQ_SEND], RDZV_SENDQ_PEER_BYTES / (RDZV_MAX_VALUE + 200));
    ck_assert_int_gt(count[RDZV_SENDQ_BUSY], 0);
    ck_assert_int_gt(count[RDZV_SENDQ_DROP], 0);
    /* What went out arrives, every busy error with it; then it is fed again. */
    int busy = 0;
    ck_assert_int_eq(s_read_all(p.dealer, &busy), count[RDZV_SENDQ_SEND] + count[RDZV_SENDQ_BUSY]);
    ck_assert_int_eq(busy, count[RDZV_SENDQ_BUSY]);
    ck_assert_uint_eq(rdzv_sendq_total(), 0);
    ck_assert_int_eq(rdzv_sendq_intake(p.q, &p.peer), RDZV_SENDQ_SEND);
    s_unpair(&p);
}
END_TEST

START_TEST(test_gone_peer)
{
    s_pair_t p;
    s_pair(&p);
    rdzv_peer_t stranger = { 0 };
    ck_assert_int_eq(rdzv_peer_set_id(&stranger, (const unsigned char *) "nobody", 6), 0);
    ck_assert_int_eq(rdzv_sendq_send(p.q, p.router, &stranger, s_reply(1, 10)), -1);
    ck_assert_int_eq(zmq_errno(), EHOSTUNREACH);
    ck_assert_uint_eq(rdzv_sendq_total(), 0);         /* given back at once */
    rdzv_peer_clear(&stranger);
    s_unpair(&p);
}
END_TEST

static Suite *s_suite(void)
{
    Suite *s = suite_create("sendq");
    TCase *rule = tcase_create("decide");
    tcase_add_test(rule, test_decide);
    suite_add_tcase(s, rule);
    TCase *send = tcase_create("send");
    tcase_add_test(send, test_reader_keeps_nothing);
    tcase_add_test(send, test_non_reader_is_not_fed);
    tcase_add_test(send, test_gone_peer);
    suite_add_tcase(s, send);
    return s;
}

int main(void)
{
    return rdzv_check_run(s_suite());
}
