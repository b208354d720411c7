/* Who owns a bound unix socket, asked of the kernel's socket diagnostics
 * (NETLINK_SOCK_DIAG), which answer any user about the sockets of its
 * network namespace without a connection: a holder that does not listen,
 * or whose queue is full, is named as well as one that answers. */
#ifndef RDZV_AGENT_UNIXDIAG_H
#define RDZV_AGENT_UNIXDIAG_H

#include <stddef.h>
#include <sys/types.h>

/* The uid that owns the socket bound (listening or not) to the unix name
 * name[0..len) in this network namespace; an abstract name starts with
 * '\0'. Returns 0 with *uid set, -ENOENT if no socket holds the name, or
 * another negative errno value (the kernel lacks unix diagnostics or the
 * owner's uid, which came in Linux 5.3). */
int rdzv_unixdiag_owner(const char *name, size_t len, uid_t *uid);

#endif
