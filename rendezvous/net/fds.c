#include "fds.h"

#include <dirent.h>
#include <limits.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

long rdzv_fds_raise(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) < 0)
        return -1;
    if (r.rlim_cur < r.rlim_max) {
        struct rlimit want = { .rlim_cur = r.rlim_max, .rlim_max = r.rlim_max };
        if (setrlimit(RLIMIT_NOFILE, &want) == 0)
            r.rlim_cur = r.rlim_max;
    }
    return r.rlim_cur == RLIM_INFINITY ? (long) 1 << 30 : (long) r.rlim_cur;
}

int rdzv_fds_reserve(long limit)
{
    long r = limit / 20;
    return (int) (r < 64 ? 64 : r > 65536 ? 65536 : r);
}

long rdzv_fds_open(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1;                    /* the directory being read */
}

/* Whether a descriptor numbered lo or above (below hi) is open: poll()
 * marks each closed one POLLNVAL, a thousand numbers a call. */
static bool s_any_open(int lo, int hi)
{
    struct pollfd p[1024];
    while (lo < hi) {
        int n = hi - lo < 1024 ? hi - lo : 1024;
        for (int i = 0; i < n; i++)
            p[i] = (struct pollfd) { .fd = lo + i, .events = 0 };
        if (poll(p, (nfds_t) n, 0) < 0)
            return true;             /* cannot tell: count them */
        for (int i = 0; i < n; i++)
            if (!(p[i].revents & POLLNVAL))
                return true;
        lo += n;
    }
    return false;
}

bool rdzv_fds_short(int reserve)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) < 0 || r.rlim_cur == RLIM_INFINITY
        || (long) r.rlim_cur <= reserve || r.rlim_cur > INT_MAX)
        return false;
    int limit = (int) r.rlim_cur;
    /* More than limit - reserve open means one numbered that high at least:
     * the top numbers are looked at every time, the open ones counted only
     * then. A high number alone says little: connections close in any
     * order (over the cap, two shards' accepts reported out of order), so
     * the numbers in use have holes. */
    if (!s_any_open(limit - reserve, limit))
        return false;
    long open = rdzv_fds_open();
    /* -1: not one descriptor left to read /proc with, or no /proc. */
    return open < 0 || limit - open < reserve;
}

long rdzv_fds_connection_cap(long limit)
{
    long open = rdzv_fds_open();
    long cap = limit - (open >= 0 ? open : 64) - rdzv_fds_reserve(limit) / 2;
    return cap > 1 ? cap : 1;
}
