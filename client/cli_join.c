/* rdzv join: wait for the whole group, then print the assignment or run a
 * command with it in the environment. */
#include "cli.h"

#include "rdzv_proto.h"
#include "rdzv_util.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_CMD "join"
#define S_EXIT_NOT_FOUND 127     /* the shell's convention for exec failures */
#define S_EXIT_NOT_EXEC  126
#define S_RETRY_MS       500     /* pause between joins refused with rank_taken */

static const char s_usage[] =
    "Usage: rdzv join --group G --world N --rank R [options] [-- CMD ARGS...]\n"
    "\n"
    "Joins group G as rank R of N and blocks until every rank has joined.\n"
    "Then prints the assignment, or runs CMD with it in the environment;\n"
    "both add RDZV_SERVER (every server given), so CMD's own 'rdzv kv' calls\n"
    "reach the same rdzvd. Rank 0 of a rank0 group runs CMD as a child, not\n"
    "through exec: the NCCL roots it made before joining live in this process.\n"
    CLI_HELP_VARIABLES
    "\n"
    CLI_HELP_SERVER
    "  --group G                group name (RDZV_GROUP; required)\n"
    "  --world N                ranks in the group (RDZV_WORLD; required)\n"
    "  --rank R                 this rank, 0..N-1 (RDZV_RANK; required)\n"
    "  --host ADDR              address other ranks reach this one at (RDZV_HOST;\n"
    "                           default: the local address that routes to rdzvd)\n"
    "  --node NAME              this machine, or network namespace (RDZV_NODE;\n"
    "                           default: the hostname)\n"
    "  --timeout SEC            give up after SEC seconds (default 60); until\n"
    "                           then a rank_taken refusal (a killed join of this\n"
    "                           rank still waiting in rdzvd, or a live process\n"
    "                           on another node holding it) is retried, and so\n"
    "                           is a server name that does not resolve\n"
    "  --format FMT             json (one JSON line), env (KEY=VALUE lines a\n"
    "                           shell can source), export (export KEY='VALUE'\n"
    "                           lines, for eval) or vllm-args (the flags of an\n"
    "                           external-DP `vllm serve` rank) (default json)\n"
    "  --members                put every rank's host and node in the assignment\n"
    "                           (RDZV_MEMBERS=1; default: off, as it is O(world)\n"
    "                           per rank)\n"
    "  --router URL             the group's router, where rdzvd registers its\n"
    "                           serving ranks: http[s]://HOST[:PORT] or\n"
    "                           haproxy:///PATH#BACKEND (RDZV_ROUTER; default:\n"
    "                           none)\n"
    "  --replace                take the rank even from a live session on\n"
    "                           another node (one known to be gone, or a\n"
    "                           deliberate takeover; default: off)\n"
    "  --nccl-id MODE           who makes the group's NCCL unique IDs: server\n"
    "                           (rdzvd), rank0 (rank 0's process, before it\n"
    "                           joins, through libnccl.so.2 or the file\n"
    "                           RDZV_NCCL_LIBRARY names; the other ranks wait for\n"
    "                           it) or none (RDZV_NCCL_ID; default: the\n"
    "                           server's). The group's first join decides; rank\n"
    "                           0 of a rank0 group must give rank0 itself or is\n"
    "                           refused with bad_request\n"
    "  --nccl-ids N             NCCL IDs per epoch, 1..16; the group's first join\n"
    "                           decides (RDZV_NCCL_IDS; default 1)\n"
    CLI_HELP_SECURITY
    "  -h, --help               this help\n"
    "\n"
    "Exit: 0 ok, 2 usage, 3 timeout, 4 refused by the server, 1 other errors;\n"
    "with CMD, its exit status (127 if it cannot be found, 126 if it cannot be\n"
    "run).\n";

typedef struct {
    const char *server, *group, *world, *rank, *host, *node;
    const char *timeout, *format, *nccl_id, *nccl_ids;
    bool help, replace, members;
    const char *router;
} s_flags_t;

enum { S_SERVER = 256, S_GROUP, S_WORLD, S_RANK, S_HOST, S_NODE, S_TIMEOUT,
       S_FORMAT, S_NCCL, S_NCCL_IDS, S_REPLACE, S_MEMBERS, S_ROUTER };

