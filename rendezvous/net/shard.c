#include "shard.h"
#include "fds.h"
#include "log.h"
#include "trace.h"
#include "rdzv_proto.h"
#include "rdzv_util.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#define S_BATCH 4096                 /* requests handled before one commit */
#define S_TICK_MS 100
#define S_SWEEP_MS 1000              /* how often idle peers' counts go (sendq.h) */
#define S_COMMIT_WINDOW_MS 2         /* longest a reply waits for batch-mates */
/* The window only opens while commits follow each other this closely: a
 * burst then pays a few fsyncs rather than one per trickle, and a lone
 * request (the last rank of a group, say) is committed and answered at once. */
#define S_BUSY_MS 10

int rdzv_shard_init(rdzv_shard_t *self, rdzv_shard_set_t *set, int index, zsock_t *router)
{
    self->set = set;
    self->index = index;
    self->router = router;
    self->sock = zsock_resolve(router);
    self->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&self->lock, NULL);
    self->sendq = rdzv_sendq_new();
    if (!self->sendq || rdzv_conns_init(&self->conns, set->core, self->sock, index, LONG_MAX) < 0)
        return -1;
    return self->wake_fd < 0 ? -1 : 0;
}

void rdzv_shard_destroy(rdzv_shard_t *self)
{
    zsock_destroy(&self->router);
    rdzv_conns_destroy(&self->conns);
    rdzv_sendq_destroy(&self->sendq);
    if (self->wake_fd > 0)
        close(self->wake_fd);
    for (size_t i = 0; i < self->in_len; i++)
        rdzv_reply_clear(&self->inbox[i]);
    free(self->inbox);
    pthread_mutex_destroy(&self->lock);
}

static void *s_thread(void *arg)
{
    rdzv_shard_loop(arg);
    return NULL;
}

int rdzv_shard_start(rdzv_shard_t *self)
{
    if (pthread_create(&self->thread, NULL, s_thread, self) != 0)
        return -1;
    self->started = true;
    return 0;
}

void rdzv_shard_join(rdzv_shard_t *self)
{
    if (self->started)
        pthread_join(self->thread, NULL);
    self->started = false;
}

void rdzv_shard_wake(rdzv_shard_t *self)
{
    if (self->wake_fd > 0)
        eventfd_write(self->wake_fd, 1);
}

/* Formats assignments, here in the shard owning their connections and
 * outside the core's lock (reply.h); on a shard's own thread while the
 * journal syncs. An assignment that cannot be formatted (out of memory)
 * is dropped. */
static void s_render(rdzv_reply_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (rdzv_reply_render(&v[i]) < 0)
            rdzv_reply_clear(&v[i]);
}

/* Sends formatted replies and clears them; each text becomes the message
 * itself (libzmq frees it once written, sendq.c): a copy of every reply of
 * a release would otherwise be alive beside its text until the send. What
 * a peer that does not read gets instead is sendq.h's to say; a peer that
 * vanished is dropped by the ROUTER (ZMQ_ROUTER_MANDATORY says so). */
static void s_send_all(rdzv_shard_t *self, rdzv_reply_t *v, size_t n)
{
    unsigned dropped[RDZV_DROP_REASONS] = { 0 };
    for (size_t i = 0; i < n; i++) {
        rdzv_reply_t *reply = &v[i];
        if (reply->text) {
            int rc = rdzv_sendq_send(self->sendq, self->sock, &reply->peer, reply->text);
            reply->text = NULL;              /* the message's, or freed */
            if (rc < 0)
                dropped[RDZV_DROP_GONE]++;
            else if (rc == RDZV_SENDQ_BUSY)
                dropped[RDZV_DROP_BUSY]++;
            else if (rc == RDZV_SENDQ_DROP)
                dropped[RDZV_DROP_SLOW_READER]++;
        }
        rdzv_reply_clear(reply);
    }
    for (int r = 0; r < RDZV_DROP_REASONS; r++)
        if (dropped[r])
            rdzv_core_count_dropped(self->set->core, (rdzv_drop_reason_t) r, dropped[r]);
}

/* The inbox grown to hold want replies; NULL (inbox untouched) if out of memory. */
static rdzv_reply_t *s_grow(rdzv_reply_t *inbox, size_t *cap, size_t want)
{
    size_t c = *cap ? *cap : 256;
    while (c < want)
        c *= 2;
    rdzv_reply_t *grown = realloc(inbox, c * sizeof *grown);
    if (grown)
        *cap = c;
    return grown;
}

