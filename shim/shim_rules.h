/* Which bind() calls are the shim's (docs/agent.md): pure, unit tested in
 * tests/shim/test_rules.c. */
#ifndef RDZV_SHIM_RULES_H
#define RDZV_SHIM_RULES_H

#include <stdbool.h>

typedef enum {
    RDZV_SHIM_PASS = 0,        /* not ours: the real bind() */
    RDZV_SHIM_PROBE,           /* port in the range, no SO_REUSEADDR/SO_REUSEPORT */
    RDZV_SHIM_PROBE0,          /* port 0, no SO_REUSEADDR/SO_REUSEPORT */
    RDZV_SHIM_LISTENER,        /* port in the range, SO_REUSEADDR or SO_REUSEPORT */
    RDZV_SHIM_REFUSE,          /* in the range with no agent to hand it over: EADDRINUSE */
} rdzv_shim_action_t;

typedef struct {
    int domain;                /* SO_DOMAIN of the socket */
    int type;                  /* SO_TYPE */
    int protocol;              /* SO_PROTOCOL */
    int addr_family;           /* sa_family of the address passed */
    int port;                  /* host order */
    bool reuseaddr;
    bool reuseport;
    bool already_bound;        /* getsockname() shows a port */
    bool wildcard;             /* the address is 0.0.0.0 or :: */
} rdzv_shim_bind_t;

/* Whether a bind is a TCP bind over IPv4 or IPv6 of an unbound socket: the
 * only kind that needs the range at all. */
bool rdzv_shim_is_candidate(const rdzv_shim_bind_t *b);
/* The action for a candidate, with the managed range [base, limit). */
rdzv_shim_action_t rdzv_shim_classify(const rdzv_shim_bind_t *b, int base, int limit);
/* Whether a bind passes through on its address alone, before the socket
 * is read: a port outside the known range [base, limit) (base 0: not known
 * yet), or port 0 on one interface's address. Never true of a bind that
 * rdzv_shim_classify takes, whatever the socket. Inline: it is on every
 * bind() of the engine. */
static inline bool rdzv_shim_passes_on_address(int port, bool wildcard, int base, int limit)
{
    if (port == 0)
        return !wildcard;
    return port > 0 && base > 0 && (port < base || port >= limit);
}
/* Parses "BASE-LIMIT" (RDZV_PORT_RANGE); returns 0 or -1. */
int rdzv_shim_parse_range(const char *text, int *base, int *limit);

#endif
