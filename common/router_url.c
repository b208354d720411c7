#include "router_url.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>

const char *const rdzv_router_err_names[RDZV_ROUTER_ERR_REASONS] = {
    "unreachable", "timeout", "unauthorized", "not_found", "refused", "server_error", "protocol",
};

/* What may appear in a URL's host, port and path here: printable ASCII
 * without space, quote, '<', '>', '\\', '^', '`', '{', '|', '}', and none of
 * the HAProxy CLI's separators (';' splits commands). */
static bool s_url_char(unsigned char c)
{
    return c > 0x20 && c < 0x7f && !strchr("\"<>\\^`{|};", c);
}

/* HAProxy's proxy names: letters, digits, '-', '_', '.' and ':'. */
static bool s_backend_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
           || strchr("-_.:", c);
}

static int s_fail(char *err, size_t errlen, const char *msg, const char *url)
{
    snprintf(err, errlen, "router URL \"%.*s\": %s", 200, url, msg);
    return -1;
}

static int s_parse_http(const char *url, const char *rest, rdzv_router_url_t *out, char *err,
                        size_t errlen)
{
    size_t host_len = strcspn(rest, "/?#");
    if (host_len == 0)
        return s_fail(err, errlen, "names no host", url);
    if (rest[host_len] == '?' || strchr(rest, '#') || strchr(rest, '?'))
        return s_fail(err, errlen, "must have no query or fragment", url);
    const char *colon = memchr(rest, ':', host_len);
    if (rest[0] == '[') {          /* [IPv6]: the port's colon follows ']' */
        const char *close = memchr(rest, ']', host_len);
        if (!close || (close + 1 < rest + host_len && close[1] != ':'))
            return s_fail(err, errlen, "has a malformed [IPv6] host", url);
        colon = close + 1 < rest + host_len ? close + 1 : NULL;
    }
    if (colon == rest)
        return s_fail(err, errlen, "names no host", url);
    if (colon) {
        const char *p = colon + 1;
        long port = 0;
        if (p == rest + host_len)
            return s_fail(err, errlen, "has an empty port", url);
        for (; p < rest + host_len; p++) {
            if (*p < '0' || *p > '9')
                return s_fail(err, errlen, "has a port that is not a number", url);
            port = port * 10 + (*p - '0');
            if (port > 65535)
                break;
        }
        if (port < 1 || port > 65535)
            return s_fail(err, errlen, "has a port outside 1..65535", url);
    }
    out->kind = RDZV_ROUTER_HTTP;
    size_t len = strlen(url);
    while (len > 0 && url[len - 1] == '/' && url + len > rest + host_len)
        len--;
    memcpy(out->base, url, len);
    out->base[len] = '\0';
    out->backend[0] = '\0';
    return 0;
}

static int s_parse_haproxy(const char *url, const char *rest, rdzv_router_url_t *out, char *err,
                           size_t errlen)
{
    if (rest[0] != '/')
        return s_fail(err, errlen, "must name the socket's absolute path: "
                      "haproxy:///PATH#BACKEND (three slashes)", url);
    const char *hash = strchr(rest, '#');
    if (!hash || hash[1] == '\0')
        return s_fail(err, errlen, "must name the backend after '#': haproxy:///PATH#BACKEND",
                      url);
    size_t path_len = (size_t) (hash - rest);
    if (path_len >= sizeof ((struct sockaddr_un *) 0)->sun_path)
        return s_fail(err, errlen, "has a socket path too long for a unix socket", url);
    for (const char *p = hash + 1; *p; p++)
        if (!s_backend_char((unsigned char) *p))
            return s_fail(err, errlen, "has a backend name with characters HAProxy does not "
                          "allow (letters, digits, '-', '_', '.', ':')", url);
    out->kind = RDZV_ROUTER_HAPROXY;
    memcpy(out->base, rest, path_len);
    out->base[path_len] = '\0';
    strcpy(out->backend, hash + 1);
    return 0;
}

/* A path with an empty, "." or ".." segment: one an allow-list prefix
 * could be climbed out of ("/run/h/../../x.sock"). */
static bool s_odd_segments(const char *path, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (path[i] != '/')
            continue;
        size_t seg = strcspn(path + i + 1, "/#");
        if (i + 1 + seg > len)
            seg = len - i - 1;
        if ((seg == 0 && i + 1 < len) || (seg == 1 && path[i + 1] == '.')
            || (seg == 2 && path[i + 1] == '.' && path[i + 2] == '.'))
            return true;
    }
    return false;
}

bool rdzv_router_allowed(const char *const *allow, int n, const char *url)
{
    for (int i = 0; i < n; i++) {
        const char *a = allow[i];
        size_t len = strlen(a);
        if (strcmp(a, "*") == 0
            || (len > 0 && strncmp(url, a, len) == 0
                && (url[len] == '\0' || url[len] == '/' || url[len] == '#' || a[len - 1] == '/')))
            return true;
    }
    return false;
}

int rdzv_router_url_parse(const char *url, rdzv_router_url_t *out, char *err, size_t errlen)
{
    if (!url || !*url)
        return s_fail(err, errlen, "is empty", url ? url : "");
    size_t len = strlen(url);
    if (len > RDZV_ROUTER_URL_MAX)
        return s_fail(err, errlen, "is longer than 512 bytes", url);
    for (const char *p = url; *p; p++)
        if (!s_url_char((unsigned char) *p))
            return s_fail(err, errlen, "has a space, control or unsafe character", url);
    const char *path = strstr(url, "://");
    path = path ? strchr(path + 3, '/') : NULL;
    if (path && s_odd_segments(path, strcspn(path, "#")))
        return s_fail(err, errlen, "has an empty, \".\" or \"..\" path segment", url);
    if (strncmp(url, "http://", 7) == 0)
        return s_parse_http(url, url + 7, out, err, errlen);
    if (strncmp(url, "https://", 8) == 0)
        return s_parse_http(url, url + 8, out, err, errlen);
    if (strncmp(url, "haproxy://", 10) == 0)
        return s_parse_haproxy(url, url + 10, out, err, errlen);
    return s_fail(err, errlen, "has an unknown scheme (http://, https:// or haproxy:///PATH#BACKEND)",
                  url);
}