/* Appends n replies to shard to's inbox, taking over the array: an empty
 * inbox takes the array itself, else its replies are appended (and the
 * array freed). They wait for the journal up to gate; gates only grow, so
 * the inbox waits for the last one. Returns whether to must be woken: a
 * non-empty inbox has a wake-up pending already. */
static bool s_hand_over(rdzv_shard_t *to, rdzv_reply_t *v, size_t n, uint64_t gate)
{
    pthread_mutex_lock(&to->lock);
    if (gate > to->in_gate)
        to->in_gate = gate;
    bool was_empty = to->in_len == 0;
    rdzv_reply_t *room = to->in_len + n <= to->in_cap ? to->inbox : NULL;
    if (was_empty) {
        free(to->inbox);
        to->inbox = v;
        to->in_len = to->in_cap = n;
        v = NULL;
    } else if (room || (room = s_grow(to->inbox, &to->in_cap, to->in_len + n))) {
        to->inbox = room;
        memcpy(to->inbox + to->in_len, v, n * sizeof *v);
        to->in_len += n;
    } else {
        for (size_t i = 0; i < n; i++)       /* out of memory: they are lost */
            rdzv_reply_clear(&v[i]);
    }
    pthread_mutex_unlock(&to->lock);
    free(v);
    return was_empty;
}

/* Hands the other shards their replies (the core keeps them apart by
 * shard), then formats ours while the journal syncs, waits for it, and
 * sends them. */
static void s_dispatch(rdzv_shard_t *self, rdzv_outbox_t *out, uint64_t gate)
{
    rdzv_shard_set_t *set = self->set;
    size_t others = 0;
    for (int t = 0; t < set->count; t++) {
        if (t == self->index || out[t].len == 0)
            continue;
        others += out[t].len;
        if (s_hand_over(&set->shards[t], out[t].v, out[t].len, gate))
            rdzv_shard_wake(&set->shards[t]);
    }
    int64_t t_queued = rdzv_trace_ns();
    rdzv_outbox_t *mine = &out[self->index];
    s_render(mine->v, mine->len);
    if (mine->len)                   /* a tick with nothing to send waits for nothing */
        rdzv_core_wait_or_refuse(set->core, gate, mine->v, mine->len);
    int64_t t_durable = rdzv_trace_ns();
    s_send_all(self, mine->v, mine->len);
    free(mine->v);
    if (others + mine->len >= RDZV_TRACE_MIN) {
        RDZV_TRACE("queued", self->index, t_queued, others);
        RDZV_TRACE("durable", self->index, t_durable, others + mine->len);
        RDZV_TRACE("own_sent", self->index, rdzv_trace_ns(), mine->len);
    }
}

static void s_commit_and_send(rdzv_shard_t *self, bool tick)
{
    rdzv_shard_set_t *set = self->set;
    rdzv_core_t *core = set->core;
    rdzv_commit_t commit;
    int64_t now = rdzv_now_ms();
    rdzv_core_begin(core, now);
    if (tick)
        rdzv_core_tick(core);
    int64_t t_commit = rdzv_trace_ns();
    /* The lock goes before the journal is durable: whatever a request
     * handled meanwhile sees is written, and its replies wait for a gate
     * at or past this one. */
    rdzv_core_end(core, &commit);
    int64_t t_written = rdzv_trace_ns();
    if (commit.had_records)
        atomic_store(&set->last_commit_ms, now);
    size_t count = 0;
    for (int t = 0; t < RDZV_MAX_SHARDS; t++) {
        assert(t < set->count || commit.out[t].len == 0);
        count += commit.out[t].len;
    }
    if (count >= RDZV_TRACE_MIN && !tick) {
        RDZV_TRACE("got", self->index, self->trace_got, count);
        RDZV_TRACE("handled", self->index, self->trace_handled, count);
        RDZV_TRACE("commit_start", self->index, t_commit, count);
        RDZV_TRACE("commit_end", self->index, t_written, count);
    }
    /* stderr is fully buffered (rdzvd.c): one write per batch, not per line. */
    fflush(stderr);
    s_dispatch(self, commit.out, commit.gate);
}

static void s_flush_inbox(rdzv_shard_t *self)
{
    int64_t t_start = rdzv_trace_ns();
    eventfd_t ignored;
    /* Read the wake-up before taking the inbox: a reply queued after the
     * take then wakes us again. */
    eventfd_read(self->wake_fd, &ignored);
    pthread_mutex_lock(&self->lock);
    rdzv_reply_t *in = self->inbox;
    size_t count = self->in_len;
    uint64_t gate = self->in_gate;
    self->in_gate = 0;
    self->inbox = NULL;
    self->in_len = self->in_cap = 0;
    pthread_mutex_unlock(&self->lock);
    s_render(in, count);
    if (count)
        rdzv_core_wait_or_refuse(self->set->core, gate, in, count);
    int64_t t_durable = rdzv_trace_ns();
    s_send_all(self, in, count);
    free(in);
    if (count >= RDZV_TRACE_MIN / 8) {
        RDZV_TRACE("inbox_start", self->index, t_start, count);
        RDZV_TRACE("inbox_durable", self->index, t_durable, count);
        RDZV_TRACE("inbox_end", self->index, rdzv_trace_ns(), count);
    }
}

