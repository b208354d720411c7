/* rdzv-nccl-root TIMEOUT [COUNT]: hosts NCCL bootstrap roots for rdzvd.
 * Prints COUNT unique IDs (default 1) as hex lines on stdout, then waits. NCCL's root thread
 * leaves once every rank has checked in; then this prints "done" and exits.
 * It prints "timeout" and exits when argv[1] seconds pass first, and exits
 * at once when stdin reaches EOF (rdzvd is gone), so no root outlives the
 * rdzvd that handed out its ID. */
#include <dirent.h>
#include <errno.h>
#include <nccl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "rdzv_util.h"

#define S_POLL_MS 100

static int s_thread_count(void)
{
    DIR *dir = opendir("/proc/self/task");
    int n = 0;
    if (!dir)
        return -1;
    for (struct dirent *e = readdir(dir); e; e = readdir(dir))
        if (e->d_name[0] != '.')
            n++;
    closedir(dir);
    return n;
}

int main(int argc, char **argv)
{
    long timeout_s = argc > 1 ? strtol(argv[1], NULL, 10) : 600;
    long count = argc > 2 ? strtol(argv[2], NULL, 10) : 1;
    int before = s_thread_count();
    for (long i = 0; i < count; i++) {
        ncclUniqueId id;
        ncclResult_t rc = ncclGetUniqueId(&id);
        if (rc != ncclSuccess) {
            fprintf(stderr, "rdzv-nccl-root: ncclGetUniqueId: %s\n", ncclGetErrorString(rc));
            return 1;
        }
        char hex[2 * sizeof id.internal + 1];
        rdzv_hex_encode((const unsigned char *) id.internal, sizeof id.internal, hex);
        printf("%s\n", hex);
    }
    fflush(stdout);
    int64_t deadline = rdzv_now_ms() + timeout_s * 1000;
    for (;;) {
        struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
        int n = poll(&p, 1, S_POLL_MS);
        if (n > 0) {
            char buf[64];
            if (read(STDIN_FILENO, buf, sizeof buf) <= 0)
                return 0;
        }
        if (s_thread_count() <= before) {
            printf("done\n");
            return 0;
        }
        if (rdzv_now_ms() >= deadline) {
            printf("timeout\n");
            return 0;
        }
    }
}
