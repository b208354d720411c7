/* rdzv group delete|resize: drop a group, or change its world at a new
 * epoch. */
#include "cli.h"

#include "rdzv_proto.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#define S_CMD "group"

static const char s_usage[] =
    "Usage: rdzv group delete [--server EP[,EP...]] --group G [--timeout SEC]\n"
    "       rdzv group resize [--server EP[,EP...]] --group G --world N [--fresh]\n"
    "                         [--timeout SEC]\n"
    "\n"
    "delete: drops group G, its epochs, KV and port plans. Ranks still waiting\n"
    "in a join or kv wait of G are answered not_found.\n"
    "resize: G, formed, moves to its next epoch with N ranks and forms it\n"
    "again. Ranks below both worlds keep their port plans and join the new\n"
    "epoch (their heartbeats answer stale_epoch); new ranks join with world N;\n"
    "ranks N and above leave (their heartbeats answer not_found). Prints the\n"
    "new epoch; a resize to G's own world changes nothing and prints its epoch.\n"
    "G forming, with exactly its ranks 0..N-1 joined: it closes at them (its\n"
    "epoch is released to them, of N ranks); other resizes of a forming group\n"
    "are refused.\n"
    CLI_HELP_VARIABLES
    "\n"
    CLI_HELP_SERVER
    "  --group G                the group (RDZV_GROUP; required)\n"
    "  --world N                resize: the new number of ranks (required)\n"
    "  --fresh                  resize: a new round, where no rank keeps its\n"
    "                           place or plan (every member's heartbeat answers\n"
    "                           not_found; all join anew; default: off)\n"
    "  --timeout SEC            give up after SEC seconds (default 10)\n"
    CLI_HELP_SECURITY
    "  -h, --help               this help\n"
    "\n"
    "Exit: 0 ok, 2 usage, 3 timeout, 4 refused by the server, 1 other errors.\n";

enum { S_SERVER = 256, S_GROUP, S_WORLD, S_TIMEOUT, S_FRESH };

static const struct option s_options[] = {
    { "server", required_argument, NULL, S_SERVER },
    { "group", required_argument, NULL, S_GROUP },
    { "world", required_argument, NULL, S_WORLD },
    { "timeout", required_argument, NULL, S_TIMEOUT },
    { "fresh", no_argument, NULL, S_FRESH },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

static int s_run(const char *server, const char *group, int world, bool fresh, int timeout_ms)
{
    int rc = CLI_EXIT_OK;
    rdzv_client_t *client = cli_connect(S_CMD, server, timeout_ms, &rc);
    if (!client)
        return rc;
    if (world > 0) {
        int64_t epoch = 0;
        rc = cli_result(S_CMD, client, (fresh ? rdzv_group_resize_fresh : rdzv_group_resize)(
                                           client, group, world, &epoch));
        if (rc == CLI_EXIT_OK)
            printf("group %s: world %d, epoch %" PRId64 "\n", group, world, epoch);
    } else
        rc = cli_result(S_CMD, client, rdzv_group_delete(client, group));
    rdzv_client_destroy(&client);
    return rc;
}

int cli_group_main(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(s_usage, stdout);
        return CLI_EXIT_OK;
    }
    if (argc < 2)
        return cli_usage_error(S_CMD, "missing the subcommand: delete or resize");
    bool resize = strcmp(argv[1], "resize") == 0;
    if (!resize && strcmp(argv[1], "delete") != 0)
        return cli_usage_error(S_CMD, "unknown subcommand '%s' (expected delete or resize)",
                               argv[1]);
    const char *server = NULL, *group = NULL, *timeout = NULL, *world_text = NULL;
    bool fresh = false;
    int c;
    while ((c = cli_getopt(S_CMD, argc - 1, argv + 1, ":h", s_options)) != -1) {
        if (c == CLI_OPT_BAD)
            return CLI_EXIT_USAGE;
        if (c == 'h') {
            fputs(s_usage, stdout);
            return CLI_EXIT_OK;
        }
        if (c == S_FRESH) {
            fresh = true;
            continue;
        }
        *(c == S_SERVER ? &server : c == S_GROUP ? &group : c == S_WORLD ? &world_text
                                                                         : &timeout) = optarg;
    }
    if (optind < argc - 1)
        return cli_usage_error(S_CMD, "unexpected argument '%s'", argv[optind + 1]);
    int timeout_ms = 0;
    if (timeout && cli_parse_seconds(S_CMD, "--timeout", timeout, &timeout_ms) != 0)
        return CLI_EXIT_USAGE;
    group = cli_value(group, "RDZV_GROUP", NULL);
    if (!group)
        return cli_usage_error(S_CMD, "--group (or RDZV_GROUP) is required");
    long world = 0;
    if (resize && !world_text)
        return cli_usage_error(S_CMD, "resize needs --world N");
    if (!resize && (world_text || fresh))
        return cli_usage_error(S_CMD, "--world and --fresh are for resize, not delete");
    if (resize && cli_parse_long(S_CMD, "--world", world_text, 1, INT_MAX, &world) != 0)
        return CLI_EXIT_USAGE;
    return s_run(cli_value(server, "RDZV_SERVER", RDZV_DEFAULT_ENDPOINT), group, (int) world,
                 fresh, timeout_ms);
}
