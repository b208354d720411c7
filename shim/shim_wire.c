#include "shim_wire.h"
#include "shim_syms.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define S_SPIN_NS 200000L

/* Waits up to ms for events on fd; false on timeout or error. */
static bool s_poll(int fd, short events, int ms)
{
    struct pollfd pfd = { .fd = fd, .events = events };
    int rc;
    do
        rc = poll(&pfd, 1, ms);
    while (rc < 0 && errno == EINTR);
    return rc > 0;
}

static ssize_t s_send(int fd, const rdzv_agent_msg_t *req, int ms)
{
    ssize_t n;
    for (;;) {
        n = send(fd, req, sizeof *req, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0 || (errno != EINTR && errno != EAGAIN))
            return n;
        if (errno == EAGAIN && !s_poll(fd, POLLOUT, ms))
            return -1;
    }
}

/* The socket is non-blocking; the agent answers in tens of microseconds,
 * so spinning for that long saves this thread a sleep and a wake-up,
 * which is most of a probe's tail. Then poll, for up to ms in all. */
static ssize_t s_recv(int fd, struct msghdr *mh, int ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        ssize_t n = recvmsg(fd, mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (n >= 0 || (errno != EAGAIN && errno != EINTR))
            return n;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long ns = (t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec);
        if (ns <= S_SPIN_NS) {
            sched_yield();
            continue;
        }
        int left = ms - (int) (ns / 1000000L);
        if (left <= 0 || !s_poll(fd, POLLIN, left))
            return -1;
    }
}

int rdzv_shim_wire_exchange(int fd, const rdzv_agent_msg_t *req, rdzv_agent_msg_t *rep,
                            int *fd_out, int ms)
{
    *fd_out = -1;
    if (s_send(fd, req, ms) != (ssize_t) sizeof *req)
        return -1;
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = { .iov_base = rep, .iov_len = sizeof *rep };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf };
    ssize_t n = s_recv(fd, &mh, ms);
    struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL;
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS
        && c->cmsg_len == CMSG_LEN(sizeof(int)))
        memcpy(fd_out, CMSG_DATA(c), sizeof(int));
    if (n != (ssize_t) sizeof *rep || rep->magic != RDZV_AGENT_MAGIC || rep->op != req->op
        || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
        if (*fd_out >= 0)
            rdzv_shim_real()->close(*fd_out);
        *fd_out = -1;
        return -1;
    }
    return 0;
}