static const struct option s_options[] = {
    { "server", required_argument, NULL, S_SERVER },
    { "group", required_argument, NULL, S_GROUP },
    { "world", required_argument, NULL, S_WORLD },
    { "rank", required_argument, NULL, S_RANK },
    { "host", required_argument, NULL, S_HOST },
    { "node", required_argument, NULL, S_NODE },
    { "timeout", required_argument, NULL, S_TIMEOUT },
    { "format", required_argument, NULL, S_FORMAT },
    { "nccl-id", required_argument, NULL, S_NCCL },
    { "nccl-ids", required_argument, NULL, S_NCCL_IDS },
    { "replace", no_argument, NULL, S_REPLACE },
    { "members", no_argument, NULL, S_MEMBERS },
    { "router", required_argument, NULL, S_ROUTER },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

static void s_store(s_flags_t *f, int c, const char *arg)
{
    switch (c) {
    case S_SERVER: f->server = arg; break;
    case S_GROUP: f->group = arg; break;
    case S_WORLD: f->world = arg; break;
    case S_RANK: f->rank = arg; break;
    case S_HOST: f->host = arg; break;
    case S_NODE: f->node = arg; break;
    case S_TIMEOUT: f->timeout = arg; break;
    case S_FORMAT: f->format = arg; break;
    case S_NCCL: f->nccl_id = arg; break;
    case S_NCCL_IDS: f->nccl_ids = arg; break;
    case S_REPLACE: f->replace = true; break;
    case S_MEMBERS: f->members = true; break;
    case S_ROUTER: f->router = arg; break;
    default: f->help = true; break;
    }
}

/* Flags first ('+': stop at CMD so its own flags stay its own). */
static int s_parse_flags(int argc, char **argv, s_flags_t *f)
{
    int c;
    while ((c = cli_getopt(S_CMD, argc, argv, "+:h", s_options)) != -1) {
        if (c == CLI_OPT_BAD)
            return CLI_EXIT_USAGE;
        s_store(f, c, optarg);
    }
    f->server = cli_value(f->server, "RDZV_SERVER", RDZV_DEFAULT_ENDPOINT);
    f->group = cli_value(f->group, "RDZV_GROUP", NULL);
    f->world = cli_value(f->world, "RDZV_WORLD", NULL);
    f->rank = cli_value(f->rank, "RDZV_RANK", NULL);
    f->host = cli_value(f->host, "RDZV_HOST", NULL);
    f->node = cli_value(f->node, "RDZV_NODE", NULL);
    f->nccl_id = cli_value(f->nccl_id, "RDZV_NCCL_ID", NULL);
    f->nccl_ids = cli_value(f->nccl_ids, "RDZV_NCCL_IDS", NULL);
    return 0;
}

static int s_required(const char *value, const char *flag, const char *env)
{
    if (value)
        return 0;
    return cli_usage_error(S_CMD, "%s (or %s) is required", flag, env);
}

/* What `rdzv join` prints without CMD. */
typedef enum { S_JSON, S_ENV, S_EXPORT, S_VLLM_ARGS } s_format_t;

static int s_format(const char *name, s_format_t *out)
{
    static const char *const names[] = { "json", "env", "export", "vllm-args" };
    if (!name) {
        *out = S_JSON;
        return 0;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(name, names[i]) == 0) {
            *out = (s_format_t) i;
            return 0;
        }
    }
    return -1;
}

