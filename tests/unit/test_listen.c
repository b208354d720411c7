/* The listener group behind rdzvd's shards (rendezvous/net/listen.c): which
 * endpoints it takes, that its listeners share one port, and that a port
 * already held is refused rather than shared. */
#include "check_run.h"
#include <check.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "listen.h"

static int s_port(int fd)
{
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *) &a, &len), 0);
    return a.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *) &a)->sin6_port)
                                   : ntohs(((struct sockaddr_in *) &a)->sin_port);
}

static int s_listening(int fd)
{
    int on = 0;
    socklen_t len = sizeof on;
    ck_assert_int_eq(getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len), 0);
    return on;
}

START_TEST(test_shardable)
{
    const char *yes[] = { "tcp://127.0.0.1:29400", "tcp://*:29400", "tcp://*:*", "tcp://localhost:0",
                          "tcp://[::1]:29400", "tcp://10.1.2.3:65535" };
    const char *no[] = { "ipc:///tmp/rdzv.sock", "tcp://eth0:29400", "tcp://*:!", "tcp://*:[6000-]",
                         "tcp://127.0.0.1", "tcp://127.0.0.1:65536", "tcp://127.0.0.1:-1",
                         "tcp://[::1:29400", "tcp://:29400", "inproc://x", "" };
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        ck_assert_msg(rdzv_listen_shardable(yes[i]), "%s", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        ck_assert_msg(!rdzv_listen_shardable(no[i]), "%s", no[i]);
}
END_TEST

START_TEST(test_group_shares_one_port)
{
    int fds[3];
    char err[256];
    ck_assert_int_eq(rdzv_listen_group("tcp://127.0.0.1:0", 3, fds, err, sizeof err), 0);
    int port = s_port(fds[0]);
    ck_assert_int_gt(port, 0);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(s_port(fds[i]), port);
        ck_assert(s_listening(fds[i]));
    }
    /* Another group (a second rdzvd) and a plain bind are refused. */
    char endpoint[64];
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", port);
    int other[2];
    ck_assert_int_eq(rdzv_listen_group(endpoint, 2, other, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "Address already in use") != NULL, "%s", err);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *) &a, sizeof a), -1);
    ck_assert_int_eq(errno, EADDRINUSE);
    close(fd);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
}
END_TEST

START_TEST(test_bad_endpoint)
{
    int fds[2];
    char err[256] = "";
    ck_assert_int_eq(rdzv_listen_group("ipc:///tmp/x", 2, fds, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tcp://ADDRESS:PORT") != NULL, "%s", err);
    ck_assert_int_eq(rdzv_listen_group("tcp://127.0.0.1:0", 0, fds, err, sizeof err), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("listen");
    TCase *tc = tcase_create("listen");
    tcase_add_test(tc, test_shardable);
    tcase_add_test(tc, test_group_shares_one_port);
    tcase_add_test(tc, test_bad_endpoint);
    suite_add_tcase(s, tc);
    return rdzv_check_run(s);
}
