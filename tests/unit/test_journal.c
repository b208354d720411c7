#include "check_run.h"
#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "held_sync.h"
#include "journal.h"

static char dir[64];
static char path[128];

static void setup(void)
{
    strcpy(dir, "/tmp/rdzv-journal-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/journal", dir);
}

static void teardown(void)
{
    char p[160];
    unlink(path);
    snprintf(p, sizeof p, "%s/lock", dir);       /* rdzv_journal_open's */
    unlink(p);
    snprintf(p, sizeof p, "%s/journal.tmp", dir);
    unlink(p);
    rmdir(dir);
}

static int s_count(void *arg, const cJSON *rec)
{
    int *n = arg;
    const cJSON *i = cJSON_GetObjectItem(rec, "i");
    ck_assert_int_eq((int) i->valuedouble, *n);
    (*n)++;
    return 0;
}

static void s_write_records(int n)
{
    char err[256];
    rdzv_journal_t *j = rdzv_journal_open(dir, true, err, sizeof err);
    ck_assert_ptr_nonnull(j);
    for (int i = 0; i < n; i++) {
        cJSON *rec = cJSON_CreateObject();
        cJSON_AddNumberToObject(rec, "i", i);
        cJSON_AddStringToObject(rec, "pad", "some text to make records longer");
        ck_assert_int_eq(rdzv_journal_append(j, rec), 0);
        cJSON_Delete(rec);
    }
    ck_assert_int_eq(rdzv_journal_flush(j, err, sizeof err), 0);
    rdzv_journal_destroy(&j);
}

static long s_replay(bool repair, int *seen, size_t *torn, char *err, size_t errlen)
{
    rdzv_journal_t *j = rdzv_journal_open(dir, true, err, errlen);
    ck_assert_ptr_nonnull(j);
    *seen = 0;
    long n = rdzv_journal_replay(j, s_count, seen, repair, torn, err, errlen);
    rdzv_journal_destroy(&j);
    return n;
}

static off_t s_size(void)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return st.st_size;
}

START_TEST(test_roundtrip)
{
    s_write_records(10);
    int seen;
    size_t torn;
    char err[256];
    ck_assert_int_eq(s_replay(false, &seen, &torn, err, sizeof err), 10);
    ck_assert_int_eq(seen, 10);
    ck_assert_uint_eq(torn, 0);
}
END_TEST

/* Cutting the file at every byte inside the last record loses only it. */
START_TEST(test_torn_tail_at_every_byte)
{
    s_write_records(3);
    off_t full = s_size();
    int seen;
    size_t torn;
    char err[256];
    /* Find where the last record starts: replay 2-record prefix sizes. */
    off_t record = full / 3;
    for (off_t cut = full - record + 1; cut < full; cut++) {
        teardown();
        setup();
        s_write_records(3);
        ck_assert_int_eq(truncate(path, cut), 0);
        ck_assert_int_eq(s_replay(false, &seen, &torn, err, sizeof err), 2);
        ck_assert_uint_eq(torn, (size_t) (cut - (full - record)));
        ck_assert_int_eq(s_size(), full - record);
    }
}
END_TEST

START_TEST(test_flipped_bit_in_middle_refused)
{
    s_write_records(5);
    int fd = open(path, O_RDWR);
    unsigned char b;
    ck_assert_int_eq(pread(fd, &b, 1, 20), 1);
    b ^= 0x10;
    ck_assert_int_eq(pwrite(fd, &b, 1, 20), 1);
    close(fd);
    int seen;
    size_t torn;
    char err[256] = "";
    ck_assert_int_eq(s_replay(false, &seen, &torn, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "offset 0"));
    /* --repair cuts there and keeps what came before. */
    ck_assert_int_eq(s_replay(true, &seen, &torn, err, sizeof err), 0);
    ck_assert_int_eq(s_size(), 0);
}
END_TEST

/* A flipped bit in a middle record's length makes it reach past the end;
 * that is still corruption, because valid records follow it. */
