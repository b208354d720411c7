/* NCCL unique ID decoding: IDs built byte by byte for the 2.21-2.28 and 2.29
 * layouts, IPv4 and IPv6, and malformed IDs. */
#include "nccl_id.h"
#include "rdzv_util.h"

#include <arpa/inet.h>
#include "check_run.h"
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* The fields a test ID is made of; the writer below puts each at the offset
 * NCCL's struct gives it (see nccl_id.h). */
typedef struct {
    uint64_t magic;
    uint16_t family;
    uint16_t port;
    const char *addr;       /* parsed as the family says; NULL: left zero */
    uint32_t scope_id;
    int32_t n_ranks;        /* written at offset 36 when nonzero */
    int stray_offset;       /* a byte set to 0x5a there; -1: none */
} id_spec_t;

typedef struct {
    const char *name;
    id_spec_t spec;
    int layout;             /* asked of the decoder */
    int rc;                 /* 0, or -1 with EBADMSG */
    rdzv_nccl_layout_t want_layout;
    int want_family;
    const char *want_address;
    uint16_t want_port;
    int want_n_ranks;
    const char *want_problem;  /* substring of out.problem; NULL: "" */
} decode_case_t;

static void s_build(const id_spec_t *spec, unsigned char id[RDZV_NCCL_ID_BYTES])
{
    memset(id, 0, RDZV_NCCL_ID_BYTES);
    memcpy(id, &spec->magic, sizeof spec->magic);
    memcpy(id + 8, &spec->family, sizeof spec->family);
    id[10] = (unsigned char) (spec->port >> 8);
    id[11] = (unsigned char) (spec->port & 0xff);
    if (spec->addr && spec->family == AF_INET)
        ck_assert_int_eq(inet_pton(AF_INET, spec->addr, id + 12), 1);
    if (spec->addr && spec->family == AF_INET6)
        ck_assert_int_eq(inet_pton(AF_INET6, spec->addr, id + 16), 1);
    memcpy(id + 32, &spec->scope_id, sizeof spec->scope_id);
    memcpy(id + 36, &spec->n_ranks, sizeof spec->n_ranks);
    if (spec->stray_offset >= 0)
        id[spec->stray_offset] = 0x5a;
}

#define MAGIC_A 0x0123456789abcdefULL
#define MAGIC_B 0xfedcba9876543210ULL
#define V4(port, addr) AF_INET, port, addr, 0
#define V6(port, addr, scope) AF_INET6, port, addr, scope

static const decode_case_t s_cases[] = {
    {"ipv4 2.21 auto", {MAGIC_A, V4(35181, "192.0.2.2"), 0, -1},
     RDZV_NCCL_LAYOUT_AUTO, 0, RDZV_NCCL_LAYOUT_2_21, AF_INET, "192.0.2.2", 35181, 0, NULL},
    {"ipv4 2.21 forced", {MAGIC_A, V4(1, "10.0.0.11"), 0, -1},
     RDZV_NCCL_LAYOUT_2_21, 0, RDZV_NCCL_LAYOUT_2_21, AF_INET, "10.0.0.11", 1, 0, NULL},
    {"ipv4 2.29 auto", {MAGIC_B, V4(65535, "127.0.0.1"), 4, -1},
     RDZV_NCCL_LAYOUT_AUTO, 0, RDZV_NCCL_LAYOUT_2_29, AF_INET, "127.0.0.1", 65535, 4, NULL},
    {"ipv4 2.29 forced, nRanks 0", {MAGIC_B, V4(29500, "198.51.100.7"), 0, -1},
     RDZV_NCCL_LAYOUT_2_29, 0, RDZV_NCCL_LAYOUT_2_29, AF_INET, "198.51.100.7", 29500, 0, NULL},
    {"ipv6 2.21 auto", {MAGIC_A, V6(40000, "2001:db8::7", 0), 0, -1},
     RDZV_NCCL_LAYOUT_AUTO, 0, RDZV_NCCL_LAYOUT_2_21, AF_INET6, "2001:db8::7", 40000, 0, NULL},
    {"ipv6 link-local scope", {MAGIC_A, V6(40001, "fe80::1", 3), 0, -1},
     RDZV_NCCL_LAYOUT_2_21, 0, RDZV_NCCL_LAYOUT_2_21, AF_INET6, "fe80::1%3", 40001, 0, NULL},
    {"ipv6 2.29 auto", {MAGIC_B, V6(19500, "::1", 0), 1024, -1},
     RDZV_NCCL_LAYOUT_AUTO, 0, RDZV_NCCL_LAYOUT_2_29, AF_INET6, "::1", 19500, 1024, NULL},
    {"all zero", {0, 0, 0, NULL, 0, 0, -1},
     RDZV_NCCL_LAYOUT_AUTO, -1, RDZV_NCCL_LAYOUT_2_21, 0, "", 0, 0, "all bytes are zero"},
    {"unknown family", {MAGIC_A, 17, 35181, NULL, 0, 0, -1},
     RDZV_NCCL_LAYOUT_AUTO, -1, RDZV_NCCL_LAYOUT_2_21, 17, "", 0, 0, "unknown address family 17"},
    {"family in network order", {MAGIC_A, 0x0200, 35181, NULL, 0, 0, -1},
     RDZV_NCCL_LAYOUT_AUTO, -1, RDZV_NCCL_LAYOUT_2_21, 0x0200, "", 0, 0, "unknown address family 512"},
    {"2.29 ID read as 2.21", {MAGIC_A, V4(35181, "192.0.2.2"), 2, -1},
     RDZV_NCCL_LAYOUT_2_21, -1, RDZV_NCCL_LAYOUT_2_21, AF_INET, "192.0.2.2", 35181, 0,
     "nonzero byte at offset 36, beyond the 2.21-2.28 layout"},
    {"stray byte after 2.29", {MAGIC_A, V4(35181, "192.0.2.2"), 2, 40},
     RDZV_NCCL_LAYOUT_AUTO, -1, RDZV_NCCL_LAYOUT_2_29, AF_INET, "192.0.2.2", 35181, 2,
     "nonzero byte at offset 40, beyond the 2.29 layout"},
    {"stray last byte", {MAGIC_A, V6(1, "2001:db8::1", 0), 0, 127},
     RDZV_NCCL_LAYOUT_AUTO, -1, RDZV_NCCL_LAYOUT_2_21, AF_INET6, "2001:db8::1", 1, 0,
     "offset 127"},
    {"negative nRanks", {MAGIC_A, V4(35181, "192.0.2.2"), -5, -1},
     RDZV_NCCL_LAYOUT_2_29, -1, RDZV_NCCL_LAYOUT_2_29, AF_INET, "192.0.2.2", 35181, -5,
     "negative nRanks -5"},
};