static void s_drain_frames(void *sock)
{
    int more = 1;
    size_t size = sizeof more;
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &size) == 0 && more) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT);
        zmq_msg_close(&msg);
    }
}

/* Receives and parses up to max [identity][payload] messages outside the
 * core's lock: JSON parsing runs on every shard at once. */
static int s_recv_batch(rdzv_shard_t *self, int max)
{
    int n = 0;
    while (n < max) {
        rdzv_shard_request_t *r = &self->batch[n];
        unsigned char id[RDZV_PEER_MAX];
        int len = zmq_recv(self->sock, id, sizeof id, ZMQ_DONTWAIT);
        if (len < 0)
            break;
        rdzv_peer_set_id(&r->peer, id, (size_t) len);   /* cleared in s_handle_batch */
        r->peer.req = 0;
        r->peer.shard = self->index;
        zmq_msg_t body;
        zmq_msg_init(&body);
        if (zmq_msg_recv(&body, self->sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&body);
            rdzv_peer_clear(&r->peer);
            continue;
        }
        r->peer.fd = zmq_msg_get(&body, ZMQ_SRCFD);
        r->extra_frames = zmq_msg_more(&body);
        if (r->extra_frames)
            s_drain_frames(self->sock);
        /* A peer that leaves its replies unread is not fed more (sendq.h):
         * refused before the request costs anything. */
        r->intake = rdzv_sendq_intake(self->sendq, &r->peer);
        if (r->intake == RDZV_SENDQ_DROP) {
            zmq_msg_close(&body);
            rdzv_peer_clear(&r->peer);
            rdzv_core_count_dropped(self->set->core, RDZV_DROP_SLOW_READER, 1);
            continue;
        }
        if (!r->extra_frames)
            rdzv_core_parse(self->set->core, zmq_msg_data(&body), zmq_msg_size(&body),
                            &r->parsed);
        zmq_msg_close(&body);
        n++;
    }
    return n;
}

/* Answers a request from a peer that leaves too much unread (sendq.h)
 * without handling it: whatever it asked changes nothing. */
static void s_refuse_busy(rdzv_core_t *core, rdzv_shard_request_t *r)
{
    r->peer.req = r->parsed.req.id;          /* kept by a failed parse too */
    rdzv_core_error(core, &r->peer, RDZV_E_BUSY, "replies to this connection are unread: "
                    "read them before asking more");
    if (r->parsed.rc >= 0)
        rdzv_request_clear(&r->parsed.req);
}

/* What to do after a batch: commit now, take what has come, or wait up to
 * the window for more. */
typedef enum { S_COMMIT, S_READ_ON, S_WAIT_MORE } s_next_t;

/* Handles a received batch under the core's lock; returns S_WAIT_MORE when
 * records wait for a commit, nothing urgent waits on them, and the shard
 * is in a busy period; S_COMMIT when something urgent does. */
static s_next_t s_handle_batch(rdzv_shard_t *self, int n)
{
    rdzv_core_t *core = self->set->core;
    int64_t now = rdzv_now_ms();
    rdzv_core_begin(core, now);
    for (int i = 0; i < n; i++) {
        rdzv_shard_request_t *r = &self->batch[i];
        if (r->extra_frames)
            rdzv_core_error(core, &r->peer, RDZV_E_BAD_JSON, "a request is exactly one frame");
        else if (r->intake == RDZV_SENDQ_BUSY)
            s_refuse_busy(core, r);
        else
            rdzv_core_handle(core, &r->peer, &r->parsed);
        rdzv_peer_clear(&r->peer);   /* whatever keeps it made its own copy */
    }
    rdzv_core_queued_t queued = rdzv_core_defer(core);
    bool busy = now - atomic_load(&self->set->last_commit_ms) <= S_BUSY_MS;
    if (queued == RDZV_CORE_URGENT)
        return S_COMMIT;
    return queued == RDZV_CORE_QUEUED && busy ? S_WAIT_MORE : S_READ_ON;
}

