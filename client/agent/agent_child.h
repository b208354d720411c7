/* Running `-- CMD` under the agent: its environment and its process. */
#ifndef RDZV_AGENT_CHILD_H
#define RDZV_AGENT_CHILD_H

#include <sys/types.h>

typedef struct {
    const char *assignment_env;   /* "KEY=VALUE\n" lines from rdzv_assignment_env */
    const char *shim_path;        /* prepended to LD_PRELOAD */
    const char *socket_path;      /* RDZV_AGENT_SOCKET */
    int range_base;               /* RDZV_PORT_RANGE */
    int range_limit;
} rdzv_agent_child_env_t;

/* The agent's environment with the assignment's variables, LD_PRELOAD,
 * RDZV_AGENT_SOCKET and RDZV_PORT_RANGE set; a NULL-terminated malloc'd
 * array of malloc'd strings, or NULL without memory. */
char **rdzv_agent_child_environ(const rdzv_agent_child_env_t *spec);
void rdzv_agent_child_environ_free(char ***env_p);

/* The status of a child whose agent died before it could exec. */
#define RDZV_AGENT_CHILD_ORPHANED 125

/* Forks and execs cmd with env and an empty signal mask; returns the pid or
 * -1. A failed exec exits the child with 127 (126: not runnable). The child
 * gets SIGTERM when the agent dies, however it dies. */
pid_t rdzv_agent_child_spawn(char **cmd, char **env);

#endif
