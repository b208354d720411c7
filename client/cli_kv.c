/* rdzv kv put|get|wait: the group's key-value store, scoped to an epoch. */
#include "cli.h"

#include "rdzv_proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_CMD "kv"
#define S_EPOCH_MAX 0x7fffffffffffL     /* well inside a JSON number's exact range */

static const char s_usage[] =
    "Usage: rdzv kv put  [options] KEY VALUE\n"
    "       rdzv kv get  [options] KEY\n"
    "       rdzv kv wait [options] KEY\n"
    "\n"
    "Keys are scoped to a group and epoch; a value is UTF-8 text of up to\n"
    "64 KiB. get prints the value (not_found if it is missing); wait blocks\n"
    "until it is put, then prints it.\n"
    CLI_HELP_VARIABLES
    "\n"
    CLI_HELP_SERVER
    "  --group G                the group (RDZV_GROUP; required)\n"
    "  --epoch E                the epoch (RDZV_EPOCH, which 'rdzv join -- CMD'\n"
    "                           and the agent set; required)\n"
    "  --timeout SEC            wait: how long to wait (default 60); put, get:\n"
    "                           give up after SEC seconds (default 10)\n"
    CLI_HELP_SECURITY
    "  -h, --help               this help\n"
    "\n"
    "Exit: 0 ok, 2 usage, 3 timeout, 4 refused by the server (not_found: no\n"
    "such key), 1 other errors.\n";

typedef enum { S_PUT, S_GET, S_WAIT } s_verb_t;

typedef struct {
    s_verb_t verb;
    const char *server, *group, *epoch, *timeout;
    const char *key, *value;
} s_flags_t;

enum { S_SERVER = 256, S_GROUP, S_EPOCH, S_TIMEOUT };

static const struct option s_options[] = {
    { "server", required_argument, NULL, S_SERVER },
    { "group", required_argument, NULL, S_GROUP },
    { "epoch", required_argument, NULL, S_EPOCH },
    { "timeout", required_argument, NULL, S_TIMEOUT },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

static int s_verb(const char *word, s_verb_t *out)
{
    static const char *const names[] = { "put", "get", "wait" };
    for (int i = 0; word && i < 3; i++) {
        if (strcmp(word, names[i]) == 0) {
            *out = (s_verb_t) i;
            return 0;
        }
    }
    if (!word)
        return cli_usage_error(S_CMD, "missing the subcommand: put, get or wait");
    return cli_usage_error(S_CMD, "unknown subcommand '%s' (expected put, get or wait)", word);
}

/* argv[0] is the verb; options and positionals may be mixed. Returns 0,
 * CLI_EXIT_USAGE, or -1 after printing the help. */
static int s_parse(int argc, char **argv, s_flags_t *f)
{
    int c;
    while ((c = cli_getopt(S_CMD, argc, argv, ":h", s_options)) != -1) {
        if (c == CLI_OPT_BAD)
            return CLI_EXIT_USAGE;
        if (c == 'h')
            return -1;
        *(c == S_SERVER ? &f->server : c == S_GROUP ? &f->group
          : c == S_EPOCH ? &f->epoch : &f->timeout) = optarg;
    }
    int want = f->verb == S_PUT ? 2 : 1;
    if (argc - optind != want)
        return cli_usage_error(S_CMD, "%s takes %s", argv[0],
                               want == 2 ? "KEY VALUE" : "one KEY");
    f->key = argv[optind];
    f->value = want == 2 ? argv[optind + 1] : NULL;
    f->server = cli_value(f->server, "RDZV_SERVER", RDZV_DEFAULT_ENDPOINT);
    f->group = cli_value(f->group, "RDZV_GROUP", NULL);
    f->epoch = cli_value(f->epoch, "RDZV_EPOCH", NULL);
    if (!f->group)
        return cli_usage_error(S_CMD, "--group (or RDZV_GROUP) is required");
    if (!f->epoch)
        return cli_usage_error(S_CMD, "--epoch (or RDZV_EPOCH) is required");
    return 0;
}

static int s_run(rdzv_client_t *client, const s_flags_t *f, long epoch, int timeout_ms)
{
    char *value = NULL;
    int rc;
    if (f->verb == S_PUT)
        rc = rdzv_kv_put(client, f->group, epoch, f->key, f->value);
    else if (f->verb == S_GET)
        rc = rdzv_kv_get(client, f->group, epoch, f->key, &value);
    else
        rc = rdzv_kv_wait(client, f->group, epoch, f->key, timeout_ms, &value);
    rc = cli_result(S_CMD, client, rc);
    if (rc == CLI_EXIT_OK && value)
        printf("%s\n", value);
    free(value);
    return rc;
}

int cli_kv_main(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(s_usage, stdout);
        return CLI_EXIT_OK;
    }
    s_flags_t f = { 0 };
    if (s_verb(argc >= 2 ? argv[1] : NULL, &f.verb) != 0)
        return CLI_EXIT_USAGE;
    int rc = s_parse(argc - 1, argv + 1, &f);
    if (rc < 0)
        fputs(s_usage, stdout);
    if (rc != 0)
        return rc < 0 ? CLI_EXIT_OK : rc;
    long epoch = 0;
    int timeout_ms = 0;
    if (cli_parse_long(S_CMD, "--epoch (or RDZV_EPOCH)", f.epoch, 1, S_EPOCH_MAX, &epoch)
        || (f.timeout && cli_parse_seconds(S_CMD, "--timeout", f.timeout, &timeout_ms)))
        return CLI_EXIT_USAGE;
    /* kv wait's --timeout is the wait itself, not the request deadline. */
    rdzv_client_t *client = cli_connect(S_CMD, f.server, f.verb == S_WAIT ? 0 : timeout_ms, &rc);
    if (!client)
        return rc;
    rc = s_run(client, &f, epoch, timeout_ms);
    rdzv_client_destroy(&client);
    return rc;
}
