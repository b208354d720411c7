#include "check_run.h"
#include <check.h>
#include <string.h>
#include <unistd.h>

#include "env_text.h"
#include "rdzv_util.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct {
    const char *bytes;
    size_t len;                  /* 0: strlen(bytes) */
    bool valid;
} s_utf8_case_t;

static const s_utf8_case_t s_utf8_cases[] = {
    { "", 0, true },
    { "plain ascii", 0, true },
    { "\x7f", 0, true },
    { "\xc2\x80", 0, true },              /* U+0080, smallest 2-byte */
    { "caf\xc3\xa9", 0, true },
    { "\xdf\xbf", 0, true },              /* U+07FF */
    { "\xe0\xa0\x80", 0, true },          /* U+0800, smallest 3-byte */
    { "\xe2\x82\xac", 0, true },          /* euro sign */
    { "\xed\x9f\xbf", 0, true },          /* U+D7FF, below the surrogates */
    { "\xee\x80\x80", 0, true },          /* U+E000, above them */
    { "\xef\xbf\xbf", 0, true },          /* U+FFFF */
    { "\xf0\x90\x80\x80", 0, true },      /* U+10000, smallest 4-byte */
    { "\xf0\x9f\x98\x80", 0, true },      /* emoji */
    { "\xf4\x8f\xbf\xbf", 0, true },      /* U+10FFFF, the last */
    { "a\0b", 3, true },                  /* NUL is UTF-8; proto refuses it apart */
    { "\x80", 0, false },                 /* lone continuation */
    { "\xbf", 0, false },
    { "\xc0\x80", 0, false },             /* overlong NUL */
    { "\xc1\xbf", 0, false },             /* overlong 2-byte */
    { "\xe0\x80\x80", 0, false },         /* overlong 3-byte */
    { "\xe0\x9f\xbf", 0, false },
    { "\xf0\x80\x80\x80", 0, false },     /* overlong 4-byte */
    { "\xf0\x8f\xbf\xbf", 0, false },
    { "\xed\xa0\x80", 0, false },         /* U+D800, high surrogate */
    { "\xed\xbf\xbf", 0, false },         /* U+DFFF, low surrogate */
    { "\xf4\x90\x80\x80", 0, false },     /* U+110000 */
    { "\xf5\x80\x80\x80", 0, false },
    { "\xff", 0, false },
    { "\xfe", 0, false },
    { "\xc3", 0, false },                 /* cut off */
    { "\xe2\x82", 0, false },
    { "\xf0\x9f\x98", 0, false },
    { "\xc3\x28", 0, false },             /* bad continuation */
    { "\xe2\x28\xa1", 0, false },
    { "\xe2\x82\x28", 0, false },
    { "\xf0\x9f\x28\x80", 0, false },
    { "ok\xc3\xa9then\xff", 0, false },
};

START_TEST(test_utf8_valid_table)
{
    const s_utf8_case_t *c = &s_utf8_cases[_i];
    size_t len = c->len ? c->len : strlen(c->bytes);
    ck_assert_msg(rdzv_utf8_valid(c->bytes, len) == c->valid, "case %d", _i);
}
END_TEST

static const struct {
    const char *s;
    size_t max, want;
} s_prefix_cases[] = {
    { "abc", 5, 3 },
    { "abc", 3, 3 },
    { "abc", 2, 2 },
    { "a\xc3\xa9", 2, 1 },                /* would split the e-acute */
    { "a\xc3\xa9", 3, 3 },
    { "\xe2\x82\xac\xe2\x82\xac", 5, 3 },
    { "\xf0\x9f\x98\x80", 3, 0 },
    { "\xf0\x9f\x98\x80z", 4, 4 },
};

START_TEST(test_utf8_prefix_table)
{
    ck_assert_uint_eq(rdzv_utf8_prefix(s_prefix_cases[_i].s, s_prefix_cases[_i].max),
                      s_prefix_cases[_i].want);
}
END_TEST

