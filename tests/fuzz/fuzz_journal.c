/* libFuzzer harness: the journal reader (rendezvous/journal/journal.c) on arbitrary
 * file contents, with and without repair. Replay must never read outside the
 * file, must report an offset inside it, and after a successful replay the
 * file must hold exactly the records that were applied (a second replay
 * applies the same number and finds nothing torn). */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "journal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char s_dir[64];

static void s_cleanup(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/journal", s_dir);
    unlink(path);
    rmdir(s_dir);
}

static int s_apply(void *arg, const cJSON *record)
{
    long *count = arg;
    /* Touch the record as rdzvd would: look up its type. */
    const cJSON *t = cJSON_GetObjectItem(record, "t");
    (void) t;
    ++*count;
    return 0;
}

static void s_write(const uint8_t *data, size_t size)
{
    char path[128];
    snprintf(path, sizeof path, "%s/journal", s_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t) size))
        abort();
    close(fd);
}

static void s_once(const uint8_t *data, size_t size, bool repair)
{
    s_write(data, size);
    char err[512] = "";
    rdzv_journal_t *j = rdzv_journal_open(s_dir, false, err, sizeof err);
    if (!j) {
        fprintf(stderr, "fuzz_journal: open: %s\n", err);
        abort();
    }
    long count = 0;
    size_t torn = 0;
    long applied = rdzv_journal_replay(j, s_apply, &count, repair, &torn, err, sizeof err);
    if (applied >= 0) {
        if (applied != count || torn > size || rdzv_journal_size(j) + torn != size) {
            fprintf(stderr, "fuzz_journal: applied %ld count %ld torn %zu size %zu kept %llu\n",
                    applied, count, torn, size, (unsigned long long) rdzv_journal_size(j));
            abort();
        }
        rdzv_journal_destroy(&j);
        /* What replay kept must replay clean. */
        j = rdzv_journal_open(s_dir, false, err, sizeof err);
        long again = 0;
        size_t torn2 = 0;
        long applied2 = rdzv_journal_replay(j, s_apply, &again, false, &torn2, err, sizeof err);
        if (applied2 != applied || torn2 != 0) {
            fprintf(stderr, "fuzz_journal: second replay %ld/%zu after %ld (%s)\n",
                    applied2, torn2, applied, err);
            abort();
        }
    } else if (repair && !strstr(err, "does not apply")) {
        /* With repair only a record that does not parse as JSON (its CRC
         * matched, so rdzvd wrote it) may stop replay. */
        fprintf(stderr, "fuzz_journal: replay with --repair failed: %s\n", err);
        abort();
    }
    rdzv_journal_destroy(&j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!*s_dir) {
        strcpy(s_dir, "/tmp/rdzv-fuzz-journal-XXXXXX");
        if (!mkdtemp(s_dir))
            abort();
        atexit(s_cleanup);
    }
    s_once(data, size, false);
    s_once(data, size, true);
    return 0;
}