START_TEST(test_decode_table)
{
    const decode_case_t *c = &s_cases[_i];
    unsigned char id[RDZV_NCCL_ID_BYTES];
    rdzv_nccl_id_info_t info;
    s_build(&c->spec, id);

    errno = 0;
    int rc = rdzv_nccl_id_decode(id, &info, c->layout);
    ck_assert_msg(rc == c->rc, "%s: rc %d, problem '%s'", c->name, rc, info.problem);
    if (rc < 0)
        ck_assert_int_eq(errno, EBADMSG);
    ck_assert_msg(info.magic == c->spec.magic, "%s: magic", c->name);
    ck_assert_int_eq(info.layout, c->want_layout);
    ck_assert_int_eq(info.family, c->want_family);
    ck_assert_str_eq(info.address, c->want_address);
    ck_assert_uint_eq(info.port, c->want_port);
    ck_assert_int_eq(info.n_ranks, c->want_n_ranks);
    if (c->want_problem)
        ck_assert_msg(strstr(info.problem, c->want_problem), "%s: problem '%s'",
                      c->name, info.problem);
    else
        ck_assert_str_eq(info.problem, "");
}
END_TEST

/* Pins the offsets independently of s_build: the bytes as NCCL 2.28 lays
 * them out on x86-64 for 192.0.2.2:35181 and [2001:db8::7]:40000 (2.29,
 * nRanks 8), zero padded to 128 bytes. */
static void s_from_hex(const char *prefix, unsigned char id[RDZV_NCCL_ID_BYTES])
{
    char hex[2 * RDZV_NCCL_ID_BYTES + 1];
    memset(hex, '0', 2 * RDZV_NCCL_ID_BYTES);
    hex[2 * RDZV_NCCL_ID_BYTES] = '\0';
    memcpy(hex, prefix, strlen(prefix));
    ck_assert_int_eq(rdzv_hex_decode(hex, id, RDZV_NCCL_ID_BYTES), 0);
}

START_TEST(test_decode_raw_bytes)
{
    unsigned char id[RDZV_NCCL_ID_BYTES];
    rdzv_nccl_id_info_t info;

    s_from_hex("efcdab89674523010200896dc0000202", id);
    ck_assert_int_eq(rdzv_nccl_id_decode(id, &info, RDZV_NCCL_LAYOUT_AUTO), 0);
    ck_assert(info.magic == MAGIC_A);
    ck_assert_int_eq(info.family, AF_INET);
    ck_assert_str_eq(info.address, "192.0.2.2");
    ck_assert_uint_eq(info.port, 35181);
    ck_assert_int_eq(info.layout, RDZV_NCCL_LAYOUT_2_21);

    s_from_hex("1032547698badcfe0a009c400000000020010db8000000000000000000000007"
               "0000000008000000", id);
    ck_assert_int_eq(rdzv_nccl_id_decode(id, &info, RDZV_NCCL_LAYOUT_AUTO), 0);
    ck_assert(info.magic == MAGIC_B);
    ck_assert_int_eq(info.family, AF_INET6);
    ck_assert_str_eq(info.address, "2001:db8::7");
    ck_assert_uint_eq(info.port, 40000);
    ck_assert_int_eq(info.layout, RDZV_NCCL_LAYOUT_2_29);
    ck_assert_int_eq(info.n_ranks, 8);
}
END_TEST