/* Flags into join arguments; 0 or CLI_EXIT_USAGE (already reported). */
static int s_to_args(const s_flags_t *f, rdzv_join_args_t *a, s_format_t *format)
{
    long world = 0, rank = 0;
    int rc = s_required(f->group, "--group", "RDZV_GROUP");
    rc = rc ? rc : s_required(f->world, "--world", "RDZV_WORLD");
    rc = rc ? rc : s_required(f->rank, "--rank", "RDZV_RANK");
    rc = rc ? rc : cli_parse_long(S_CMD, "--world (or RDZV_WORLD)", f->world, 1,
                                  RDZV_DEFAULT_MAX_WORLD, &world);
    rc = rc ? rc : cli_parse_long(S_CMD, "--rank (or RDZV_RANK)", f->rank, 0,
                                  world - 1, &rank);
    if (rc == 0 && f->timeout)
        rc = cli_parse_seconds(S_CMD, "--timeout", f->timeout, &a->timeout_ms);
    if (rc)
        return rc;
    if (s_format(f->format, format) != 0)
        return cli_usage_error(S_CMD, "--format must be json, env, export or vllm-args, not '%s'",
                               f->format);
    if (f->nccl_id && strcmp(f->nccl_id, "server") != 0 && strcmp(f->nccl_id, "none") != 0
        && strcmp(f->nccl_id, "rank0") != 0)
        return cli_usage_error(S_CMD, "--nccl-id must be server, rank0 or none, not '%s'",
                               f->nccl_id);
    long ids = 0;
    if (f->nccl_ids && (rc = cli_parse_long(S_CMD, "--nccl-ids (or RDZV_NCCL_IDS)",
                                            f->nccl_ids, 1, RDZV_MAX_NCCL_IDS, &ids)) != 0)
        return rc;
    a->nccl_ids = (int) ids;
    a->group = f->group;
    a->world = (int) world;
    a->rank = (int) rank;
    a->host = f->host;
    a->node = f->node;
    a->nccl_id = f->nccl_id;
    return 0;
}

/* Replaces this process with argv; returns only on failure, with the exit code. */
static int s_exec(char *env, char **argv)
{
    if (cli_env_apply(env) != 0) {
        fprintf(stderr, "rdzv %s: cannot set the environment: %s\n", S_CMD, strerror(errno));
        return CLI_EXIT_ERROR;
    }
    fflush(NULL);
    execvp(argv[0], argv);
    int e = errno;
    fprintf(stderr, "rdzv %s: cannot run '%s': %s\n", S_CMD, argv[0], strerror(e));
    return e == ENOENT ? S_EXIT_NOT_FOUND : S_EXIT_NOT_EXEC;
}

static volatile sig_atomic_t s_child_pid;

static void s_forward(int sig)
{
    if (s_child_pid > 0)
        kill((pid_t) s_child_pid, sig);
}

/* Runs argv as a child and waits for it: rank 0 of a rank0 group keeps the
 * NCCL roots it made alive in this process, which exec would end. Returns
 * the child's exit status (128 + signal when killed). */
