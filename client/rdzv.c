/* rdzv: command-line client of rdzvd. Dispatches to one function per
 * command; each lives in its own cli_<command>.c. */
#include "cli.h"

#ifdef RDZV_HAVE_AGENT
#include "agent/agent.h"
#endif

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *summary;
} s_command_t;

static int s_agent_main(int argc, char **argv)
{
#ifdef RDZV_HAVE_AGENT
    return rdzv_agent_main(argc, argv);
#else
    fprintf(stderr, "rdzv agent: not built into this rdzv (client/agent is missing)\n");
    return CLI_EXIT_USAGE;
#endif
}

static const s_command_t s_commands[] = {
    { "join", cli_join_main, "join a group; print the assignment or run a command with it" },
    { "status", cli_status_main, "show the groups rdzvd knows" },
    { "kv", cli_kv_main, "put, get or wait for a key of a group's epoch" },
    { "group", cli_group_main, "delete a group, or resize it" },
    { "nccl-id", cli_nccl_main, "decode an NCCL unique ID: where its root listens" },
    { "keygen", cli_keygen_main, "write a CURVE key pair (PATH, PATH_secret)" },
    { "agent", s_agent_main, "run the per-node port agent" },
};

#define S_COMMAND_COUNT (sizeof s_commands / sizeof s_commands[0])

static void s_usage(FILE *out)
{
    fprintf(out, "Usage: rdzv COMMAND [options]\n\nCommands:\n");
    for (size_t i = 0; i < S_COMMAND_COUNT; i++)
        fprintf(out, "  %-8s %s\n", s_commands[i].name, s_commands[i].summary);
    fprintf(out, "\n'rdzv COMMAND --help' describes a command. Options also come from\n"
                 "RDZV_SERVER, RDZV_GROUP, RDZV_WORLD, RDZV_RANK, RDZV_HOST, RDZV_NODE;\n"
                 "a flag wins over its variable.\n\n"
                 "Every command also takes, to talk to a secured rdzvd:\n"
                 "  --curve-server-public FILE  rdzvd's public certificate (RDZV_CURVE_SERVER_PUBLIC)\n"
                 "  --curve-secret FILE         this client's secret certificate (RDZV_CURVE_SECRET)\n"
                 "  --group-token FILE          the group token (RDZV_GROUP_TOKEN)\n"
                 "Exit: 0 ok, 1 error, 2 usage, 3 timeout, 4 refused by the server.\n");
}

int main(int argc, char **argv)
{
    if (cli_take_security_options(&argc, argv) < 0)
        return CLI_EXIT_USAGE;
    if (argc < 2) {
        s_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        s_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
        printf("rdzv %s\n", RDZV_VERSION_STRING);
        return CLI_EXIT_OK;
    }
    for (size_t i = 0; i < S_COMMAND_COUNT; i++)
        if (strcmp(name, s_commands[i].name) == 0)
            return s_commands[i].main(argc - 1, argv + 1);
    fprintf(stderr, "rdzv: unknown command '%s'\nTry 'rdzv --help'.\n", name);
    return CLI_EXIT_USAGE;
}