START_TEST(test_decode_bad_arguments)
{
    unsigned char id[RDZV_NCCL_ID_BYTES] = {0};
    rdzv_nccl_id_info_t info;
    errno = 0;
    ck_assert_int_eq(rdzv_nccl_id_decode(NULL, &info, RDZV_NCCL_LAYOUT_AUTO), -1);
    ck_assert_int_eq(errno, EINVAL);
    errno = 0;
    ck_assert_int_eq(rdzv_nccl_id_decode(id, NULL, RDZV_NCCL_LAYOUT_AUTO), -1);
    ck_assert_int_eq(errno, EINVAL);
    errno = 0;
    ck_assert_int_eq(rdzv_nccl_id_decode(id, &info, 3), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(rdzv_nccl_id_decode(id, &info, -1), -1);
}
END_TEST

static void s_decode_spec(const id_spec_t *spec, int layout, rdzv_nccl_id_info_t *info)
{
    unsigned char id[RDZV_NCCL_ID_BYTES];
    s_build(spec, id);
    rdzv_nccl_id_decode(id, info, layout);
}

START_TEST(test_format_lines)
{
    static const id_spec_t v4 = {MAGIC_A, V4(35181, "192.0.2.2"), 0, -1};
    static const id_spec_t v6 = {MAGIC_B, V6(40000, "2001:db8::7", 0), 8, -1};
    static const id_spec_t bad = {MAGIC_A, 17, 35181, NULL, 0, 0, -1};
    rdzv_nccl_id_info_t info;
    char buf[RDZV_NCCL_ID_FORMAT_MAX];

    s_decode_spec(&v4, RDZV_NCCL_LAYOUT_AUTO, &info);
    const char *want4 = "magic 0x0123456789abcdef\nfamily inet\naddress 192.0.2.2\n"
                        "port 35181\nlayout 2.21-2.28\n";
    ck_assert_int_eq(rdzv_nccl_id_format(&info, buf, sizeof buf), (int) strlen(want4));
    ck_assert_str_eq(buf, want4);

    s_decode_spec(&v6, RDZV_NCCL_LAYOUT_AUTO, &info);
    ck_assert_int_ge(rdzv_nccl_id_format(&info, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "magic 0xfedcba9876543210\nfamily inet6\naddress 2001:db8::7\n"
                          "port 40000\nnranks 8\nlayout 2.29\n");

    s_decode_spec(&bad, RDZV_NCCL_LAYOUT_AUTO, &info);
    ck_assert_int_ge(rdzv_nccl_id_format(&info, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "magic 0x0123456789abcdef\nfamily unknown (17)\n"
                          "layout 2.21-2.28\nproblem unknown address family 17\n");
}
END_TEST

START_TEST(test_format_short_buffer)
{
    static const id_spec_t v6 = {MAGIC_B, V6(40000, "2001:db8::7", 0), 8, -1};
    rdzv_nccl_id_info_t info;
    char buf[40];
    s_decode_spec(&v6, RDZV_NCCL_LAYOUT_AUTO, &info);
    errno = 0;
    ck_assert_int_eq(rdzv_nccl_id_format(&info, buf, sizeof buf), -1);
    ck_assert_int_eq(errno, ENOSPC);
    ck_assert_str_eq(buf, "");
    errno = 0;
    ck_assert_int_eq(rdzv_nccl_id_format(NULL, buf, sizeof buf), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(rdzv_nccl_id_format(&info, buf, 0), -1);
}
END_TEST

START_TEST(test_layout_names)
{
    ck_assert_str_eq(rdzv_nccl_layout_name(RDZV_NCCL_LAYOUT_AUTO), "auto");
    ck_assert_str_eq(rdzv_nccl_layout_name(RDZV_NCCL_LAYOUT_2_21), "2.21-2.28");
    ck_assert_str_eq(rdzv_nccl_layout_name(RDZV_NCCL_LAYOUT_2_29), "2.29");
    ck_assert_str_eq(rdzv_nccl_layout_name(42), "unknown");
}
END_TEST

static Suite *s_suite(void)
{
    Suite *s = suite_create("nccl_id");
    TCase *decode = tcase_create("rdzv_nccl_id_decode");
    tcase_add_loop_test(decode, test_decode_table, 0,
                        (int) (sizeof s_cases / sizeof s_cases[0]));
    tcase_add_test(decode, test_decode_raw_bytes);
    tcase_add_test(decode, test_decode_bad_arguments);
    suite_add_tcase(s, decode);

    TCase *format = tcase_create("rdzv_nccl_id_format");
    tcase_add_test(format, test_format_lines);
    tcase_add_test(format, test_format_short_buffer);
    suite_add_tcase(s, format);

    TCase *names = tcase_create("rdzv_nccl_layout_name");
    tcase_add_test(names, test_layout_names);
    suite_add_tcase(s, names);
    return s;
}

int main(void)
{
    return rdzv_check_run(s_suite());
}