static int s_run_child(char *env, char **argv)
{
    if (cli_env_apply(env) != 0) {
        fprintf(stderr, "rdzv %s: cannot set the environment: %s\n", S_CMD, strerror(errno));
        return CLI_EXIT_ERROR;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "rdzv %s: cannot fork: %s\n", S_CMD, strerror(errno));
        return CLI_EXIT_ERROR;
    }
    if (pid == 0) {
        execvp(argv[0], argv);
        int e = errno;
        fprintf(stderr, "rdzv %s: cannot run '%s': %s\n", S_CMD, argv[0], strerror(e));
        _exit(e == ENOENT ? S_EXIT_NOT_FOUND : S_EXIT_NOT_EXEC);
    }
    s_child_pid = pid;
    struct sigaction sa = { .sa_handler = s_forward };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* What to do with the assignment: print it, or run cmd with it (as a child
 * when keep_roots: this process hosts rank 0's NCCL roots). */
static int s_deliver(rdzv_assignment_t **asg_p, const char *server, s_format_t format,
                     char **cmd, bool keep_roots)
{
    char *env = cli_assignment_env(*asg_p, server);
    int rc = CLI_EXIT_OK;
    if (!env) {
        fprintf(stderr, "rdzv %s: out of memory\n", S_CMD);
        rc = CLI_EXIT_ERROR;
    } else if (cmd) {
        rdzv_assignment_destroy(asg_p);
        rc = keep_roots ? s_run_child(env, cmd) : s_exec(env, cmd);
    } else if (format == S_ENV) {
        fputs(env, stdout);
    } else if (format == S_EXPORT) {
        rc = cli_env_print_export(env) == 0 ? CLI_EXIT_OK : CLI_EXIT_ERROR;
    } else if (format == S_VLLM_ARGS) {
        char *args = rdzv_assignment_vllm_args(*asg_p);
        if (args)
            printf("%s\n", args);
        else
            fprintf(stderr, "rdzv %s: the assignment names no DP RPC port (rdzvd is older than "
                    "this rdzv), so there are no vLLM flags to print\n", S_CMD);
        rc = args ? CLI_EXIT_OK : CLI_EXIT_ERROR;
        free(args);
    } else {
        printf("%s\n", rdzv_assignment_json(*asg_p));
    }
    free(env);
    rdzv_assignment_destroy(asg_p);
    if (rc == CLI_EXIT_OK && fflush(stdout) != 0)
        rc = CLI_EXIT_ERROR;
    return rc;
}

/* rdzv_join, retrying rank_taken until the join's own timeout: a killed
 * rdzv join leaves its join waiting in rdzvd until that join's timeout, and
 * a restarted Pod must not fail on it. a->timeout_ms shrinks as time passes. */
static int s_join(rdzv_client_t *client, rdzv_join_args_t *a, rdzv_assignment_t **out)
{
    int64_t deadline = rdzv_now_ms()
                       + (a->timeout_ms > 0 ? a->timeout_ms : RDZV_DEFAULT_TIMEOUT_MS);
    bool told = false;
    for (;;) {
        int rc = rdzv_join(client, a, out);
        int64_t left = deadline - rdzv_now_ms() - S_RETRY_MS;
        if (rc != RDZV_ERR_REFUSED || left <= 0
            || strcmp(rdzv_client_error_code(client), RDZV_E_RANK_TAKEN) != 0)
            return rc;
        if (!told)
            fprintf(stderr, "rdzv %s: %s: %s; retrying until the --timeout passes\n",
                    S_CMD, RDZV_E_RANK_TAKEN, rdzv_client_error(client));
        told = true;
        usleep(S_RETRY_MS * 1000);
        a->timeout_ms = (int) left;
    }
}

int cli_join_main(int argc, char **argv)
{
    s_flags_t f = { 0 };
    rdzv_join_args_t args = { 0 };
    s_format_t format = S_JSON;
    int rc = s_parse_flags(argc, argv, &f);
    if (rc == 0 && f.help) {
        fputs(s_usage, stdout);
        return CLI_EXIT_OK;
    }
    if (rc != 0 || (rc = s_to_args(&f, &args, &format)) != 0)
        return rc;
    char **cmd = optind < argc ? argv + optind : NULL;
    rdzv_client_t *client = cli_connect(S_CMD, f.server, 0, &rc);
    if (!client)
        return rc;
    rdzv_client_set_replace(client, f.replace);
    if (f.members)
        rdzv_client_set_members(client, true);
    const char *router = f.router ? f.router : getenv("RDZV_ROUTER");
    if (router && *router && rdzv_client_set_router(client, router) != RDZV_OK) {
        fprintf(stderr, "rdzv %s: --router (or RDZV_ROUTER): %s\n", S_CMD,
                rdzv_client_error(client));
        rdzv_client_destroy(&client);
        return CLI_EXIT_USAGE;
    }
    rdzv_assignment_t *asg = NULL;
    cli_progress_t *progress = cli_progress_start(S_CMD, f.server, args.group,
                                                  args.timeout_ms);
    rc = s_join(client, &args, &asg);
    cli_progress_stop(&progress);
    rc = cli_result(S_CMD, client, rc);
    /* Close the socket before exec so CMD inherits no ZeroMQ state. */
    rdzv_client_destroy(&client);
    bool roots_here = args.rank == 0 && args.nccl_id && strcmp(args.nccl_id, "rank0") == 0;
    if (rc == CLI_EXIT_OK && roots_here && !cmd)
        fprintf(stderr, "rdzv %s: warning: rank 0's NCCL roots lived in this process and end "
                "with it; run the program as CMD (or use librdzv in it)\n", S_CMD);
    return rc == CLI_EXIT_OK ? s_deliver(&asg, f.server, format, cmd, roots_here) : rc;
}
