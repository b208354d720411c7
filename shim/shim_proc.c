#include "shim_proc.h"
#include "shim_syms.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define S_DENTS_BYTES 4096

bool rdzv_shim_proc_same_socket(int fd, dev_t dev, ino_t ino)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == dev && st.st_ino == ino;
}

/* The descriptor number an entry of /proc/self/fd names, or -1 ("."). */
static int s_fd_number(const char *name)
{
    if (!*name)
        return -1;
    long n = 0;
    for (; *name; name++) {
        if (*name < '0' || *name > '9' || n > INT32_MAX / 10)
            return -1;
        n = n * 10 + (*name - '0');
    }
    return n > INT32_MAX ? -1 : (int) n;
}

/* getdents64 rather than readdir(): closedir() would come back through the
 * close() wrapper, and opendir() allocates. */
int rdzv_shim_proc_find_socket(dev_t dev, ino_t ino, int skip)
{
    if (ino == 0)
        return -1;
    int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -1;
    union {
        char buf[S_DENTS_BYTES];
        struct dirent64 align;
    } d;
    int found = -1;
    long n;
    while (found < 0 && (n = syscall(SYS_getdents64, dir, d.buf, sizeof d.buf)) > 0) {
        for (long off = 0; found < 0 && off < n;) {
            const struct dirent64 *ent = (const struct dirent64 *) (d.buf + off);
            off += ent->d_reclen;
            int fd = s_fd_number(ent->d_name);
            if (fd >= 0 && fd != skip && fd != dir && rdzv_shim_proc_same_socket(fd, dev, ino))
                found = fd;
        }
    }
    rdzv_shim_real()->close(dir);
    return found;
}

long rdzv_shim_proc_threads(void)
{
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    rdzv_shim_real()->close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');            /* the name (field 2) may hold anything */
    for (int field = 2; p && field < 20; field++)
        p = strchr(p + 1, ' ');
    return p ? strtol(p + 1, NULL, 10) : 0;
}
