/* The lean rank simulator: ZMTP 3.0 (rfc.zeromq.org spec 23, NULL
 * mechanism, a DEALER) and rdzv's JSON over plain non-blocking sockets and
 * epoll, many ranks per process (raw requests for the floor, floor.c). It
 * does not link libzmq, so its cost is small next to the server's. */
#include "bench.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define ZMTP_GREETING 64
#define CONNECT_CHUNK 64         /* connects issued between two epoll passes */

int64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

long bench_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
    return (long) rl.rlim_cur;
}

void bench_rank_host(int global, char *buf, size_t len)
{
    snprintf(buf, len, "127.%d.%d.%d", (global >> 16) & 255, (global >> 8) & 255, global & 255);
}

char *bench_join_json(const char *group, int world, int rank, const char *host, const char *node,
                      const char *session, bool members, int timeout_ms)
{
    char *s = NULL;
    if (asprintf(&s, "{\"v\":1,\"op\":\"join\",\"id\":1,\"group\":\"%s\",\"world\":%d,"
                 "\"rank\":%d,\"host\":\"%s\",\"node\":\"%s\",\"session\":\"%s\","
                 "\"timeout_ms\":%d%s}",
                 group, world, rank, host, node, session, timeout_ms,
                 members ? "" : ",\"members\":false") < 0)
        return NULL;
    return s;
}

int bench_check_reply(const char *text, size_t len, int rank, int *port)
{
    /* The reply is not NUL-terminated on the wire; copy what we look at. */
    char buf[8192];
    size_t n = len < sizeof buf - 1 ? len : sizeof buf - 1;
    memcpy(buf, text, n);
    buf[n] = '\0';
    if (!strstr(buf, "\"ok\":true") || !strstr(buf, "\"assignment\""))
        return 0;
    char want[48];
    snprintf(want, sizeof want, "\"rank\":%d,", rank);
    if (!strstr(buf, want))
        return 0;
    const char *p = strstr(buf, "\"ports\":[");
    if (!p)
        return 0;
    *port = (int) strtol(p + 9, NULL, 10);
    return *port > 0;
}

/* ---- the client side ---------------------------------------------------- */

enum { C_CONNECTING, C_HANDSHAKE, C_WAIT_REPLY, C_DONE, C_FAILED };

typedef struct {
    int fd;
    int rank;                /* global index */
    int state;
    bool greeted;            /* the peer's greeting + READY are read */
    unsigned char *in;
    size_t inlen, incap;
    char *out;               /* pending bytes to write */
    size_t outlen, outoff;
    char *request;           /* the request payload (JSON) */
    size_t reqlen;
    int64_t t_rx;            /* kernel receive time of the last bytes read */
} s_conn_t;

/* CLOCK_REALTIME (the kernel's receive stamps) to CLOCK_MONOTONIC (every
 * other time of the bench), measured once per worker. */
static int64_t s_real_to_mono;

static void s_clock_offset(void)
{
    struct timespec real;
    int64_t mono = bench_now_ns();
    clock_gettime(CLOCK_REALTIME, &real);
    s_real_to_mono = mono - (real.tv_sec * 1000000000LL + real.tv_nsec);
}

static const unsigned char s_ready_cmd[] = {
    0x04, 28,                                /* command, short, 28 bytes */
    5, 'R', 'E', 'A', 'D', 'Y',
    11, 'S', 'o', 'c', 'k', 'e', 't', '-', 'T', 'y', 'p', 'e',
    0, 0, 0, 6, 'D', 'E', 'A', 'L', 'E', 'R',
};

static void s_greeting(unsigned char g[ZMTP_GREETING])
{
    memset(g, 0, ZMTP_GREETING);
    g[0] = 0xff;
    g[9] = 0x7f;
    g[10] = 3;                               /* version 3.0 */
    g[11] = 0;
    memcpy(g + 12, "NULL", 4);               /* mechanism, 20 bytes */
    g[32] = 0;                               /* as-server: no */
}

