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
    "Prints a table of the groups: world, ranks joined, ranks serving, the\n"
    "ranks still missing, epoch, state (forming, complete, serving, or\n"
    "degraded with the ranks that are dead or do not serve) and age; with\n"
    "--group, then the group's router (and its last error) and one line per\n"
    "rank: node, API endpoint, alive, serving, registered at the router ('-'\n"
    "without one) and when rdzvd last heard from it. --json prints\n"
    "{\"groups\":[...]} as one JSON line instead: also the members with their\n"
    "port plans.\n"
    CLI_HELP_VARIABLES
    "\n"
    CLI_HELP_SERVER
    "  --group G                only this group (RDZV_GROUP; default: every\n"
    "                           group); not_found if it does not exist\n"
    "  --timeout SEC            give up after SEC seconds (default 10)\n"
    "  --json                   the JSON document rather than the table\n"
    CLI_HELP_SECURITY
    "  -h, --help               this help\n"
    "\n"
    "Exit: 0 ok, 2 usage, 3 timeout, 4 refused by the server, 1 other errors.\n";

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

/* rdzvd's state of the group ("complete" from one too old to say more),
 * the ranks a degraded group has lost, and what became of its NCCL root. */
static void s_state(const cJSON *g, char *out, size_t len)
{
    const cJSON *state = cJSON_GetObjectItemCaseSensitive(g, "state");
    const char *name = cJSON_IsString(state) ? state->valuestring
                       : cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "complete"))
                       ? "complete" : "forming";
    snprintf(out, len, "%s", name);
    const cJSON *down = cJSON_GetObjectItemCaseSensitive(g, "not_serving");
    if (strcmp(name, "degraded") == 0 && cJSON_IsArray(down)) {
        int shown = 0;
        for (const cJSON *r = down->child; r && shown < 8; r = r->next, shown++) {
            size_t used = strlen(out);
            snprintf(out + used, len - used, "%s%d", shown ? "," : ": ", r->valueint);
        }
    }
    const cJSON *root = cJSON_GetObjectItemCaseSensitive(g, "nccl_root");
    if (cJSON_IsString(root) && (strcmp(root->valuestring, "retired") == 0
                                 || strcmp(root->valuestring, "lost") == 0)) {
        size_t used = strlen(out);
        snprintf(out + used, len - used, " (nccl root %s)", root->valuestring);
    }
}

static int s_num(const cJSON *g, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(g, key);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

static const char *s_flag(const cJSON *m, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, key);
    return cJSON_IsTrue(v) ? "yes" : cJSON_IsFalse(v) ? "no" : "-";
}

/* One line per rank of the group: where its engine serves (its host and
 * the api port of its plan) and what rdzvd last heard of it. */
static void s_ranks(const cJSON *g)
{
    const cJSON *router = cJSON_GetObjectItemCaseSensitive(g, "router");
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(g, "router_error");
    if (cJSON_IsString(router))
        printf("\nrouter: %s (%d registered)%s%s\n", router->valuestring,
               s_num(g, "registered_count"), cJSON_IsString(error) ? "; last error: " : "",
               cJSON_IsString(error) ? error->valuestring : "");
    printf("\n%6s %-24s %-28s %-6s %-8s %-10s %s\n", "RANK", "NODE", "ENDPOINT", "ALIVE",
           "SERVING", "REGISTERED", "LAST SEEN");
    const cJSON *members = cJSON_GetObjectItemCaseSensitive(g, "members");
    for (const cJSON *m = cJSON_IsArray(members) ? members->child : NULL; m; m = m->next) {
        const cJSON *host = cJSON_GetObjectItemCaseSensitive(m, "host");
        const cJSON *node = cJSON_GetObjectItemCaseSensitive(m, "node");
        const cJSON *ports = cJSON_GetObjectItemCaseSensitive(m, "ports");
        char endpoint[96] = "-", seen[24] = "-";
        if (cJSON_IsString(host) && cJSON_IsArray(ports) && cJSON_IsNumber(ports->child))
            snprintf(endpoint, sizeof endpoint, strchr(host->valuestring, ':') ? "[%s]:%d"
                     : "%s:%d", host->valuestring, ports->child->valueint + RDZV_ROLE_API);
        if (s_num(m, "last_seen_s") >= 0)
            snprintf(seen, sizeof seen, "%ds ago", s_num(m, "last_seen_s"));
        printf("%6d %-24s %-28s %-6s %-8s %-10s %s\n", s_num(m, "rank"),
               cJSON_IsString(node) ? node->valuestring : "?", endpoint, s_flag(m, "alive"),
               s_flag(m, "serving"),
               !cJSON_IsString(router) ? "-"
               : cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "draining")) ? "draining"
               : s_flag(m, "registered"),
               seen);
    }
    /* Ranks a shrink dropped that the router may still send requests to. */
    const cJSON *leaving = cJSON_GetObjectItemCaseSensitive(g, "leaving");
    for (const cJSON *l = cJSON_IsArray(leaving) ? leaving->child : NULL; l; l = l->next) {
        const cJSON *host = cJSON_GetObjectItemCaseSensitive(l, "host");
        char endpoint[96] = "-";
        if (cJSON_IsString(host))
            snprintf(endpoint, sizeof endpoint, strchr(host->valuestring, ':') ? "[%s]:%d"
                     : "%s:%d", host->valuestring, s_num(l, "api_port"));
        printf("%6d %-24s %-28s %-6s %-8s %-10s %s\n", s_num(l, "rank"), "(leaving)", endpoint,
               s_flag(l, "alive"), "-", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
                   l, "registered")) ? "draining" : "no", "-");
    }
}

static void s_table(const char *json, bool per_rank)
{
    cJSON *groups = cJSON_Parse(json);
    printf("%-20s %7s %7s %7s %6s %-8s %-30s %s\n", "GROUP", "WORLD", "JOINED", "SERVING",
           "EPOCH", "AGE", "STATE", "MISSING");
    for (const cJSON *g = cJSON_IsArray(groups) ? groups->child : NULL; g; g = g->next) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(g, "group");
        const cJSON *joined = cJSON_GetObjectItemCaseSensitive(g, "joined");
        char age[24] = "-", missing[128], state[96], serving[24] = "-";
        int age_s = s_num(g, "age_s");
        if (age_s >= 3600)
            snprintf(age, sizeof age, "%dh%02dm", age_s / 3600, (age_s % 3600) / 60);
        else if (age_s >= 0)
            snprintf(age, sizeof age, "%ds", age_s);
        s_missing(g, missing, sizeof missing);
        s_state(g, state, sizeof state);
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "complete"))
            && s_num(g, "serving_count") >= 0)
            snprintf(serving, sizeof serving, "%d/%d", s_num(g, "serving_count"),
                     s_num(g, "world"));
        printf("%-20s %7d %7d %7s %6d %-8s %-30s %s\n",
               cJSON_IsString(name) ? name->valuestring : "?", s_num(g, "world"),
               cJSON_GetArraySize(joined), serving, s_num(g, "epoch"), age, state, missing);
        if (per_rank)
            s_ranks(g);
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
        s_table(json, group != NULL);
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
