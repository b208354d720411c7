#include "rdzv_util.h"
#include "rdzv_proto.h"

#include <errno.h>
#include <string.h>
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

int64_t rdzv_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
