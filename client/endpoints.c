#include "endpoints.h"

#include "rdzv_private.h"
#include "rdzv_util.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#define S_WANT "want tcp://HOST:PORT, HOST:PORT or HOST (port %d)"

/* Why the element in place n (from 0) of list is no endpoint; a list of
 * one says it as a single endpoint always did. */
static int s_bad(const char *element, int n, const char *list, char *err, size_t errlen)
{
    if (!strchr(list, ','))
        rdzv_set_error(err, errlen, "bad endpoint '%s': " S_WANT, list, RDZV_DEFAULT_PORT);
    else if (!*element)
        rdzv_set_error(err, errlen, "empty endpoint in place %d of the server list '%s'",
                       n + 1, list);
    else
        rdzv_set_error(err, errlen, "bad endpoint '%s' in place %d of the server list '%s': "
                       S_WANT, element, n + 1, list, RDZV_DEFAULT_PORT);
    errno = EINVAL;
    return -1;
}

/* The element of len bytes at text, in place n, into out->endpoint[n]. */
static int s_take(const char *text, size_t len, int n, const char *list,
                  rdzv_endpoints_t *out, char *err, size_t errlen)
{
    if (n >= RDZV_MAX_SERVERS) {
        rdzv_set_error(err, errlen, "the server list '%s' has more than %d endpoints",
                       list, RDZV_MAX_SERVERS);
        errno = EINVAL;
        return -1;
    }
    char element[RDZV_ENDPOINT_LEN];
    if (len >= sizeof element)
        return s_bad("(too long)", n, list, err, errlen);
    memcpy(element, text, len);
    element[len] = '\0';
    if (rdzv_endpoint_normalize(element, out->endpoint[n], RDZV_ENDPOINT_LEN) < 0)
        return s_bad(element, n, list, err, errlen);
    return 0;
}

int rdzv_endpoints_parse(const char *list, rdzv_endpoints_t *out, char *err, size_t errlen)
{
    out->count = 0;
    for (const char *at = list;;) {
        const char *comma = strchr(at, ',');
        size_t len = comma ? (size_t) (comma - at) : strlen(at);
        if (s_take(at, len, out->count, list, out, err, errlen) < 0)
            return -1;
        out->count++;
        if (!comma)
            return 0;
        at = comma + 1;
    }
}
