/* Decodes IDs made by the real ncclGetUniqueId (needs no GPU) and checks
 * that the decoded address and port are where NCCL's root listens. */
#include "nccl_id.h"

#include <arpa/inet.h>
#include "check_run.h"
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* nccl.h declares a few functions without prototypes. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

static void s_real_id(unsigned char out[RDZV_NCCL_ID_BYTES], rdzv_nccl_id_info_t *info)
{
    ncclUniqueId id;
    ncclResult_t rc = ncclGetUniqueId(&id);
    ck_assert_msg(rc == ncclSuccess, "ncclGetUniqueId: %s", ncclGetErrorString(rc));
    memcpy(out, id.internal, RDZV_NCCL_ID_BYTES);
    int drc = rdzv_nccl_id_decode(out, info, RDZV_NCCL_LAYOUT_AUTO);
    ck_assert_msg(drc == 0, "decode: %s", info->problem);
}

START_TEST(test_real_id_plausible)
{
    unsigned char id[RDZV_NCCL_ID_BYTES];
    rdzv_nccl_id_info_t info;
    s_real_id(id, &info);

    ck_assert_msg(info.family == AF_INET || info.family == AF_INET6,
                  "family %d", info.family);
    ck_assert_uint_ne(info.port, 0);
    ck_assert(info.magic != 0);
    ck_assert_str_ne(info.address, "");

    int version = 0;
    ck_assert_int_eq(ncclGetVersion(&version), ncclSuccess);
    rdzv_nccl_layout_t want = version >= 22900 ? RDZV_NCCL_LAYOUT_2_29 : RDZV_NCCL_LAYOUT_2_21;
    /* A fresh ID has nRanks 0 in 2.29, which reads the same as 2.21. */
    if (want == RDZV_NCCL_LAYOUT_2_21)
        ck_assert_int_eq(info.layout, RDZV_NCCL_LAYOUT_2_21);
}
END_TEST

/* The decoded endpoint must accept a TCP connection: the root thread that
 * ncclGetUniqueId started listens there. */
START_TEST(test_real_id_root_listens)
{
    unsigned char id[RDZV_NCCL_ID_BYTES];
    rdzv_nccl_id_info_t info;
    s_real_id(id, &info);

    struct sockaddr_storage ss;
    socklen_t sslen;
    memset(&ss, 0, sizeof ss);
    if (info.family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *) &ss;
        sin->sin_family = AF_INET;
        sin->sin_port = htons(info.port);
        memcpy(&sin->sin_addr, id + 12, 4);
        sslen = sizeof *sin;
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *) &ss;
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(info.port);
        memcpy(&sin6->sin6_addr, id + 16, 16);
        sin6->sin6_scope_id = info.scope_id;
        sslen = sizeof *sin6;
    }
    int fd = socket(info.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    int rc = connect(fd, (struct sockaddr *) &ss, sslen);
    ck_assert_msg(rc == 0, "connect to %s port %u: %s", info.address,
                  (unsigned) info.port, strerror(errno));
    close(fd);
}
END_TEST

START_TEST(test_real_ids_differ)
{
    unsigned char a[RDZV_NCCL_ID_BYTES], b[RDZV_NCCL_ID_BYTES];
    rdzv_nccl_id_info_t ia, ib;
    s_real_id(a, &ia);
    s_real_id(b, &ib);
    ck_assert(ia.magic != ib.magic);
    ck_assert_uint_ne(ia.port, ib.port);
}
END_TEST

static Suite *s_suite(void)
{
    Suite *s = suite_create("nccl_id_real");
    TCase *tc = tcase_create("ncclGetUniqueId");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_real_id_plausible);
    tcase_add_test(tc, test_real_id_root_listens);
    tcase_add_test(tc, test_real_ids_differ);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return rdzv_check_run(s_suite());
}
