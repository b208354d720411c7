/* Who holds a TCP port in this network namespace, from /proc/net/tcp and
 * tcp6: the agent tells a port that only waits out TIME_WAIT (a socket
 * closed before rdzv ran) from one a live socket holds, and names that
 * socket's process where it can see it. A socket bound but neither
 * listening nor connected appears in neither file. */
#ifndef RDZV_AGENT_PORTSTATE_H
#define RDZV_AGENT_PORTSTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct {
    int live;                    /* sockets on the port in any state but TIME_WAIT */
    int listening;               /* of which listening */
    int time_wait;
    const char *state;           /* a live one's state ("LISTEN", "ESTABLISHED"...) */
    unsigned long inode;         /* its inode (0: none live) */
    pid_t pid;                   /* the process holding it, 0 if not visible */
    char comm[64];               /* that process's command name */
    char agent_socket[108];      /* that process's RDZV_AGENT_SOCKET, "" if none seen */
} rdzv_port_holders_t;

/* Fills out for port (a listener preferred as the one named). 0, or -1 if
 * /proc/net/tcp cannot be read. */
int rdzv_port_holders(int port, rdzv_port_holders_t *out);
/* The same for n ports at once, out[i] for ports[i], reading each file
 * once (a plan's 32 ports cost one pass, not 32). 0 or -1. */
int rdzv_port_holders_many(const int *ports, size_t n, rdzv_port_holders_t *out);
/* Names the live socket st found on port: "a LISTEN socket of pid 123
 * (python3)", or how to find a holder this uid cannot see. */
void rdzv_port_holders_name(const rdzv_port_holders_t *st, int port, char *buf, size_t len);

/* Parses one line of /proc/net/tcp{,6}: the local port, state and inode.
 * false for the header or a line not understood. */
bool rdzv_port_holders_parse_line(const char *line, int *port, int *state, unsigned long *inode);

#endif
