/* A group of TCP listening sockets sharing one address and port through
 * SO_REUSEPORT, one per server shard. The kernel spreads incoming connections
 * over them, so a burst of connects fills several accept queues (each capped
 * by net.core.somaxconn) instead of one, and each shard's ROUTER socket takes
 * its share through ZMQ_USE_FD. */
#ifndef RDZV_LISTEN_H
#define RDZV_LISTEN_H

#include <stddef.h>

#define RDZV_LISTEN_BACKLOG 4096

/* Whether rdzvd can open the group itself: tcp://HOST:PORT with HOST "*",
 * "localhost", an IPv4 address or a bracketed IPv6 address, and PORT a number,
 * 0 or "*" (the kernel picks). Interface names and czmq's port ranges are left
 * to libzmq with one shard. */
int rdzv_listen_shardable(const char *endpoint);

/* Opens count listeners on endpoint into fds (non-blocking, close-on-exec,
 * listening). Fails with EADDRINUSE when anything holds the port already,
 * even another SO_REUSEPORT group of this user, so a second rdzvd on the same
 * port does not silently split the clients. (A program of the same uid that
 * sets SO_REUSEPORT itself can still join the group, by the kernel's rule:
 * run rdzvd under its own uid or in its own Pod.) Returns 0, or -1 with err
 * set. */
int rdzv_listen_group(const char *endpoint, int count, int *fds, char *err, size_t errlen);

#endif
