#include "agent_cli.h"
#include "cli.h"   /* the agent's one door into the CLI: see agent_cli.h */

char *rdzv_agent_cli_env(const rdzv_assignment_t *asg, const char *server)
{
    return cli_assignment_env(asg, server);
}

rdzv_agent_progress_t *rdzv_agent_cli_progress_start(const char *server, const char *group,
                                                     int timeout_ms)
{
    return cli_progress_start("agent", server, group, timeout_ms);
}

void rdzv_agent_cli_progress_stop(rdzv_agent_progress_t **progress)
{
    cli_progress_stop(progress);
}