static int s_append_out(s_conn_t *c, const void *data, size_t len)
{
    char *p = realloc(c->out, c->outlen + len);
    if (!p)
        return -1;
    memcpy(p + c->outlen, data, len);
    c->out = p;
    c->outlen += len;
    return 0;
}

/* Queues one message frame (ZMTP) or a length-prefixed blob (raw). */
static int s_queue_request(s_conn_t *c, bench_wire_t wire)
{
    unsigned char hdr[9];
    size_t hl;
    if (wire == WIRE_ZMTP) {
        if (c->reqlen <= 255) {
            hdr[0] = 0x00;
            hdr[1] = (unsigned char) c->reqlen;
            hl = 2;
        } else {
            hdr[0] = 0x02;
            uint64_t n = c->reqlen;
            for (int i = 0; i < 8; i++)
                hdr[1 + i] = (unsigned char) (n >> (56 - 8 * i));
            hl = 9;
        }
    } else {
        uint32_t n = htonl((uint32_t) c->reqlen);
        memcpy(hdr, &n, 4);
        hl = 4;
    }
    if (s_append_out(c, hdr, hl) < 0 || s_append_out(c, c->request, c->reqlen) < 0)
        return -1;
    return 0;
}

/* Writes what is pending; 1 all written, 0 would block, -1 error. */
static int s_flush(s_conn_t *c)
{
    while (c->outoff < c->outlen) {
        ssize_t n = send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN ? 0 : -1;
        }
        c->outoff += (size_t) n;
    }
    free(c->out);
    c->out = NULL;
    c->outlen = c->outoff = 0;
    return 1;
}

/* Parses one ZMTP frame at p (avail bytes); returns its total length or 0
 * if incomplete. */
static size_t s_zmtp_frame(const unsigned char *p, size_t avail, unsigned char *flags,
                           size_t *body_off, size_t *body_len)
{
    if (avail < 2)
        return 0;
    *flags = p[0];
    if (p[0] & 0x02) {
        if (avail < 9)
            return 0;
        uint64_t n = 0;
        for (int i = 0; i < 8; i++)
            n = (n << 8) | p[1 + i];
        *body_off = 9;
        *body_len = (size_t) n;
    } else {
        *body_off = 2;
        *body_len = p[1];
    }
    if (avail < *body_off + *body_len)
        return 0;
    return *body_off + *body_len;
}

/* Consumes input; returns 1 when the reply is complete (c->state updated),
 * 0 need more, -1 protocol error. */
static int s_parse_input(s_conn_t *c, const bench_lean_job_t *job, bool *greeted_now)
{
    size_t off = 0;
    int rc = 0;
    if (job->wire == WIRE_RAW) {
        /* The floor's one-byte greeting (sent on accept), then the reply. */
        if (!c->greeted) {
            if (c->inlen < 1)
                return 0;
            c->greeted = true;
            *greeted_now = true;
        }
        if (c->inlen < 5)
            return 0;
        uint32_t n;
        memcpy(&n, c->in + 1, 4);
        n = ntohl(n);
        if (c->inlen < 5 + (size_t) n)
            return 0;
        bench_rank_t *r = &job->out[c->rank];
        r->t_recv = bench_now_ns();
        r->t_arrived = c->t_rx;
        r->ok = 1;
        c->state = C_DONE;
        return 1;
    }
    if (!c->greeted) {
        if (c->inlen < ZMTP_GREETING)
            return 0;
        if (c->in[0] != 0xff || c->in[9] != 0x7f || c->in[10] < 3)
            return -1;
        unsigned char fl;
        size_t bo, bl;
        size_t fl_len = s_zmtp_frame(c->in + ZMTP_GREETING, c->inlen - ZMTP_GREETING,
                                     &fl, &bo, &bl);
        if (!fl_len)
            return 0;
        if (!(fl & 0x04))
            return -1;
        c->greeted = true;
        *greeted_now = true;
        off = ZMTP_GREETING + fl_len;
        /* The handshake is done: a DEALER may send now. */
        if (s_queue_request(c, WIRE_ZMTP) < 0)
            return -1;
        job->out[c->rank].t_sent = bench_now_ns();
        if (s_flush(c) < 0)
            return -1;
        c->state = C_WAIT_REPLY;
    }
    for (;;) {
        unsigned char fl;
        size_t bo, bl;
        size_t n = s_zmtp_frame(c->in + off, c->inlen - off, &fl, &bo, &bl);
        if (!n)
            break;
        if (!(fl & 0x04)) {                  /* a message frame: our reply */
            bench_rank_t *r = &job->out[c->rank];
            r->t_recv = bench_now_ns();
            r->t_arrived = c->t_rx;
            int port = 0;
            r->ok = job->any_reply
                    || bench_check_reply((const char *) c->in + off + bo, bl,
                                         c->rank % job->group_size, &port);
            r->port = port;
            if (!r->ok && getenv("RDZV_BENCH_DEBUG"))
                fprintf(stderr, "rank %d: %.*s\n", c->rank, (int) bl, c->in + off + bo);
            c->state = r->ok ? C_DONE : C_FAILED;
            rc = 1;
        }
        off += n;
        if (rc)
            break;
    }
    memmove(c->in, c->in + off, c->inlen - off);
    c->inlen -= off;
    return rc;
}

