#include "shim_rules.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

bool rdzv_shim_is_candidate(const rdzv_shim_bind_t *b)
{
    return (b->domain == AF_INET || b->domain == AF_INET6)
        && b->addr_family == b->domain
        && b->type == SOCK_STREAM
        && b->protocol == IPPROTO_TCP
        && !b->already_bound;
}

rdzv_shim_action_t rdzv_shim_classify(const rdzv_shim_bind_t *b, int base, int limit)
{
    if (!rdzv_shim_is_candidate(b))
        return RDZV_SHIM_PASS;
    bool reuse = b->reuseaddr || b->reuseport;
    /* vLLM's port-0 probe binds the wildcard ("", 0). A port-0 bind to one
     * interface's address is a listener letting the kernel choose (NCCL's
     * bootstrap and proxy sockets, Gloo): race-free, and it must not take a
     * plan port that a later listener of the engine will ask for. */
    if (b->port == 0)
        return reuse || !b->wildcard ? RDZV_SHIM_PASS : RDZV_SHIM_PROBE0;
    if (b->port < base || b->port >= limit)
        return RDZV_SHIM_PASS;
    return reuse ? RDZV_SHIM_LISTENER : RDZV_SHIM_PROBE;
}

int rdzv_shim_parse_range(const char *text, int *base, int *limit)
{
    if (!text)
        return -1;
    char *end = NULL;
    long b = strtol(text, &end, 10);
    if (end == text || *end != '-')
        return -1;
    const char *rest = end + 1;
    long l = strtol(rest, &end, 10);
    if (end == rest || *end != '\0' || b < 1 || l > 65536 || b >= l)
        return -1;
    *base = (int) b;
    *limit = (int) l;
    return 0;
}
