#include "rdzv_util.h"
#include "rdzv_proto.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>
#include <time.h>

void rdzv_hex_encode(const unsigned char *in, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 0xf];
    }
    out[2 * len] = '\0';
}

static int s_nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int rdzv_hex_decode(const char *hex, unsigned char *out, size_t len)
{
    if (!hex || strlen(hex) != 2 * len)
        return -1;
    for (size_t i = 0; i < len; i++) {
        int hi = s_nibble(hex[2 * i]), lo = s_nibble(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (unsigned char) (hi << 4 | lo);
    }
    return 0;
}

bool rdzv_name_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > RDZV_MAX_NAME)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~')
            return false;
    return true;
}

char *rdzv_read_token_file(const char *path)
{
    FILE *f = fopen(path, "r");
    char buf[4097];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    buf[n] = '\0';
    return n ? strdup(buf) : NULL;
}

bool rdzv_secret_equal(const char *want, const char *got)
{
    size_t n = strlen(want), m = strlen(got);
    unsigned char diff = (unsigned char) (n != m);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char) (want[i] ^ got[i < m ? i : 0]);
    return diff == 0;
}

bool rdzv_text_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > RDZV_MAX_NAME)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char) s[i] < ' ' || s[i] == 0x7f)
            return false;
    return true;
}

/* Length of the well-formed UTF-8 sequence that starts s (RFC 3629,
 * table 3-7 of Unicode), 0 if there is none. The second byte's range is
 * what refuses overlongs (E0, F0), surrogates (ED) and > U+10FFFF (F4). */
static size_t s_utf8_sequence(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t need;
    unsigned char lo = 0x80, hi = 0xbf;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        need = 2;
    else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        need = 3;
        lo = s[0] == 0xe0 ? 0xa0 : lo;
        hi = s[0] == 0xed ? 0x9f : hi;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        need = 4;
        lo = s[0] == 0xf0 ? 0x90 : lo;
        hi = s[0] == 0xf4 ? 0x8f : hi;
    } else
        return 0;
    if (n < need || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < need; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return need;
}

bool rdzv_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *) s;
    while (len > 0) {
        size_t n = s_utf8_sequence(p, len);
        if (n == 0)
            return false;
        p += n;
        len -= n;
    }
    return true;
}

size_t rdzv_utf8_prefix(const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);
    if (n <= max)
        return n;
    /* s[n] continuing a sequence means the cut would split it. */
    for (n = max; n > 0 && ((unsigned char) s[n] & 0xc0) == 0x80; n--)
        ;
    return n;
}

int rdzv_random_bytes(void *out, size_t nbytes)
{
    unsigned char *p = out;
    while (nbytes > 0) {
        ssize_t got = getrandom(p, nbytes, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += got;
        nbytes -= (size_t) got;
    }
    return 0;
}

int rdzv_path_beside_exe(const char *rel, char *out, size_t len)
{
    if (rel[0] == '/') {
        int n = snprintf(out, len, "%s", rel);
        return n < 0 || (size_t) n >= len ? -1 : 0;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    int m = snprintf(out, len, "%s/%s", exe, rel);
    return m < 0 || (size_t) m >= len ? -1 : 0;
}

void rdzv_timespec_after(int clock, int ms, struct timespec *out)
{
    clock_gettime((clockid_t) clock, out);
    out->tv_sec += ms / 1000;
    out->tv_nsec += (long) (ms % 1000) * 1000000L;
    if (out->tv_nsec >= 1000000000L) {
        out->tv_sec++;
        out->tv_nsec -= 1000000000L;
    }
}

int64_t rdzv_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether text is a port number 1..65535, digits only. */
static bool s_port_text(const char *text, size_t len)
{
    if (len == 0 || len > 5)
        return false;
    long port = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] < '0' || text[i] > '9')
            return false;
        port = port * 10 + (text[i] - '0');
    }
    return port >= 1 && port <= 65535;
}

int rdzv_endpoint_normalize(const char *in, char *out, size_t len)
{
    int n;
    const char *colon = strrchr(in, ':');
    if (strstr(in, "://")) {
        n = snprintf(out, len, "%s", in);
    } else if (in[0] == '[') {                        /* [v6] or [v6]:port */
        const char *end = strchr(in, ']');
        if (!end || (end[1] && (end[1] != ':' || !s_port_text(end + 2, strlen(end + 2)))))
            return -1;
        n = end[1] ? snprintf(out, len, "tcp://%s", in)
                   : snprintf(out, len, "tcp://%s:%d", in, RDZV_DEFAULT_PORT);
    } else if (colon && strchr(in, ':') == colon) {   /* host:port */
        if (!s_port_text(colon + 1, strlen(colon + 1)) || colon == in)
            return -1;
        n = snprintf(out, len, "tcp://%s", in);
    } else if (colon) {                               /* a bare IPv6 address */
        n = snprintf(out, len, "tcp://[%s]:%d", in, RDZV_DEFAULT_PORT);
    } else {
        n = snprintf(out, len, "tcp://%s:%d", in, RDZV_DEFAULT_PORT);
    }
    return n < 0 || (size_t) n >= len || !*in ? -1 : 0;
}
