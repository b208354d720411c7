/* The libzmq floor: a bare ROUTER server in rdzvd's shape (its shards, I/O
 * threads, SO_REUSEPORT listeners and socket options, on plain libzmq) that
 * answers every connection with one fixed reply once `expect` requests have
 * arrived. Nothing is parsed and nothing is written to disk, so its time and
 * CPU are what libzmq itself costs per connection, beside rdzvd's. */
#include "bench.h"
#include "cpus.h"
#include "listen.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

/* rdzvd's values (server.h, rdzv_proto.h), repeated so that the floor
 * stands alone as the other benchmarks do. */
#define S_PEER_TIMEOUT_MS 30000
#define S_PEER_RCVHWM 1000
#define S_MAX_FRAME (1 << 20)
#define S_MAX_LISTENERS 64
#define S_RECV_BATCH 256             /* messages taken before polling again */

typedef struct s_floor s_floor_t;

typedef struct {
    s_floor_t *floor;
    void *sock;
    int wake_fd;
    unsigned char *ids;      /* the peers that asked: [length][identity]... */
    size_t idlen, idcap;
    bool answered;
} s_shard_t;

struct s_floor {
    size_t expect;
    atomic_size_t arrived;
    atomic_bool released;
    const char *reply;
    size_t reply_len;
    s_shard_t *shards;
    int count;
};

void bench_zmq_shape_default(bench_zmq_shape_t *shape)
{
    /* rdzvd.c's s_default_shards and main: half the usable CPUs, 2 to 8
     * shards (1 on one CPU), at least 8 listeners, twice the shards in I/O
     * threads up to the CPUs. */
    int cpus = rdzv_cpus_usable();
    int half = cpus / 2;
    shape->shards = cpus < 2 ? 1 : half < 2 ? 2 : half > 8 ? 8 : half;
    shape->listeners = shape->shards > 8 ? shape->shards : 8;
    shape->io_threads = 2 * shape->shards < cpus ? 2 * shape->shards : cpus;
}

/* server.c's s_router and s_peer_timeouts, plus the linger of 0 that rdzvd
 * gets from czmq. rdzvd sets no TCP keepalive, so libzmq's default (the
 * kernel's) stands in both. */
