/* No reply leaves rdzvd before the journal records it depends on are
 * durable: an in-process server (the core with fsync on, four shards on a
 * loopback port) whose fdatasync is held back at the moment a group
 * completes. Its ranks, each a DEALER of its own spread over the shards,
 * must hear nothing until the sync returns, then all get their
 * assignments. 64 ranks: a large release, whose records are written and
 * synced before its replies are queued and handed between shards. */
#include "check_run.h"
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "core_state.h"   /* white-box: reads the core's state */
#include "held_sync.h"
#include "server.h"
#include "rdzv_util.h"

#define RANKS 64

static void *s_run(void *arg)
{
    rdzv_server_run(arg);
    return NULL;
}

static void s_join(void *sock, int rank)
{
    char frame[512];
    int len = snprintf(frame, sizeof frame,
                       "{\"v\":1,\"id\":%d,\"op\":\"join\",\"group\":\"gate\",\"world\":%d,"
                       "\"rank\":%d,\"host\":\"127.0.0.1\",\"node\":\"n%d\",\"session\":\"s%d\","
                       "\"timeout_ms\":30000,\"members\":false}",
                       100 + rank, RANKS, rank, rank, rank);
    ck_assert_int_eq(zmq_send(sock, frame, (size_t) len, 0), len);
}

/* Replies waiting on the ranks' sockets within ms (not read). */
static int s_readable(void **socks, int ms)
{
    zmq_pollitem_t items[RANKS];
    for (int r = 0; r < RANKS; r++)
        items[r] = (zmq_pollitem_t) { .socket = socks[r], .events = ZMQ_POLLIN };
    int n = zmq_poll(items, RANKS, ms);
    ck_assert_int_ge(n, 0);
    return n;
}

START_TEST(test_no_reply_before_durable)
{
    char dir[] = "/tmp/rdzv-gate-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    rdzv_config_t cfg = { .port_base = 19500, .ports_per_rank = 4, .port_limit = 19500 + 4 * 16,
                          .max_world = 1024, .dead_after_ms = 15000, .do_fsync = true,
                          .state_dir = dir };
    char err[256];
    rdzv_core_t *core = rdzv_core_new(&cfg, err, sizeof err);
    ck_assert_msg(core != NULL, "%s", err);
    rdzv_journal_set_sync_fn(core->journal, held_sync);
    rdzv_server_t *server = rdzv_server_new(core, "tcp://127.0.0.1:*", 4, 4, NULL, err,
                                            sizeof err);
    ck_assert_msg(server != NULL, "%s", err);
    pthread_t loop;
    ck_assert_int_eq(pthread_create(&loop, NULL, s_run, server), 0);

    void *ctx = zmq_ctx_new();
    void *socks[RANKS];
    for (int r = 0; r < RANKS; r++) {
        socks[r] = zmq_socket(ctx, ZMQ_DEALER);
        int zero = 0;
        zmq_setsockopt(socks[r], ZMQ_LINGER, &zero, sizeof zero);
        ck_assert_int_eq(zmq_connect(socks[r], rdzv_server_endpoint(server)), 0);
    }
    for (int r = 0; r < RANKS - 1; r++)
        s_join(socks[r], r);
    /* Until the first ranks' joins are all recorded and synced. */
    int64_t until = rdzv_now_ms() + 20000;
    for (bool settled = false; !settled && rdzv_now_ms() < until; usleep(1000)) {
        pthread_mutex_lock(&core->lock);
        rdzv_group_t *g = rdzv_state_group(&core->state, "gate");
        settled = g && g->joined == RANKS - 1 && !rdzv_journal_pending(core->journal)
                  && rdzv_journal_sync_busy_s(core->journal) == 0
                  && atomic_load(&held_sync_entered) == atomic_load(&held_sync_done);
        pthread_mutex_unlock(&core->lock);
    }
    ck_assert_int_eq(s_readable(socks, 0), 0);    /* a join alone is not answered */

    atomic_store(&held_sync_hold, 1);
    int entered = atomic_load(&held_sync_entered);
    s_join(socks[RANKS - 1], RANKS - 1);           /* completes the group */
    ck_assert_msg(held_sync_wait_entered(entered + 1, 10000),
                  "the completing join started no sync");
    ck_assert_int_eq(s_readable(socks, 300), 0);   /* held: nobody hears anything */

    atomic_store(&held_sync_hold, 0);
    int got = 0;
    for (int r = 0; r < RANKS; r++) {
        zmq_pollitem_t item = { .socket = socks[r], .events = ZMQ_POLLIN };
        if (zmq_poll(&item, 1, 10000) != 1)
            continue;
        char buf[4096];
        int n = zmq_recv(socks[r], buf, sizeof buf - 1, 0);
        ck_assert_int_gt(n, 0);
        buf[n < (int) sizeof buf - 1 ? n : (int) sizeof buf - 1] = '\0';
        char want[32];
        snprintf(want, sizeof want, "\"rank\":%d,", r);
        got += strstr(buf, "\"assignment\"") && strstr(buf, want);
    }
    ck_assert_int_eq(got, RANKS);

    for (int r = 0; r < RANKS; r++)
        zmq_close(socks[r]);
    zmq_ctx_term(ctx);
    rdzv_server_stop(server);
    pthread_join(loop, NULL);
    rdzv_server_destroy(&server);
    rdzv_core_destroy(&core);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gate");
    TCase *tc = tcase_create("gate");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_no_reply_before_durable);
    suite_add_tcase(s, tc);
    return rdzv_check_run(s);
}
