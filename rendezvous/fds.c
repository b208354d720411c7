#include "fds.h"

#include <dirent.h>
#include <fcntl.h>
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

bool rdzv_fds_short(int reserve)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) < 0 || r.rlim_cur == RLIM_INFINITY
        || (long) r.rlim_cur <= reserve)
        return false;
    /* The kernel hands out the lowest free number, so open files fill the
     * numbers from 0: number limit - reserve is open when fewer than
     * reserve are left (give or take the holes that closed ones leave). */
    return fcntl((int) (r.rlim_cur - (rlim_t) reserve), F_GETFD) != -1;
}

/* Descriptors open now (one of them is the directory read). */
static long s_open_now(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 64;
    long n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1;
}

long rdzv_fds_connection_cap(long limit)
{
    long cap = limit - s_open_now() - rdzv_fds_reserve(limit) / 2;
    return cap > 1 ? cap : 1;
}