/* Reads what is there. The kernel stamps each segment as it arrives
 * (SO_TIMESTAMPNS): that, not when this process got round to reading,
 * is when the server's reply reached the rank, since one worker process
 * reads for hundreds of ranks. */
static int s_read_some(s_conn_t *c)
{
    for (;;) {
        if (c->incap - c->inlen < 4096) {
            size_t cap = c->incap ? c->incap * 2 : 8192;
            unsigned char *p = realloc(c->in, cap);
            if (!p)
                return -1;
            c->in = p;
            c->incap = cap;
        }
        size_t room = c->incap - c->inlen;
        struct iovec iov = { .iov_base = c->in + c->inlen, .iov_len = room };
        union {
            char buf[CMSG_SPACE(sizeof(struct timespec))];
            struct cmsghdr align;
        } ctl;
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                             .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf };
        ssize_t n = recvmsg(c->fd, &mh, 0);
        if (n > 0) {
            c->inlen += (size_t) n;
            for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
                if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
                    struct timespec ts;
                    memcpy(&ts, CMSG_DATA(cm), sizeof ts);
                    c->t_rx = ts.tv_sec * 1000000000LL + ts.tv_nsec + s_real_to_mono;
                }
            }
            /* A short read took all there was (epoll is level-triggered). */
            if ((size_t) n < room)
                return 0;
            continue;
        }
        if (n == 0)
            return -1;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN ? 0 : -1;
    }
}

static void s_fail(s_conn_t *c, int ep, size_t *active, size_t *waiting)
{
    if (c->state == C_DONE || c->state == C_FAILED)
        return;
    if (!c->greeted && *waiting)
        (*waiting)--;
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    c->state = C_FAILED;
    (*active)--;
}

