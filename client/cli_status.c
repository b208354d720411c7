/* rdzv status: what rdzvd knows about one group or all of them. */
#include "cli.h"

#include "rdzv_proto.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_CMD "status"

static const char s_usage[] =
    "Usage: rdzv status [--server EP[,EP...]] [--group G] [--timeout SEC] [--json]\n"
    "\n"
    "Prints a table of the groups: world, ranks joined, the ranks still\n"
    "missing, epoch, state and age. --json prints {\"groups\":[...]} as one\n"
    "JSON line instead: also the members with their port plans.\n"
    "\n"
    "  --server EP[,EP...]\n"
    "                 rdzvd endpoint; a list: replicas of an active/standby\n"
    "                 rdzvd, tried in turn (RDZV_SERVER, default\n"
    "                 " RDZV_DEFAULT_ENDPOINT ")\n"
    "  --group G      only this group (RDZV_GROUP); not_found if it does not exist\n"
    "  --timeout SEC  give up after SEC seconds (default 10)\n"
    "  --json         the JSON document rather than the table\n"
    "  -h, --help     this help\n";

enum { S_SERVER = 256, S_GROUP, S_TIMEOUT, S_JSON };

static const struct option s_options[] = {
    { "server", required_argument, NULL, S_SERVER },
    { "group", required_argument, NULL, S_GROUP },
    { "timeout", required_argument, NULL, S_TIMEOUT },
    { "json", no_argument, NULL, S_JSON },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

/* "2, 5, 7 +3": the first missing ranks, then how many more. */
static void s_missing(const cJSON *g, char *out, size_t len)
{
    const cJSON *count = cJSON_GetObjectItemCaseSensitive(g, "missing_count");
    const cJSON *missing = cJSON_GetObjectItemCaseSensitive(g, "missing");
    int total = cJSON_IsNumber(count) ? count->valueint : 0, shown = 0;
    snprintf(out, len, "%s", total ? "" : "-");
    for (const cJSON *r = cJSON_IsArray(missing) ? missing->child : NULL; r && shown < 8;
         r = r->next, shown++) {
        size_t used = strlen(out);
        snprintf(out + used, len - used, "%s%d", shown ? "," : "", r->valueint);
    }
    if (total > shown) {
        size_t used = strlen(out);
        snprintf(out + used, len - used, " +%d", total - shown);
    }
}

static const char *s_state(const cJSON *g)
{
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "complete")))
        return "forming";
    const cJSON *root = cJSON_GetObjectItemCaseSensitive(g, "nccl_root");
    if (cJSON_IsString(root) && strcmp(root->valuestring, "retired") == 0)
        return "complete (nccl root retired)";
    if (cJSON_IsString(root) && strcmp(root->valuestring, "lost") == 0)
        return "complete (nccl root lost)";
    return "complete";
}

static int s_num(const cJSON *g, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(g, key);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

static void s_table(const char *json)
{
    cJSON *groups = cJSON_Parse(json);
    printf("%-20s %7s %7s %6s %-8s %-30s %s\n", "GROUP", "WORLD", "JOINED", "EPOCH", "AGE",
           "STATE", "MISSING");
    for (const cJSON *g = cJSON_IsArray(groups) ? groups->child : NULL; g; g = g->next) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(g, "group");
        const cJSON *joined = cJSON_GetObjectItemCaseSensitive(g, "joined");
        char age[24] = "-", missing[128];
        int age_s = s_num(g, "age_s");
        if (age_s >= 3600)
            snprintf(age, sizeof age, "%dh%02dm", age_s / 3600, (age_s % 3600) / 60);
        else if (age_s >= 0)
            snprintf(age, sizeof age, "%ds", age_s);
        s_missing(g, missing, sizeof missing);
        printf("%-20s %7d %7d %6d %-8s %-30s %s\n",
               cJSON_IsString(name) ? name->valuestring : "?", s_num(g, "world"),
               cJSON_GetArraySize(joined), s_num(g, "epoch"), age, s_state(g), missing);
    }
    cJSON_Delete(groups);
}

static int s_run(const char *server, const char *group, int timeout_ms, bool json_out)
{
    int rc = CLI_EXIT_OK;
    rdzv_client_t *client = cli_connect(S_CMD, server, timeout_ms, &rc);
    if (!client)
        return rc;
    char *json = NULL;
    rc = cli_result(S_CMD, client, rdzv_status(client, group, &json));
    if (rc == CLI_EXIT_OK && json_out)
        printf("{\"groups\":%s}\n", json);
    else if (rc == CLI_EXIT_OK)
        s_table(json);
    free(json);
    rdzv_client_destroy(&client);
    return rc;
}

int cli_status_main(int argc, char **argv)
{
    const char *server = NULL, *group = NULL, *timeout = NULL;
    bool json_out = false;
    int c;
    while ((c = cli_getopt(S_CMD, argc, argv, ":h", s_options)) != -1) {
        if (c == CLI_OPT_BAD)
            return CLI_EXIT_USAGE;
        if (c == 'h') {
            fputs(s_usage, stdout);
            return CLI_EXIT_OK;
        }
        if (c == S_JSON)
            json_out = true;
        else
            *(c == S_SERVER ? &server : c == S_GROUP ? &group : &timeout) = optarg;
    }
    if (optind < argc)
        return cli_usage_error(S_CMD, "unexpected argument '%s'", argv[optind]);
    int timeout_ms = 0;
    if (timeout && cli_parse_seconds(S_CMD, "--timeout", timeout, &timeout_ms) != 0)
        return CLI_EXIT_USAGE;
    return s_run(cli_value(server, "RDZV_SERVER", RDZV_DEFAULT_ENDPOINT),
                 cli_value(group, "RDZV_GROUP", NULL), timeout_ms, json_out);
}
