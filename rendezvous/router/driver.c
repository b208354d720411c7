/* What every driver shares (driver.h). */
#include "driver.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int rdzv_router_fail(rdzv_router_sync_t *s, rdzv_router_err_t why, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    s->why = why;
    return -1;
}

int rdzv_router_host(const char *host, char *out, size_t len, bool *ip)
{
    unsigned char bin[sizeof (struct in6_addr)];
    int family = strchr(host, ':') ? AF_INET6 : AF_INET;
    if (inet_pton(family, host, bin) == 1)
        return (*ip = true, inet_ntop(family, bin, out, (socklen_t) len) ? 0 : -1);
    /* A DNS name: letters, digits, '-' and '.', not starting with '-'. */
    size_t n = strlen(host);
    if (n == 0 || n >= len || host[0] == '-' || strspn(host, "abcdefghijklmnopqrstuvwxyz"
            "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.") != n)
        return -1;
    memcpy(out, host, n + 1);
    *ip = false;
    return 0;
}