START_TEST(test_flipped_length_in_middle_refused)
{
    s_write_records(5);
    off_t record = s_size() / 5;
    for (int byte = 0; byte < 4; byte++)
        for (int bit = 0; bit < 8; bit++) {
            teardown();
            setup();
            s_write_records(5);
            int fd = open(path, O_RDWR);
            unsigned char b;
            ck_assert_int_eq(pread(fd, &b, 1, record + byte), 1);
            b ^= (unsigned char) (1 << bit);
            ck_assert_int_eq(pwrite(fd, &b, 1, record + byte), 1);
            close(fd);
            int seen;
            size_t torn;
            char err[256] = "";
            ck_assert_msg(s_replay(false, &seen, &torn, err, sizeof err) == -1,
                          "flip of bit %d in length byte %d was taken for a torn tail", bit, byte);
        }
}
END_TEST

START_TEST(test_second_open_refused)
{
    char err[256];
    rdzv_journal_t *a = rdzv_journal_open(dir, true, err, sizeof err);
    ck_assert_ptr_nonnull(a);
    rdzv_journal_t *b = rdzv_journal_open(dir, true, err, sizeof err);
    ck_assert_ptr_null(b);
    ck_assert_ptr_nonnull(strstr(err, "in use"));
    rdzv_journal_destroy(&a);
    rdzv_journal_destroy(&a);
}
END_TEST

START_TEST(test_frame_layout)
{
    unsigned char buf[64];
    ck_assert_int_eq(rdzv_journal_frame("{}", 2, buf, sizeof buf), 10);
    ck_assert_int_eq(buf[0], 2);
    ck_assert_int_eq(buf[1] | buf[2] | buf[3], 0);
    ck_assert_int_eq(rdzv_journal_frame("{}", 2, buf, 9), -1);
}
END_TEST

/* The sync runs on the syncer's thread: starting it does not wait, and a
 * wait returns once the sync that covers its offset has. */
static void s_append_one(rdzv_journal_t *j, int i)
{
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddNumberToObject(rec, "i", i);
    ck_assert_int_eq(rdzv_journal_append(j, rec), 0);
    cJSON_Delete(rec);
}

START_TEST(test_sync_runs_beside_the_writer)
{
    char err[256];
    rdzv_journal_t *j = rdzv_journal_open(dir, true, err, sizeof err);
    ck_assert_ptr_nonnull(j);
    atomic_store(&held_sync_hold, 1);
    atomic_store(&held_sync_entered, 0);
    atomic_store(&held_sync_done, 0);
    rdzv_journal_set_sync_fn(j, held_sync);
    s_append_one(j, 0);
    ck_assert_int_eq(rdzv_journal_write(j, err, sizeof err), 0);
    uint64_t first = rdzv_journal_written(j);
    ck_assert_int_gt(first, 0);
    rdzv_journal_sync_start(j);                  /* returns with the sync held up */
    ck_assert(held_sync_wait_entered(1, 10000));
    ck_assert_double_gt(rdzv_journal_sync_busy_s(j), 0);
    ck_assert_int_eq(atomic_load(&held_sync_done), 0);
    s_append_one(j, 1);                          /* written during the sync */
    ck_assert_int_eq(rdzv_journal_write(j, err, sizeof err), 0);
    uint64_t second = rdzv_journal_written(j);
    ck_assert_int_gt(second, first);
    atomic_store(&held_sync_hold, 0);
    rdzv_journal_wait(j, first, err, sizeof err);
    ck_assert_int_ge(atomic_load(&held_sync_done), 1);
    rdzv_journal_wait(j, second, err, sizeof err);                /* needs a sync that began after it */
    ck_assert_int_eq(atomic_load(&held_sync_done), 2);
    ck_assert_double_eq(rdzv_journal_sync_busy_s(j), 0);
    rdzv_journal_stats_t st;
    rdzv_journal_stats(j, &st);
    ck_assert_int_eq(st.sync.count, 2);
    ck_assert_str_eq(st.sync_name, "rdzv_journal_fsync_seconds");
    rdzv_journal_destroy(&j);
    int seen = 0;
    size_t torn = 0;
    ck_assert_int_eq(s_replay(false, &seen, &torn, err, sizeof err), 2);
}
END_TEST