/* Endpoints as users type them, and what ZeroMQ gets. */
START_TEST(test_endpoint_normalize)
{
    static const struct { const char *in, *out; } ok[] = {
        { "tcp://10.0.0.1:29400", "tcp://10.0.0.1:29400" },
        { "ipc:///run/rdzv.sock", "ipc:///run/rdzv.sock" },
        { "rdzvd:29401", "tcp://rdzvd:29401" },
        { "rdzvd", "tcp://rdzvd:29400" },
        { "10.0.0.1", "tcp://10.0.0.1:29400" },
        { "*", "tcp://*:29400" },
        { "[::1]:5", "tcp://[::1]:5" },
        { "[fd00::1]", "tcp://[fd00::1]:29400" },
        { "fd00::1", "tcp://[fd00::1]:29400" },
    };
    char out[64];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        ck_assert_int_eq(rdzv_endpoint_normalize(ok[i].in, out, sizeof out), 0);
        ck_assert_str_eq(out, ok[i].out);
    }
    static const char *const bad[] = { "", "host:", "host:0", "host:65536", "host:12a",
                                       ":29400", "[::1", "[::1]x", "[::1]:" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(rdzv_endpoint_normalize(bad[i], out, sizeof out) < 0, "%s", bad[i]);
    ck_assert_int_eq(rdzv_endpoint_normalize("averyveryverylonghostname", out, 16), -1);
}
END_TEST

static const char *const s_env_values[] = {
    "", "19500", "tcp://10.0.0.1:29400", "a b", "it's", "$HOME", "`id`", "x\\y", "'", "''",
    "--data-parallel-size 4 --data-parallel-address 'h'", "*", "a;b", "\"q\"", "[::1]",
};

/* What rdzv_env_put writes, split back and sourced by a real sh, is the
 * value again; a plain value stays unquoted (grep RDZV_EPOCH=3 works). */
START_TEST(test_env_text_roundtrip)
{
    const char *value = s_env_values[_i];
    for (int always = 0; always <= 1; always++) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        ck_assert_int_eq(rdzv_env_put(f, "K", value, always), 0);
        fclose(f);
        ck_assert_int_eq(text[len - 1], '\n');
        if (!always && strcmp(value, "19500") == 0)
            ck_assert_str_eq(text, "K=19500\n");
        char path[] = "/tmp/rdzv-env-XXXXXX";
        int fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, text, len), (ssize_t) len);
        close(fd);
        char cmd[128], got[256] = "";
        snprintf(cmd, sizeof cmd, "sh -c '. %s && printf %%s \"$K\"'", path);
        FILE *p = popen(cmd, "r");
        size_t n = fread(got, 1, sizeof got - 1, p);
        got[n] = '\0';
        ck_assert_int_eq(pclose(p), 0);
        unlink(path);
        ck_assert_str_eq(got, value);
        text[len - 1] = '\0';
        char *key, *v;
        ck_assert(rdzv_env_split(text, &key, &v));
        ck_assert_str_eq(key, "K");
        ck_assert_str_eq(v, value);
        free(text);
    }
}
END_TEST

START_TEST(test_env_split_refuses)
{
    char none[] = "no equals sign", empty[] = "=value";
    char *key, *value;
    ck_assert(!rdzv_env_split(none, &key, &value));
    ck_assert(!rdzv_env_split(empty, &key, &value));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("util");
    TCase *tv = tcase_create("rdzv_utf8_valid");
    tcase_add_loop_test(tv, test_utf8_valid_table, 0,
                        (int) (sizeof s_utf8_cases / sizeof s_utf8_cases[0]));
    suite_add_tcase(s, tv);
    TCase *tp = tcase_create("rdzv_utf8_prefix");
    tcase_add_loop_test(tp, test_utf8_prefix_table, 0,
                        (int) (sizeof s_prefix_cases / sizeof s_prefix_cases[0]));
    suite_add_tcase(s, tp);
    TCase *te = tcase_create("rdzv_endpoint_normalize");
    tcase_add_test(te, test_endpoint_normalize);
    suite_add_tcase(s, te);
    TCase *tx = tcase_create("env_text");
    tcase_add_loop_test(tx, test_env_text_roundtrip, 0,
                        (int) (sizeof s_env_values / sizeof s_env_values[0]));
    tcase_add_test(tx, test_env_split_refuses);
    suite_add_tcase(s, tx);
    return rdzv_check_run(s);
}
