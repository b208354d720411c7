/* rdzv status: what rdzvd knows about one group or all of them. */
#include "cli.h"

#include "rdzv_proto.h"

#include <stdio.h>
#include <stdlib.h>

#define S_CMD "status"

static const char s_usage[] =
    "Usage: rdzv status [--server EP] [--group G] [--timeout SEC]\n"
    "\n"
    "Prints {\"groups\":[...]} as one JSON line: world, epoch, joined ranks,\n"
    "members with their port plans.\n"
    "\n"
    "  --server EP    rdzvd endpoint (RDZV_SERVER, default " RDZV_DEFAULT_ENDPOINT ")\n"
    "  --group G      only this group (RDZV_GROUP); not_found if it does not exist\n"
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

static int s_run(const char *server, const char *group, int timeout_ms)
{
    int rc = CLI_EXIT_OK;
    rdzv_client_t *client = cli_connect(S_CMD, server, timeout_ms, &rc);
    if (!client)
        return rc;
    char *json = NULL;
    rc = cli_result(S_CMD, client, rdzv_status(client, group, &json));
    if (rc == CLI_EXIT_OK)
        printf("{\"groups\":%s}\n", json);
    free(json);
    rdzv_client_destroy(&client);
    return rc;
}

int cli_status_main(int argc, char **argv)
{
    const char *server = NULL, *group = NULL, *timeout = NULL;
    int c;
    while ((c = cli_getopt(S_CMD, argc, argv, ":h", s_options)) != -1) {
        if (c == CLI_OPT_BAD)
            return CLI_EXIT_USAGE;
        if (c == 'h') {
            fputs(s_usage, stdout);
            return CLI_EXIT_OK;
        }
        *(c == S_SERVER ? &server : c == S_GROUP ? &group : &timeout) = optarg;
    }
    if (optind < argc)
        return cli_usage_error(S_CMD, "unexpected argument '%s'", argv[optind]);
    int timeout_ms = 0;
    if (timeout && cli_parse_seconds(S_CMD, "--timeout", timeout, &timeout_ms) != 0)
        return CLI_EXIT_USAGE;
    return s_run(cli_value(server, "RDZV_SERVER", RDZV_DEFAULT_ENDPOINT),
                 cli_value(group, "RDZV_GROUP", NULL), timeout_ms);
}
