/* --clients DIR as rdzvd reads it (rendezvous/net/clientkeys.h): which
 * entries hold keys, and that a change to any of them, a Kubernetes
 * Secret's "..data" swap included, is read again while nothing else is. */
#include "check_run.h"
#include <check.h>
#include <czmq.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clientkeys.h"

static char s_dir[64];
static zcert_t *s_a, *s_b;

static void s_setup(void)
{
    strcpy(s_dir, "/tmp/rdzv-keys-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(s_dir));
    s_a = zcert_new();
    s_b = zcert_new();
}

static void s_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    ck_assert_int_eq(system(cmd), 0);
    zcert_destroy(&s_a);
    zcert_destroy(&s_b);
}

/* Writes cert's public certificate to DIR/name. */
static void s_save(zcert_t *cert, const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", s_dir, name);
    ck_assert_int_eq(zcert_save_public(cert, path), 0);
}

static void s_run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void s_run(const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    ck_assert_msg(system(cmd) == 0, "%s", cmd);
}

static rdzv_clientkeys_t *s_open(void)
{
    char err[256];
    rdzv_clientkeys_t *keys = rdzv_clientkeys_new(s_dir, err, sizeof err);
    ck_assert_msg(keys != NULL, "%s", err);
    return keys;
}

static bool s_has(const rdzv_clientkeys_t *keys, zcert_t *cert)
{
    return rdzv_clientkeys_lookup(keys, zcert_public_key(cert)) != NULL;
}

START_TEST(test_reads_visible_certificates_only)
{
    s_save(s_a, "a.key");
    s_save(s_b, ".hidden");
    s_run("mkdir %s/sub", s_dir);
    s_save(s_b, "sub/b.key");
    s_save(s_b, "b_secret");
    s_run("echo 'not a certificate' > %s/notes", s_dir);
    /* czmq says on stdout that notes does not parse; stdout is this test's
     * TAP stream, so its line goes to stderr while the keys are read. */
    fflush(stdout);
    int tap = dup(STDOUT_FILENO);
    dup2(STDERR_FILENO, STDOUT_FILENO);
    rdzv_clientkeys_t *keys = s_open();
    fflush(stdout);
    dup2(tap, STDOUT_FILENO);
    close(tap);
    ck_assert_int_eq(rdzv_clientkeys_count(keys), 1);
    ck_assert_str_eq(rdzv_clientkeys_lookup(keys, zcert_public_key(s_a)), "a.key");
    ck_assert(!s_has(keys, s_b));
    rdzv_clientkeys_destroy(&keys);
    ck_assert_ptr_null(keys);
}
END_TEST

START_TEST(test_one_key_in_two_files_counts_once)
{
    s_save(s_a, "a.key");
    s_save(s_a, "a-copy.key");
    rdzv_clientkeys_t *keys = s_open();
    ck_assert_int_eq(rdzv_clientkeys_count(keys), 1);
    rdzv_clientkeys_destroy(&keys);
}
END_TEST

START_TEST(test_changes_are_read_again)
{
    s_save(s_a, "a.key");
    rdzv_clientkeys_t *keys = s_open();
    ck_assert_int_eq(rdzv_clientkeys_refresh(keys), 0);        /* nothing changed */
    s_save(s_b, "b.key");
    ck_assert_int_eq(rdzv_clientkeys_refresh(keys), 1);
    ck_assert(s_has(keys, s_a) && s_has(keys, s_b));
    s_run("rm %s/a.key", s_dir);
    ck_assert_int_eq(rdzv_clientkeys_refresh(keys), 1);
    ck_assert(!s_has(keys, s_a) && s_has(keys, s_b));
    ck_assert_int_eq(rdzv_clientkeys_count(keys), 1);
    rdzv_clientkeys_destroy(&keys);
}
END_TEST

/* The kubelet's layout and update: a hidden folder per version, "..data"
 * renamed over to the new one, visible links into "..data". The key under
 * one name changes with nothing else about the visible entry. */
START_TEST(test_secret_symlink_swap)
{
    s_run("mkdir %s/..v1", s_dir);
    s_save(s_a, "..v1/current");
    s_run("cd %s && ln -s ..v1 ..data && ln -s ..data/current current", s_dir);
    rdzv_clientkeys_t *keys = s_open();
    ck_assert_int_eq(rdzv_clientkeys_count(keys), 1);
    ck_assert(s_has(keys, s_a));
    s_run("mkdir %s/..v2", s_dir);
    s_save(s_b, "..v2/current");
    s_run("cd %s && ln -s ..v2 ..data_tmp && mv -T ..data_tmp ..data", s_dir);
    ck_assert_int_eq(rdzv_clientkeys_refresh(keys), 1);
    ck_assert(s_has(keys, s_b) && !s_has(keys, s_a));
    ck_assert_int_eq(rdzv_clientkeys_refresh(keys), 0);
    rdzv_clientkeys_destroy(&keys);
}
END_TEST

/* A DIR that cannot be listed keeps the keys last read; back, it is read. */
START_TEST(test_unlisted_dir_keeps_keys)
{
    s_save(s_a, "a.key");
    rdzv_clientkeys_t *keys = s_open();
    s_run("mv %s %s.away", s_dir, s_dir);
    ck_assert_int_eq(rdzv_clientkeys_refresh(keys), -1);
    ck_assert(s_has(keys, s_a));
    s_run("mv %s.away %s", s_dir, s_dir);
    s_save(s_b, "b.key");
    ck_assert_int_eq(rdzv_clientkeys_refresh(keys), 1);
    ck_assert_int_eq(rdzv_clientkeys_count(keys), 2);
    rdzv_clientkeys_destroy(&keys);
}
END_TEST

START_TEST(test_not_a_directory)
{
    char err[256] = "", path[96];
    snprintf(path, sizeof path, "%s/missing", s_dir);
    ck_assert_ptr_null(rdzv_clientkeys_new(path, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "is not a directory"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("clientkeys");
    TCase *tc = tcase_create("clientkeys");
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_add_test(tc, test_reads_visible_certificates_only);
    tcase_add_test(tc, test_one_key_in_two_files_counts_once);
    tcase_add_test(tc, test_changes_are_read_again);
    tcase_add_test(tc, test_secret_symlink_swap);
    tcase_add_test(tc, test_unlisted_dir_keeps_keys);
    tcase_add_test(tc, test_not_a_directory);
    suite_add_tcase(s, tc);
    return rdzv_check_run(s);
}
