/* rdzv group delete: drop a group, its epochs, KV and port plans. */
#include "cli.h"

#include "rdzv_proto.h"

#include <stdio.h>
#include <string.h>

#define S_CMD "group"

static const char s_usage[] =
    "Usage: rdzv group delete [--server EP[,EP...]] --group G [--timeout SEC]\n"
    "\n"
    "Deletes group G: its epochs, KV and port plans. Ranks still waiting in\n"
    "a join or kv wait of G are answered not_found.\n"
    "\n"
    "  --server EP[,EP...]\n"
    "                 rdzvd endpoint; a list: replicas of an active/standby\n"
    "                 rdzvd, tried in turn (RDZV_SERVER, default\n"
    "                 " RDZV_DEFAULT_ENDPOINT ")\n"
    "  --group G      the group (RDZV_GROUP)\n"
    "  --timeout SEC  give up after SEC seconds (default 10)\n"
    "  -h, --help     this help\n";

enum { S_SERVER = 256, S_GROUP, S_TIMEOUT };

static const struct option s_options[] = {
    { "server", required_argument, NULL, S_SERVER },
    { "group", required_argument, NULL, S_GROUP },
    { "timeout", required_argument, NULL, S_TIMEOUT },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

static int s_delete(const char *server, const char *group, int timeout_ms)
{
    int rc = CLI_EXIT_OK;
    rdzv_client_t *client = cli_connect(S_CMD, server, timeout_ms, &rc);
    if (!client)
        return rc;
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
        return cli_usage_error(S_CMD, "missing the subcommand: delete");
    if (strcmp(argv[1], "delete") != 0)
        return cli_usage_error(S_CMD, "unknown subcommand '%s' (expected delete)", argv[1]);
    const char *server = NULL, *group = NULL, *timeout = NULL;
    int c;
    while ((c = cli_getopt(S_CMD, argc - 1, argv + 1, ":h", s_options)) != -1) {
        if (c == CLI_OPT_BAD)
            return CLI_EXIT_USAGE;
        if (c == 'h') {
            fputs(s_usage, stdout);
            return CLI_EXIT_OK;
        }
        *(c == S_SERVER ? &server : c == S_GROUP ? &group : &timeout) = optarg;
    }
    if (optind < argc - 1)
        return cli_usage_error(S_CMD, "unexpected argument '%s'", argv[optind + 1]);
    int timeout_ms = 0;
    if (timeout && cli_parse_seconds(S_CMD, "--timeout", timeout, &timeout_ms) != 0)
        return CLI_EXIT_USAGE;
    group = cli_value(group, "RDZV_GROUP", NULL);
    if (!group)
        return cli_usage_error(S_CMD, "--group (or RDZV_GROUP) is required");
    return s_delete(cli_value(server, "RDZV_SERVER", RDZV_DEFAULT_ENDPOINT), group,
                    timeout_ms);
}
