/* `rdzv agent`: the sidecar of one rank (docs/agent.md). */
#ifndef RDZV_AGENT_H
#define RDZV_AGENT_H

/* Entry point of `rdzv agent ...`; argv[0] is "agent". Returns the exit
 * status: CMD's status with `-- CMD`, 0 after SIGTERM without it, 2 on a
 * usage error, 3 when the first join timed out, 4 when rdzvd refused it or
 * no longer knows the rank (heartbeat not_found, another plan on a rejoin),
 * 5 when the group moved to a new epoch under CMD and CMD was stopped
 * (neither --elastic nor --restart), 1 on any other failure. */
int rdzv_agent_main(int argc, char **argv);

#endif
