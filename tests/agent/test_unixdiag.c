/* rdzv_unixdiag_owner: the owner of a bound unix name, as the kernel's
 * socket diagnostics say, whether the socket listens or not. */
#include "agent_unixdiag.h"

#include "check_run.h"
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define OTHER_UID 65534

/* An abstract name of this test's own: "\0rdzv-test-unixdiag-PID-TAG". */
static size_t s_name(char *buf, size_t len, const char *tag)
{
    int n = snprintf(buf + 1, len - 1, "rdzv-test-unixdiag-%d-%s", (int) getpid(), tag);
    buf[0] = '\0';
    return (size_t) n + 1;
}

static int s_bind(const char *name, size_t len, bool listening)
{
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    memcpy(sun.sun_path, name, len);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    socklen_t alen = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + len);
    ck_assert_int_eq(bind(fd, (struct sockaddr *) &sun, alen), 0);
    if (listening)
        ck_assert_int_eq(listen(fd, 0), 0);
    return fd;
}

START_TEST(test_owner_listening_or_not)
{
    char name[64];
    size_t len = s_name(name, sizeof name, _i ? "listening" : "bound");
    int fd = s_bind(name, len, _i);
    uid_t uid = (uid_t) -1;
    ck_assert_int_eq(rdzv_unixdiag_owner(name, len, &uid), 0);
    ck_assert_int_eq((int) uid, (int) geteuid());
    close(fd);
    ck_assert_int_eq(rdzv_unixdiag_owner(name, len, &uid), -ENOENT);
}
END_TEST

START_TEST(test_exact_name_only)
{
    char name[64];
    size_t len = s_name(name, sizeof name, "exact");
    int fd = s_bind(name, len, true);
    uid_t uid;
    ck_assert_int_eq(rdzv_unixdiag_owner(name, len - 1, &uid), -ENOENT);
    close(fd);
}
END_TEST

START_TEST(test_bad_arguments)
{
    uid_t uid;
    ck_assert_int_eq(rdzv_unixdiag_owner("", 0, &uid), -EINVAL);
    ck_assert_int_eq(rdzv_unixdiag_owner(NULL, 4, &uid), -EINVAL);
    ck_assert_int_eq(rdzv_unixdiag_owner("\0x", 2, NULL), -EINVAL);
}
END_TEST

/* A name bound by a process of another uid (root only: setuid). */
START_TEST(test_other_uid)
{
    if (geteuid() != 0)
        return;
    char name[64];
    size_t len = s_name(name, sizeof name, "other");
    int ready[2], hold[2];
    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(hold), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        char c = 'r';
        close(ready[0]);
        close(hold[1]);
        if (setgid(OTHER_UID) != 0 || setuid(OTHER_UID) != 0)
            _exit(2);
        s_bind(name, len, false);
        /* Holds the name until the parent closes its end. */
        _exit(write(ready[1], &c, 1) == 1 && read(hold[0], &c, 1) >= 0 ? 0 : 3);
    }
    close(ready[1]);
    close(hold[0]);
    char c;
    ck_assert_int_eq(read(ready[0], &c, 1), 1);
    uid_t uid = 0;
    int rc = rdzv_unixdiag_owner(name, len, &uid);
    close(hold[1]);
    close(ready[0]);
    int status;
    waitpid(child, &status, 0);
    ck_assert_int_eq(status, 0);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq((int) uid, OTHER_UID);
}
END_TEST

static Suite *s_suite(void)
{
    Suite *s = suite_create("agent_unixdiag");
    TCase *tc = tcase_create("owner");
    tcase_add_loop_test(tc, test_owner_listening_or_not, 0, 2);
    tcase_add_test(tc, test_exact_name_only);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_other_uid);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return rdzv_check_run(s_suite());
}
