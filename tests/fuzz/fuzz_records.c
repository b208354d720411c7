/* libFuzzer harness: replaying well-framed journal records with arbitrary
 * JSON in them (rendezvous/core/core.c's apply). The input is split at '\n'; each
 * piece becomes one record with a correct length and CRC, so the fuzzer gets
 * past the checksum and reaches the code that applies records. rdzvd must
 * start or refuse cleanly, never crash. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core_drive.h"
#include "journal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char s_dir[64];

static void s_cleanup(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/journal", s_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/snapshot", s_dir);
    unlink(path);
    rmdir(s_dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!*s_dir) {
        strcpy(s_dir, "/tmp/rdzv-fuzz-records-XXXXXX");
        if (!mkdtemp(s_dir))
            abort();
        atexit(s_cleanup);
    }
    char path[128];
    snprintf(path, sizeof path, "%s/snapshot", s_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/journal", s_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        abort();
    size_t cap = size + 8 * (size + 1) + 16;
    unsigned char *buf = malloc(cap);
    size_t len = 0, off = 0;
    while (off <= size && buf) {
        const uint8_t *nl = off < size ? memchr(data + off, '\n', size - off) : NULL;
        size_t end = nl ? (size_t) (nl - data) : size;
        if (end > off) {
            long n = rdzv_journal_frame((const char *) data + off, end - off, buf + len, cap - len);
            if (n > 0)
                len += (size_t) n;
        }
        off = end + 1;
    }
    if (buf && len && write(fd, buf, len) != (ssize_t) len)
        abort();
    free(buf);
    close(fd);

    rdzv_config_t cfg = { .port_base = 19500, .ports_per_rank = 4, .port_limit = 19500 + 64 * 4,
                          .max_world = 64, .dead_after_ms = 15000, .do_fsync = false,
                          .nccl_root_timeout_s = 1, .state_dir = s_dir };
    char err[512];
    rdzv_core_t *core = rdzv_core_new(&cfg, err, sizeof err);
    if (core) {
        /* Whatever replay built must answer a status request. */
        rdzv_peer_t peer = { .len = 1 };
        const char *req = "{\"v\":1,\"op\":\"status\",\"id\":1}";
        drive_request(core, &peer, req, strlen(req), 5000);
        drive_tick(core, 100000);
        drive_commit(core, 100000, NULL, NULL);
        rdzv_core_destroy(&core);
    }
    return 0;
}
