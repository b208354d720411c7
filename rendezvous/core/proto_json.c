#include "proto_json.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const char *s_kind(const cJSON *v)
{
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsBool(v))
        return "a boolean";
    return "null";
}

static int s_hex4(const char *p, const char *end)
{
    if (end - p < 4)
        return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        if (!isxdigit((unsigned char) p[i]))
            return -1;
        v = v * 16 + (isdigit((unsigned char) p[i]) ? p[i] - '0' : (p[i] | 0x20) - 'a' + 10);
    }
    return v;
}

static bool s_starts(const char *p, const char *end, const char *lit)
{
    size_t n = strlen(lit);
    return (size_t) (end - p) >= n && memcmp(p, lit, n) == 0;
}

/* What a frame holds outside and inside its strings that JSON forbids or
 * cJSON refuses: one pass, so a 69 KB frame costs one scan. */
typedef struct {
    int depth, max_depth;
    long surrogate_at;           /* a \uD800-\uDFFF escape not in a pair; -1 */
    int surrogate;
    long literal_at;             /* NaN or Infinity outside a string; -1 */
} s_scan_t;

static void s_scan(const char *frame, size_t len, s_scan_t *s)
{
    *s = (s_scan_t) { .surrogate_at = -1, .literal_at = -1 };
    const char *p = frame, *end = frame + len;
    bool in_string = false;
    for (; p < end; p++) {
        if (in_string) {
            if (*p == '"') {
                in_string = false;
            } else if (*p == '\\' && p + 1 < end && p[1] == 'u') {
                int u = s_hex4(p + 2, end);
                bool high = u >= 0xd800 && u <= 0xdbff, low = u >= 0xdc00 && u <= 0xdfff;
                int next = high && end - p >= 12 && p[6] == '\\' && p[7] == 'u'
                           ? s_hex4(p + 8, end) : -1;
                if ((low || (high && !(next >= 0xdc00 && next <= 0xdfff)))
                    && s->surrogate_at < 0) {
                    s->surrogate_at = p - frame;
                    s->surrogate = u;
                }
                p += high && next >= 0 ? 11 : 5;
            } else if (*p == '\\') {
                p++;
            }
        } else if (*p == '"') {
            in_string = true;
        } else if (*p == '{' || *p == '[') {
            if (++s->depth > s->max_depth)
                s->max_depth = s->depth;
        } else if (*p == '}' || *p == ']') {
            s->depth--;
        } else if (s->literal_at < 0 && (s_starts(p, end, "NaN") || s_starts(p, end, "Infinity"))) {
            s->literal_at = p - frame;
        }
    }
}

void rdzv_json_why(const char *frame, size_t len, const cJSON *root, const char *stop,
                   char *msg, size_t msglen)
{
    if (root) {
        snprintf(msg, msglen, "request is %s, not a JSON object", s_kind(root));
        return;
    }
    s_scan_t s;
    s_scan(frame, len, &s);
    if (s.max_depth > CJSON_NESTING_LIMIT)
        snprintf(msg, msglen, "request nests arrays and objects deeper than %d levels",
                 CJSON_NESTING_LIMIT);
    else if (s.surrogate_at >= 0)
        snprintf(msg, msglen, "request holds a lone UTF-16 surrogate \\u%04X at byte %ld",
                 (unsigned) s.surrogate, s.surrogate_at);
    else if (s.literal_at >= 0)
        snprintf(msg, msglen, "request holds NaN or Infinity at byte %ld: JSON has neither",
                 s.literal_at);
    else if (len == 0)
        snprintf(msg, msglen, "request is empty, not a JSON object");
    else
        snprintf(msg, msglen, "request is not valid JSON: it stops making sense at byte %ld",
                 stop && stop >= frame && stop <= frame + len ? (long) (stop - frame) : 0L);
}
