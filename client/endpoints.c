#include "endpoints.h"

#include "rdzv_private.h"
#include "rdzv_util.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#define S_TCP "tcp://"
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

/* element as ZeroMQ wants it. tcp://HOST:PORT is checked as HOST:PORT
 * is, and tcp://HOST means port RDZV_DEFAULT_PORT as HOST does (and as
 * torchrun's endpoints do): libzmq would refuse it. tcp://SOURCE;HOST:PORT
 * and other schemes go to libzmq as given. */
static int s_normalize(const char *element, char out[RDZV_ENDPOINT_LEN])
{
    const char *rest = strncmp(element, S_TCP, strlen(S_TCP)) == 0 ? element + strlen(S_TCP)
                                                                 : NULL;
    if (rest && !strchr(rest, ';') && !strstr(rest, "://"))
        return rdzv_endpoint_normalize(rest, out, RDZV_ENDPOINT_LEN);
    return rdzv_endpoint_normalize(element, out, RDZV_ENDPOINT_LEN);
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
    if (s_normalize(element, out->endpoint[n]) < 0)
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
