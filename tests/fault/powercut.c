/* Preloaded into rdzvd by the power_cut fault case: records what a power
 * cut would keep of each file rdzvd syncs. A write is only in the page
 * cache until an fdatasync (or fsync) that started after it returns; a
 * power cut loses the rest, where kill -9 loses nothing. So each sync that
 * succeeds appends "SIZE PATH" to $POWERCUT_LOG, SIZE being the file's size
 * when the sync was called: the bytes it made durable. The case kills rdzvd,
 * cuts the journal to the last such size, and restarts it.
 *
 * $POWERCUT_DELAY_MS holds each sync back that long first: a slow disk, so
 * that a reply sent before its records were durable would reach the client
 * well before they were (the case would then see it lost). */
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* The build hides symbols by default; these must interpose. */
#define S_EXPORT __attribute__((visibility("default")))

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;

static void s_record(int fd, off_t size)
{
    const char *log = getenv("POWERCUT_LOG");
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (!log || n <= 0)
        return;
    path[n] = '\0';
    pthread_mutex_lock(&s_lock);
    int out = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (out >= 0) {
        dprintf(out, "%lld %s\n", (long long) size, path);
        close(out);
    }
    pthread_mutex_unlock(&s_lock);
}

static int s_sync(int fd, const char *name)
{
    /* dlsym() returns an object pointer; ISO C has no cast to a function one. */
    union { void *obj; int (*fn)(int); } real = { .obj = dlsym(RTLD_NEXT, name) };
    struct stat st;
    off_t size = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
    const char *delay = getenv("POWERCUT_DELAY_MS");
    if (delay && atoi(delay) > 0)
        usleep((useconds_t) atoi(delay) * 1000);
    int rc = real.fn ? real.fn(fd) : -1;
    if (rc == 0 && size >= 0)
        s_record(fd, size);
    return rc;
}

S_EXPORT int fdatasync(int fd)
{
    return s_sync(fd, "fdatasync");
}

S_EXPORT int fsync(int fd)
{
    return s_sync(fd, "fsync");
}