/* Offsets only grow across a compaction: a gate taken before it is met by
 * the snapshot, and records written after it get an fdatasync of their own
 * (the file is shorter, and an offset of the old file once stood for
 * everything up to it). */
START_TEST(test_compaction_keeps_gates_and_syncs)
{
    char err[256];
    rdzv_journal_t *j = rdzv_journal_open(dir, true, err, sizeof err);
    ck_assert_ptr_nonnull(j);
    int seen0 = 0;
    size_t torn = 0;
    ck_assert_int_eq(rdzv_journal_replay(j, s_count, &seen0, false, &torn, err, sizeof err), 0);
    atomic_store(&held_sync_hold, 0);
    atomic_store(&held_sync_entered, 0);
    atomic_store(&held_sync_done, 0);
    rdzv_journal_set_sync_fn(j, held_sync);
    for (int i = 0; i < 50; i++)
        s_append_one(j, i);
    ck_assert_int_eq(rdzv_journal_flush(j, err, sizeof err), 0);
    uint64_t before = rdzv_journal_written(j);
    ck_assert_int_eq(atomic_load(&held_sync_done), 1);

    cJSON *snapshot = cJSON_CreateArray();
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddNumberToObject(rec, "i", 0);
    cJSON_AddItemToArray(snapshot, rec);
    ck_assert_int_eq(rdzv_journal_compact(j, snapshot), 0);     /* takes it */
    /* The snapshot's own sync goes through the same function. */
    ck_assert_int_eq(atomic_load(&held_sync_done), 2);
    ck_assert_uint_lt(rdzv_journal_size(j), before);          /* the file shrank */
    ck_assert_uint_ge(rdzv_journal_written(j), before);       /* offsets did not */
    rdzv_journal_wait(j, before, err, sizeof err);                             /* met, no sync */
    ck_assert_int_eq(atomic_load(&held_sync_done), 2);

    s_append_one(j, 1);
    ck_assert_int_eq(rdzv_journal_write(j, err, sizeof err), 0);
    rdzv_journal_sync_start(j);
    rdzv_journal_wait(j, rdzv_journal_written(j), err, sizeof err);
    ck_assert_int_eq(atomic_load(&held_sync_done), 3);     /* the new file's fd is synced */
    rdzv_journal_destroy(&j);
    int seen = 0;
    ck_assert_int_eq(s_replay(false, &seen, &torn, err, sizeof err), 2);
}
END_TEST

/* After a failed fdatasync what reached the disk is unknown: rdzvd exits
 * (status 1) rather than answer from it. */
static int s_failing_sync(int fd)
{
    (void) fd;
    errno = EIO;
    return -1;
}

START_TEST(test_failed_sync_exits)
{
    char err[256];
    rdzv_journal_t *j = rdzv_journal_open(dir, true, err, sizeof err);
    ck_assert_ptr_nonnull(j);
    rdzv_journal_set_sync_fn(j, s_failing_sync);
    s_append_one(j, 0);
    rdzv_journal_flush(j, err, sizeof err);
    ck_abort_msg("flush returned after a failed fdatasync");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("journal");
    TCase *tc = tcase_create("journal");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_torn_tail_at_every_byte);
    tcase_add_test(tc, test_flipped_bit_in_middle_refused);
    tcase_add_test(tc, test_flipped_length_in_middle_refused);
    tcase_add_test(tc, test_second_open_refused);
    tcase_add_test(tc, test_frame_layout);
    tcase_add_test(tc, test_sync_runs_beside_the_writer);
    tcase_add_test(tc, test_compaction_keeps_gates_and_syncs);
    suite_add_tcase(s, tc);
    /* The test exits from the sync thread, so its fixture runs in the
     * parent: the state dir goes whatever the child did. */
    TCase *fatal = tcase_create("fatal");
    tcase_add_unchecked_fixture(fatal, setup, teardown);
    tcase_add_exit_test(fatal, test_failed_sync_exits, 1);
    suite_add_tcase(s, fatal);
    return rdzv_check_run(s);
}
