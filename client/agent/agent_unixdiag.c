#include "agent_unixdiag.h"

#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Bound names only: accepted and queued connections carry the listener's
 * name too, but not its owner (a queued one is the kernel's, uid 0). */
#define S_BOUND_STATES ((1u << TCP_LISTEN) | (1u << TCP_CLOSE))
#define S_BUFSIZE 32768

static int s_ask(int nl)
{
    struct {
        struct nlmsghdr nlh;
        struct unix_diag_req req;
    } msg = {
        .nlh = { .nlmsg_len = sizeof msg, .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                 .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP },
        .req = { .sdiag_family = AF_UNIX, .udiag_states = S_BOUND_STATES,
                 .udiag_show = UDIAG_SHOW_NAME | UDIAG_SHOW_UID },
    };
    struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
    ssize_t n;
    do
        n = sendto(nl, &msg, sizeof msg, 0, (struct sockaddr *) &kernel, sizeof kernel);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t) sizeof msg ? 0 : -errno;
}

/* One socket of the dump: 1 with *uid set if it is bound to name, 0 if
 * not, -ENOSYS if it is but the kernel did not say its owner. */
static int s_match(const struct nlmsghdr *h, const char *name, size_t len, uid_t *uid)
{
    const struct unix_diag_msg *m = NLMSG_DATA(h);
    int rest = (int) h->nlmsg_len - (int) NLMSG_LENGTH(sizeof *m);
    bool named = false, owned = false;
    uint32_t owner = 0;
    for (const struct rtattr *a = (const struct rtattr *) (m + 1); RTA_OK(a, rest);
         a = RTA_NEXT(a, rest)) {
        if (a->rta_type == UNIX_DIAG_NAME)
            named = (size_t) RTA_PAYLOAD(a) == len && memcmp(RTA_DATA(a), name, len) == 0;
        else if (a->rta_type == UNIX_DIAG_UID && RTA_PAYLOAD(a) >= sizeof owner) {
            memcpy(&owner, RTA_DATA(a), sizeof owner);
            owned = true;
        }
    }
    if (!named)
        return 0;
    if (!owned)
        return -ENOSYS;
    *uid = (uid_t) owner;
    return 1;
}

/* Reads the dump to its end (the socket must be drained either way). */
static int s_read(int nl, const char *name, size_t len, uid_t *uid)
{
    _Alignas(struct nlmsghdr) char buf[S_BUFSIZE];
    int rc = -ENOENT;
    for (;;) {
        ssize_t n = recv(nl, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EPROTO;
        /* NLMSG_OK compares a signed length with an unsigned one. */
        for (size_t off = 0; off + sizeof(struct nlmsghdr) <= (size_t) n;) {
            const struct nlmsghdr *h = (const struct nlmsghdr *) (buf + off);
            if (h->nlmsg_len < sizeof *h || h->nlmsg_len > (size_t) n - off)
                return -EPROTO;
            if (h->nlmsg_type == NLMSG_DONE)
                return rc;
            if (h->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(h);
                return e->error < 0 ? e->error : -EPROTO;
            }
            if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY && rc == -ENOENT) {
                int m = s_match(h, name, len, uid);
                rc = m == 1 ? 0 : m < 0 ? m : rc;
            }
            off += NLMSG_ALIGN(h->nlmsg_len);
        }
    }
}

int rdzv_unixdiag_owner(const char *name, size_t len, uid_t *uid)
{
    if (!name || !len || !uid)
        return -EINVAL;
    int nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (nl < 0)
        return -errno;
    int rc = s_ask(nl);
    if (rc == 0)
        rc = s_read(nl, name, len, uid);
    close(nl);
    return rc;
}
