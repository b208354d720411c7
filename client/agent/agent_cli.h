/* What the agent takes from the rdzv command line it is built into: CMD
 * gets the environment `rdzv join` would give it, and a first join that
 * waits says what it waits for as `rdzv join` does. agent_cli.c hands these
 * on to the CLI, and is the only agent file that includes cli.h: the CLI
 * depends on the agent (it dispatches `rdzv agent`), the agent's own files
 * only on this header. */
#ifndef RDZV_AGENT_CLI_H
#define RDZV_AGENT_CLI_H

#include "rdzv.h"

/* The CLI's progress lines (cli_progress.c), opaque to the agent. */
typedef struct cli_progress rdzv_agent_progress_t;

/* The assignment's KEY=VALUE lines plus RDZV_SERVER=server. malloc'd; NULL
 * out of memory. */
char *rdzv_agent_cli_env(const rdzv_assignment_t *asg, const char *server);
/* A line on stderr every 5 s, until stopped, saying what the first join
 * of group waits for; timeout_ms is the join's. NULL if it cannot start,
 * which only costs the lines. */
rdzv_agent_progress_t *rdzv_agent_cli_progress_start(const char *server, const char *group,
                                                     int timeout_ms);
/* Stops the lines and NULLs *progress; nothing if it is NULL. */
void rdzv_agent_cli_progress_stop(rdzv_agent_progress_t **progress);

#endif