static void *s_router(void *ctx, int shard, const bench_zmq_shape_t *shape)
{
    void *sock = zmq_socket(ctx, ZMQ_ROUTER);
    if (!sock)
        return NULL;
    int64_t max = S_MAX_FRAME;
    int timeout = S_PEER_TIMEOUT_MS, ivl = S_PEER_TIMEOUT_MS / 3, zero = 0, one = 1;
    int handshake = ivl / 2;     /* server.c says why half the interval */
    int rcvhwm = S_PEER_RCVHWM, backlog = RDZV_LISTEN_BACKLOG;
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof max);
    zmq_setsockopt(sock, ZMQ_HANDSHAKE_IVL, &handshake, sizeof handshake);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_TIMEOUT, &timeout, sizeof timeout);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_TTL, &timeout, sizeof timeout);
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(sock, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(sock, ZMQ_RCVHWM, &rcvhwm, sizeof rcvhwm);
    zmq_setsockopt(sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(sock, ZMQ_BACKLOG, &backlog, sizeof backlog);
    uint64_t affinity = rdzv_io_affinity(shard, shape->shards, shape->io_threads);
    if (shape->shards > 1)
        zmq_setsockopt(sock, ZMQ_AFFINITY, &affinity, sizeof affinity);
    return sock;
}

/* Deals the listeners to the shards in turn, as server.c's s_bind; returns
 * the port, or -1. */
static int s_bind(s_floor_t *fl, int listeners)
{
    int fds[S_MAX_LISTENERS];
    char err[256], ep[256];
    if (listeners < 1 || listeners > S_MAX_LISTENERS
        || rdzv_listen_group("tcp://127.0.0.1:*", listeners, fds, err, sizeof err) < 0)
        return -1;
    for (int i = 0; i < listeners; i++) {
        void *sock = fl->shards[i % fl->count].sock;
        /* libzmq takes the listening socket as it is (and closes it). */
        zmq_setsockopt(sock, ZMQ_USE_FD, &fds[i], sizeof fds[i]);
        if (zmq_bind(sock, "tcp://127.0.0.1:*") < 0)
            return -1;
    }
    size_t len = sizeof ep;
    if (zmq_getsockopt(fl->shards[0].sock, ZMQ_LAST_ENDPOINT, ep, &len) < 0 || !strrchr(ep, ':'))
        return -1;
    return atoi(strrchr(ep, ':') + 1);
}

/* Keeps a peer's identity for the release; -1 if out of memory. */
static int s_remember(s_shard_t *sh, const unsigned char *id, size_t len)
{
    if (sh->idlen + 1 + len > sh->idcap) {
        size_t cap = sh->idcap ? sh->idcap * 2 : 4096;
        unsigned char *p = realloc(sh->ids, cap);
        if (!p)
            return -1;
        sh->ids = p;
        sh->idcap = cap;
    }
    sh->ids[sh->idlen] = (unsigned char) len;
    memcpy(sh->ids + sh->idlen + 1, id, len);
    sh->idlen += 1 + len;
    return 0;
}

/* Everyone is here: every shard answers its own peers, as rdzvd's do. */
static void s_release(s_floor_t *fl)
{
    atomic_store(&fl->released, true);
    for (int i = 0; i < fl->count; i++)
        eventfd_write(fl->shards[i].wake_fd, 1);
}

static void s_answer(s_shard_t *sh)
{
    s_floor_t *fl = sh->floor;
    for (size_t at = 0; at < sh->idlen; at += 1 + sh->ids[at]) {
        /* A peer gone is refused at its identity (ZMQ_ROUTER_MANDATORY). */
        if (zmq_send(sh->sock, sh->ids + at + 1, sh->ids[at], ZMQ_SNDMORE) >= 0)
            zmq_send_const(sh->sock, fl->reply, fl->reply_len, 0);
    }
    sh->answered = true;
}

/* Takes what has come: each peer's identity, its request unread. */
static void s_take(s_shard_t *sh)
{
    s_floor_t *fl = sh->floor;
    for (int k = 0; k < S_RECV_BATCH; k++) {
        unsigned char id[255];
        int len = zmq_recv(sh->sock, id, sizeof id, ZMQ_DONTWAIT);
        if (len < 0)
            return;
        zmq_msg_t body;
        zmq_msg_init(&body);
        int rc = zmq_msg_recv(&body, sh->sock, ZMQ_DONTWAIT);
        zmq_msg_close(&body);
        if (rc < 0 || len > (int) sizeof id || s_remember(sh, id, (size_t) len) < 0)
            continue;
        if (atomic_fetch_add(&fl->arrived, 1) + 1 == fl->expect)
            s_release(fl);
    }
}

static void *s_shard_loop(void *arg)
{
    s_shard_t *sh = arg;
    for (;;) {
        zmq_pollitem_t items[2] = {
            { .socket = sh->sock, .events = ZMQ_POLLIN },
            { .fd = sh->wake_fd, .events = ZMQ_POLLIN },
        };
        if (zmq_poll(items, 2, -1) < 0)
            continue;
        if (items[0].revents & ZMQ_POLLIN)
            s_take(sh);
        if (items[1].revents & ZMQ_POLLIN) {
            eventfd_t ignored;
            eventfd_read(sh->wake_fd, &ignored);
        }
        if (!sh->answered && atomic_load(&sh->floor->released))
            s_answer(sh);
    }
    return NULL;
}

/* The child: builds the server, says its port on ready_fd (0: failed),
 * serves until SIGTERM. */
static void s_serve(size_t expect, size_t reply_bytes, const bench_zmq_shape_t *shape,
                    int ready_fd)
{
    /* rdzvd's heap settings (rdzvd.c): they cut the page faults of the
     * ~28 KiB of fresh heap libzmq takes per connection. */
    mallopt(M_TOP_PAD, 64 << 20);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    char *reply = malloc(reply_bytes ? reply_bytes : 1);
    memset(reply, 'x', reply_bytes);
    s_floor_t fl = { .expect = expect, .reply = reply, .reply_len = reply_bytes,
                     .count = shape->shards };
    fl.shards = calloc((size_t) fl.count, sizeof *fl.shards);
    void *ctx = zmq_ctx_new();
    int port = 0;
    if (ctx && fl.shards && zmq_ctx_set(ctx, ZMQ_IO_THREADS, shape->io_threads) == 0) {
        int made = 0;
        for (; made < fl.count; made++) {
            s_shard_t *sh = &fl.shards[made];
            *sh = (s_shard_t) { .floor = &fl, .sock = s_router(ctx, made, shape),
                                .wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC) };
            if (!sh->sock || sh->wake_fd < 0)
                break;
        }
        port = made == fl.count ? s_bind(&fl, shape->listeners) : -1;
    }
    if (port <= 0)
        port = 0;
    if (write(ready_fd, &port, sizeof port) != (ssize_t) sizeof port || !port)
        _exit(1);
    close(ready_fd);
    for (int i = 1; i < fl.count; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, s_shard_loop, &fl.shards[i]) != 0)
            _exit(1);
    }
    s_shard_loop(&fl.shards[0]);
    _exit(0);
}

int bench_zmq_floor_spawn(size_t expect, size_t reply_bytes, const bench_zmq_shape_t *shape,
                          int *port)
{
    if (expect < 1 || shape->shards < 1 || shape->io_threads < 1
        || shape->listeners < shape->shards)
        return -1;
    int ready[2];
    if (pipe(ready) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(ready[0]);
        signal(SIGTERM, SIG_DFL);
        s_serve(expect, reply_bytes, shape, ready[1]);
    }
    close(ready[1]);
    int p = 0;
    ssize_t r = pid > 0 ? read(ready[0], &p, sizeof p) : -1;
    close(ready[0]);
    if (r != (ssize_t) sizeof p || p <= 0) {
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        return -1;
    }
    *port = p;
    return pid;
}
