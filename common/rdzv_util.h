/* Small helpers shared by rdzvd, librdzv, the agent and the shim. */
#ifndef RDZV_UTIL_H
#define RDZV_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Writes 2*len lowercase hex characters and a NUL into out. */
void rdzv_hex_encode(const unsigned char *in, size_t len, char *out);
/* Decodes exactly 2*len hex characters; returns 0 or -1 if malformed. */
int rdzv_hex_decode(const char *hex, unsigned char *out, size_t len);

/* Names (group, key): 1..255 printable ASCII bytes, no spaces. */
bool rdzv_name_valid(const char *s);
/* Free text (host, node, session): 1..255 bytes, no control characters. */
/* A token file's contents, trailing newlines and spaces cut, malloc'd; NULL
 * when it cannot be read or holds nothing (at most 4096 bytes are read). */
char *rdzv_read_token_file(const char *path);
/* Whether got equals the secret want, in time that depends on want's length
 * only: a reply's timing must not reveal how much of a guess was right. */
bool rdzv_secret_equal(const char *want, const char *got);
bool rdzv_text_valid(const char *s);

/* Whether s[0..len) is well-formed UTF-8: no overlong forms, surrogates,
 * code points above U+10FFFF or cut-off sequences. */
bool rdzv_utf8_valid(const char *s, size_t len);
/* How many bytes of the UTF-8 string s, at most max, end on a character
 * boundary: for "%.*s", so a shortened echo stays valid UTF-8. */
size_t rdzv_utf8_prefix(const char *s, size_t max);

/* Fills out with nbytes random bytes from getrandom(); returns 0 or -1. */
int rdzv_random_bytes(void *out, size_t nbytes);

/* Writes into out the path rel resolved against the directory of the
 * running executable (rel itself when absolute); returns 0, or -1 when
 * /proc/self/exe cannot be read or out is too small. */
int rdzv_path_beside_exe(const char *rel, char *out, size_t len);

/* The time ms milliseconds from now on clock, for timed waits. */
struct timespec;
void rdzv_timespec_after(int clock, int ms, struct timespec *out);

/* Monotonic clock in milliseconds, for deadlines. */
int64_t rdzv_now_ms(void);

/* An endpoint as ZeroMQ wants it: "tcp://host:port" and any other
 * "scheme://..." as given; "host:port", "[v6]:port" and "host" (port
 * RDZV_DEFAULT_PORT; a bare IPv6 address too) get "tcp://" and the port.
 * Returns 0, or -1 if out is too small or the port is not 1..65535. */
int rdzv_endpoint_normalize(const char *in, char *out, size_t len);

#endif