static int s_start_connect(s_conn_t *c, int ep, const struct sockaddr_in *sa,
                           bench_rank_t *r)
{
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return -1;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(c->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    r->t_connect = bench_now_ns();
    if (connect(c->fd, (const struct sockaddr *) sa, sizeof *sa) < 0 && errno != EINPROGRESS)
        return -1;
    struct epoll_event ev = { .events = EPOLLOUT | EPOLLIN, .data.ptr = c };
    return epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
}

static int s_on_connected(s_conn_t *c, int ep, const bench_lean_job_t *job)
{
    int err = 0;
    socklen_t el = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err)
        return -1;
    if (job->wire == WIRE_ZMTP) {
        unsigned char g[ZMTP_GREETING];
        s_greeting(g);
        if (s_append_out(c, g, sizeof g) < 0 || s_append_out(c, s_ready_cmd, sizeof s_ready_cmd) < 0)
            return -1;
        c->state = C_HANDSHAKE;
    } else {
        if (s_queue_request(c, WIRE_RAW) < 0)
            return -1;
        job->out[c->rank].t_sent = bench_now_ns();
        c->state = C_WAIT_REPLY;
    }
    int f = s_flush(c);
    if (f < 0)
        return -1;
    struct epoll_event ev = { .events = EPOLLIN | (f == 0 ? EPOLLOUT : 0), .data.ptr = c };
    return epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

size_t bench_lean_run(const bench_lean_job_t *job)
{
    size_t n = job->count;
    s_conn_t *conns = calloc(n ? n : 1, sizeof *conns);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (!conns || ep < 0) {
        free(conns);
        return 0;
    }
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t) job->port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    pid_t pid = getpid();
    s_clock_offset();
    for (size_t i = 0; i < n; i++) {
        s_conn_t *c = &conns[i];
        c->fd = -1;
        c->rank = job->ranks[i];
        if (job->wire == WIRE_ZMTP) {
            char group[300], node[300], session[64], host[32];
            bench_rank_host(c->rank, host, sizeof host);
            snprintf(group, sizeof group, "%s%d", job->group_prefix, c->rank / job->group_size);
            snprintf(node, sizeof node, "%s%d", job->node_prefix, c->rank);
            snprintf(session, sizeof session, "s%d-%d", (int) pid, c->rank);
            c->request = bench_join_json(group, job->group_size, c->rank % job->group_size,
                                         host, node, session, job->members, job->timeout_ms);
        } else {
            /* The floor's request: the same size as a join, never parsed. */
            c->request = bench_join_json("floor", job->group_size, c->rank % job->group_size,
                                         "127.0.0.1", "node", "session", job->members, job->timeout_ms);
        }
        c->reqlen = c->request ? strlen(c->request) : 0;
    }
    size_t next = 0, active = 0, good = 0, waiting = 0;
    int64_t deadline = bench_now_ns() + (int64_t) job->timeout_ms * 1000000LL;
    struct epoll_event evs[256];
    while (next < n || active > 0) {
        for (int k = 0; k < CONNECT_CHUNK && next < n
                        && (job->window <= 0 || waiting < (size_t) job->window); k++, next++) {
            s_conn_t *c = &conns[next];
            if (!c->request || s_start_connect(c, ep, &sa, &job->out[c->rank]) < 0) {
                if (getenv("RDZV_BENCH_DEBUG"))
                    perror("connect");
                c->state = C_FAILED;
                continue;
            }
            active++;
            waiting++;
        }
        if (bench_now_ns() > deadline)
            break;
        bool can_connect = next < n && (job->window <= 0 || waiting < (size_t) job->window);
        int m = epoll_wait(ep, evs, 256, can_connect || job->busy_poll ? 0 : 100);
        for (int k = 0; k < m; k++) {
            s_conn_t *c = evs[k].data.ptr;
            if (c->state == C_CONNECTING) {
                if (s_on_connected(c, ep, job) < 0)
                    s_fail(c, ep, &active, &waiting);
                continue;
            }
            if (evs[k].events & EPOLLOUT) {
                int f = s_flush(c);
                if (f < 0) {
                    s_fail(c, ep, &active, &waiting);
                    continue;
                }
                if (f == 1) {
                    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
                    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                }
            }
            if (evs[k].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
                int rr = s_read_some(c);
                bool greeted_now = false;
                int pr = s_parse_input(c, job, &greeted_now);
                if (greeted_now && waiting)
                    waiting--;
                if (pr == 1) {
                    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                    active--;
                    if (c->state == C_DONE)
                        good++;
                } else if (pr < 0 || rr < 0) {
                    s_fail(c, ep, &active, &waiting);
                }
            }
        }
    }
    /* Connections stay open until the caller exits (real ranks stay
     * connected); free only our buffers. */
    for (size_t i = 0; i < n; i++) {
        free(conns[i].in);
        free(conns[i].out);
        free(conns[i].request);
    }
    free(conns);
    close(ep);
    return good;
}
