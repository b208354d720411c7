/* A group's router, as `rdzv agent --router URL` names it and rdzvd drives
 * it (docs/deployment.md, "Routing"):
 *   http://HOST[:PORT][/PREFIX]   a router with a worker-management HTTP API
 *   https://...                   (vLLM's router, SGLang's router)
 *   haproxy:///PATH#BACKEND       HAProxy's Runtime API on a unix socket, the
 *                                 servers of one backend
 * One parser for the agent (a bad URL is a usage error at start), rdzvd
 * (a join naming a bad one is refused) and the drivers. */
#ifndef RDZV_ROUTER_URL_H
#define RDZV_ROUTER_URL_H

#include <stdbool.h>
#include <stddef.h>

/* Longest router URL accepted, in bytes. */
#define RDZV_ROUTER_URL_MAX 512

typedef enum { RDZV_ROUTER_HTTP, RDZV_ROUTER_HAPROXY } rdzv_router_kind_t;

typedef struct {
    rdzv_router_kind_t kind;
    /* HTTP: the URL without a trailing '/', to which the API's paths are
     * appended. HAPROXY: the unix socket's path. */
    char base[RDZV_ROUTER_URL_MAX + 1];
    char backend[RDZV_ROUTER_URL_MAX + 1];   /* HAPROXY only */
} rdzv_router_url_t;

/* Why a call to a router failed: the reason label of
 * rdzv_router_errors_total and of a group's router_error. */
typedef enum {
    RDZV_ROUTER_ERR_UNREACHABLE,  /* no connection: refused, no route, no socket */
    RDZV_ROUTER_ERR_TIMEOUT,      /* connected, no answer in time */
    RDZV_ROUTER_ERR_UNAUTHORIZED, /* 401 or 403: the token is missing or wrong */
    RDZV_ROUTER_ERR_NOT_FOUND,    /* 404: not a router of that API, or no such backend */
    RDZV_ROUTER_ERR_REFUSED,      /* another 4xx, or HAProxy refused the command */
    RDZV_ROUTER_ERR_SERVER,       /* 5xx */
    RDZV_ROUTER_ERR_PROTOCOL,     /* an answer that is not what the API says */
    RDZV_ROUTER_ERR_REASONS
} rdzv_router_err_t;
extern const char *const rdzv_router_err_names[RDZV_ROUTER_ERR_REASONS];

/* Whether an allow list (rdzvd --router-allow) lets a group name url: an
 * entry equal to it, or one it extends by a path or a '#BACKEND'
 * ("haproxy:///run/h.sock" allows every backend of that socket), or "*".
 * url must have parsed: it has no "." or ".." segment to climb out of an
 * allowed directory with. */
bool rdzv_router_allowed(const char *const *allow, int n, const char *url);

/* Parses url into out; 0, or -1 with why in err (a sentence naming the
 * part at fault). */
int rdzv_router_url_parse(const char *url, rdzv_router_url_t *out, char *err, size_t errlen);

#endif