/* Waits up to ms for more requests, sending queued replies meanwhile. */
static void s_wait(rdzv_shard_t *self, long ms)
{
    zmq_pollitem_t items[2] = {
        { .socket = self->sock, .events = ZMQ_POLLIN },
        { .fd = self->wake_fd, .events = ZMQ_POLLIN },
    };
    if (zmq_poll(items, 2, ms) > 0 && (items[1].revents & ZMQ_POLLIN))
        s_flush_inbox(self);
}

/* Group commit: while requests keep arriving in a busy period, keep
 * handling them for up to S_COMMIT_WINDOW_MS before the one commit. */
static void s_on_router(rdzv_shard_t *self)
{
    int handled = 0;
    s_next_t next = S_READ_ON;
    int64_t until = 0;
    for (;;) {
        int want = S_BATCH - handled < RDZV_SHARD_RECV_BATCH ? S_BATCH - handled
                                                             : RDZV_SHARD_RECV_BATCH;
        int n = s_recv_batch(self, want);
        if (n > 0) {
            if (!handled)
                self->trace_got = rdzv_trace_ns();
            next = s_handle_batch(self, n);
            self->trace_handled = rdzv_trace_ns();
            handled += n;
        }
        if (handled >= S_BATCH || next == S_COMMIT)
            break;
        if (n == want)
            continue;
        if (next != S_WAIT_MORE)
            break;
        int64_t now = rdzv_now_ms();
        if (!until)
            until = now + S_COMMIT_WINDOW_MS;
        if (now >= until)
            break;
        s_wait(self, (long) (until - now));
    }
    s_commit_and_send(self, false);
}

/* At the limit on open files libzmq can accept nobody and rdzvd's ranks get
 * no reply (conns.h keeps connections below it): say when it comes close,
 * once a minute at most, and on /metrics. */
static void s_watch_fds(rdzv_shard_set_t *set, int64_t now, int64_t *next_check,
                        int64_t *next_log)
{
    if (now < *next_check)
        return;
    *next_check = now + 1000;
    struct rlimit r;
    long limit = getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY
                 ? (long) r.rlim_cur : -1;
    bool shortage = limit > 0 && rdzv_fds_short(rdzv_fds_reserve(limit));
    rdzv_core_set_fds_short(set->core, shortage, limit);
    if (shortage && now >= *next_log) {
        *next_log = now + 60000;
        rdzv_core_log("fds", "fewer than %d of %ld open files are left: connections beyond "
                      "--max-connections %ld are closed (raise the limit: LimitNOFILE, "
                      "ulimit -n)", rdzv_fds_reserve(limit), limit, set->shards[0].conns.max);
    }
}

void rdzv_shard_loop(rdzv_shard_t *self)
{
    int64_t next_fds = 0, next_fds_log = 0;
    rdzv_shard_set_t *set = self->set;
    int64_t next_tick = rdzv_now_ms() + S_TICK_MS, next_sweep = 0;
    while (!atomic_load(&set->stopping)) {
        if (self->index == 0 && zsys_interrupted)
            break;
        int64_t now = rdzv_now_ms();
        if (now >= next_sweep) {
            rdzv_sendq_sweep(self->sendq);
            next_sweep = now + S_SWEEP_MS;
        }
        /* Shard 0 wakes for the core's timers; the others only for work. */
        long timeout = -1;
        if (self->index == 0)
            timeout = next_tick > now ? (long) (next_tick - now) : 0;
        zmq_pollitem_t items[3] = {
            { .socket = self->sock, .events = ZMQ_POLLIN },
            { .fd = self->wake_fd, .events = ZMQ_POLLIN },
            { .socket = self->conns.monitor, .events = ZMQ_POLLIN },
        };
        int rc = zmq_poll(items, 3, timeout);
        if (rc < 0 && zmq_errno() != EINTR)
            break;
        if (rc > 0 && (items[2].revents & ZMQ_POLLIN))
            rdzv_conns_on_events(&self->conns, rdzv_now_ms());
        if (rc > 0 && (items[1].revents & ZMQ_POLLIN))
            s_flush_inbox(self);
        if (rc > 0 && (items[0].revents & ZMQ_POLLIN))
            s_on_router(self);
        if (self->index == 0 && rdzv_now_ms() >= next_tick) {
            s_watch_fds(set, rdzv_now_ms(), &next_fds, &next_fds_log);
            s_commit_and_send(self, true);
            next_tick = rdzv_now_ms() + S_TICK_MS;
        }
    }
    if (self->index == 0)
        rdzv_shard_set_stop(set);
}

void rdzv_shard_set_stop(rdzv_shard_set_t *set)
{
    atomic_store(&set->stopping, 1);
    for (int i = 0; set->shards && i < set->count; i++)
        rdzv_shard_wake(&set->shards[i]);
}
