/* The floor rdzvd is measured against: a minimal epoll server that
 * answers N raw requests once all have arrived (what the kernel alone
 * costs). zmq_floor.c does the same over libzmq. */
#include "bench.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- the floor server ---------------------------------------------------- */

typedef struct {
    int fd;
    unsigned char buf[8];
    size_t got;
    uint32_t want;           /* request length once known */
    size_t read_body;
    bool complete;
} s_floor_conn_t;

/* The release's writers: slice i of the answered connections is thread i's
 * (the serving thread is writer 0). They sleep until the release, as a
 * server's threads would, so waking them is part of the figure. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool go;
    s_floor_conn_t **done;
    size_t n;
    int threads;
    const char *reply;
    size_t len;
} s_fanout_t;

typedef struct {
    s_fanout_t *fan;
    int index;
} s_writer_t;

static void s_send_slice(s_fanout_t *fan, int index)
{
    size_t lo = fan->n * (size_t) index / (size_t) fan->threads;
    size_t hi = fan->n * (size_t) (index + 1) / (size_t) fan->threads;
    for (size_t i = lo; i < hi; i++) {
        if (fan->done[i]->fd < 0)
            continue;
        size_t off = 0;
        while (off < fan->len) {
            ssize_t w = send(fan->done[i]->fd, fan->reply + off, fan->len - off, MSG_NOSIGNAL);
            if (w > 0)
                off += (size_t) w;
            else if (w < 0 && errno == EINTR)
                continue;
            else
                break;               /* a small reply fits any send buffer */
        }
    }
}

static void *s_writer(void *arg)
{
    s_writer_t *w = arg;
    s_fanout_t *fan = w->fan;
    pthread_mutex_lock(&fan->lock);
    while (!fan->go)
        pthread_cond_wait(&fan->cond, &fan->lock);
    pthread_mutex_unlock(&fan->lock);
    s_send_slice(fan, w->index);
    return NULL;
}

static void s_floor_serve(int lfd, size_t expect, size_t reply_bytes, int threads)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    s_floor_conn_t **done = calloc(expect ? expect : 1, sizeof *done);
    char *reply = malloc(4 + reply_bytes);
    uint32_t nl = htonl((uint32_t) reply_bytes);
    memcpy(reply, &nl, 4);
    memset(reply + 4, 'x', reply_bytes);
    s_fanout_t fan = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,
                       .threads = threads, .reply = reply, .len = 4 + reply_bytes };
    pthread_t *tids = calloc((size_t) threads, sizeof *tids);
    s_writer_t *writers = calloc((size_t) threads, sizeof *writers);
    for (int t = 1; t < threads; t++) {
        writers[t] = (s_writer_t) { .fan = &fan, .index = t };
        if (pthread_create(&tids[t], NULL, s_writer, &writers[t]) != 0)
            _exit(1);
    }
    size_t ndone = 0, nopen = 0;
    char sink[4096];
    struct epoll_event evs[256];
    bool released = false;
    for (;;) {
        int m = epoll_wait(ep, evs, 256, released && nopen == 0 ? 0 : 1000);
        if (m == 0 && released && nopen == 0)
            break;
        for (int k = 0; k < m; k++) {
            s_floor_conn_t *c = evs[k].data.ptr;
            if (!c) {
                for (;;) {
                    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (fd < 0)
                        break;
                    int one = 1;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    s_floor_conn_t *nc = calloc(1, sizeof *nc);
                    nc->fd = fd;
                    /* One byte on accept, as a zmq server sends its greeting. */
                    if (send(fd, "F", 1, MSG_NOSIGNAL) != 1) {
                        close(fd);
                        free(nc);
                        continue;
                    }
                    struct epoll_event e2 = { .events = EPOLLIN, .data.ptr = nc };
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e2);
                    nopen++;
                }
                continue;
            }
            for (;;) {
                ssize_t r;
                if (c->got < 4) {
                    r = recv(c->fd, c->buf + c->got, 4 - c->got, 0);
                    if (r > 0) {
                        c->got += (size_t) r;
                        if (c->got == 4) {
                            memcpy(&c->want, c->buf, 4);
                            c->want = ntohl(c->want);
                        }
                        continue;
                    }
                } else if (c->read_body < c->want) {
                    size_t left = c->want - c->read_body;
                    r = recv(c->fd, sink, left < sizeof sink ? left : sizeof sink, 0);
                    if (r > 0) {
                        c->read_body += (size_t) r;
                        continue;
                    }
                } else {
                    r = recv(c->fd, sink, sizeof sink, 0);
                    if (r > 0)
                        continue;
                }
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                    close(c->fd);
                    c->fd = -1;
                    nopen--;
                    if (!c->complete)
                        free(c);
                    break;
                }
                if (r < 0 && errno == EINTR)
                    continue;
                break;
            }
            if (c->fd >= 0 && !c->complete && c->got == 4 && c->read_body == c->want) {
                c->complete = true;
                done[ndone++] = c;
                if (ndone == expect) {
                    /* Everyone is here: answer all, the writers a slice each. */
                    pthread_mutex_lock(&fan.lock);
                    fan.done = done;
                    fan.n = ndone;
                    fan.go = true;
                    pthread_cond_broadcast(&fan.cond);
                    pthread_mutex_unlock(&fan.lock);
                    s_send_slice(&fan, 0);
                    released = true;
                }
            }
        }
    }
    for (int t = 1; t < threads; t++)
        pthread_join(tids[t], NULL);
    _exit(0);
}

int bench_floor_spawn(size_t expect, size_t reply_bytes, int threads, int *port)
{
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0)
        return -1;
    struct sockaddr_in sa = { .sin_family = AF_INET };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    if (bind(lfd, (struct sockaddr *) &sa, sizeof sa) < 0 || listen(lfd, 65535) < 0
        || getsockname(lfd, (struct sockaddr *) &sa, &sl) < 0) {
        close(lfd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGTERM, SIG_DFL);
        s_floor_serve(lfd, expect, reply_bytes, threads < 1 ? 1 : threads);
    }
    close(lfd);
    return pid;
}
