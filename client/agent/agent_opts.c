#include "agent_opts.h"
#include "agent_proto.h"
#include "rdzv_proto.h"
#include "router_url.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OPT_SHIM = 256, OPT_PORT_RANGE, OPT_ALLOW_UID, OPT_HEARTBEAT, OPT_RESERVE_WAIT,
       OPT_HEALTH_PATH, OPT_HEALTH_INTERVAL, OPT_ROUTER, OPT_DRAIN_TIMEOUT, OPT_ELASTIC,
       OPT_ON_EPOCH, OPT_ON_EPOCH_EXEC, OPT_RESTART };

static const struct option s_options[] = {
    { "server", required_argument, NULL, 's' },
    { "group", required_argument, NULL, 'g' },
    { "world", required_argument, NULL, 'w' },
    { "rank", required_argument, NULL, 'r' },
    { "host", required_argument, NULL, 'H' },
    { "node", required_argument, NULL, 'n' },
    { "socket", required_argument, NULL, 'S' },
    { "timeout", required_argument, NULL, 't' },
    { "shim", required_argument, NULL, OPT_SHIM },
    { "port-range", required_argument, NULL, OPT_PORT_RANGE },
    { "allow-uid", required_argument, NULL, OPT_ALLOW_UID },
    { "heartbeat", required_argument, NULL, OPT_HEARTBEAT },
    { "reserve-wait", required_argument, NULL, OPT_RESERVE_WAIT },
    { "health-path", required_argument, NULL, OPT_HEALTH_PATH },
    { "health-interval", required_argument, NULL, OPT_HEALTH_INTERVAL },
    { "router", required_argument, NULL, OPT_ROUTER },
    { "drain-timeout", required_argument, NULL, OPT_DRAIN_TIMEOUT },
    { "elastic", no_argument, NULL, OPT_ELASTIC },
    { "restart", no_argument, NULL, OPT_RESTART },
    { "on-epoch", required_argument, NULL, OPT_ON_EPOCH },
    { "on-epoch-exec", required_argument, NULL, OPT_ON_EPOCH_EXEC },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

void rdzv_agent_opts_usage(void)
{
    printf("Usage: rdzv agent --group G --world N --rank R --socket PATH [options]\n"
           "                  [-- CMD ARGS...]\n"
           "\n"
           "One rank's sidecar: joins the group, keeps every port of the rank's plan\n"
           "reserved, and serves them to librdzv_shim.so over the unix socket PATH;\n"
           "PATH.env holds the assignment. With CMD, runs it with the assignment's\n"
           "environment and the shim preloaded. A flag's variable is named with it;\n"
           "the flag wins over the variable.\n"
           "\n"
           "  --server EP[,EP...]      rdzvd; a list: the replicas of an active/standby\n"
           "                           rdzvd (RDZV_SERVER; default %s)\n"
           "  --group G                group name (RDZV_GROUP; required)\n"
           "  --world N                ranks in the group (RDZV_WORLD; required)\n"
           "  --rank R                 this rank, 0..N-1 (RDZV_RANK; required)\n"
           "  --host ADDR              address other ranks reach this one at (RDZV_HOST;\n"
           "                           default: the local address that routes to rdzvd)\n"
           "  --node NAME              this machine, or network namespace (RDZV_NODE;\n"
           "                           default: the hostname)\n"
           "  --socket PATH            the unix socket the shims ask (RDZV_AGENT_SOCKET;\n"
           "                           required)\n"
           "  --timeout SEC            give up the first join after SEC (default %d)\n"
           "  --heartbeat SEC          heartbeat every SEC (RDZV_HEARTBEAT; default %d)\n"
           "  --reserve-wait SEC       wait this long for a plan port in TIME_WAIT\n"
           "                           (RDZV_RESERVE_WAIT; default %d); a live holder\n"
           "                           is an error at once\n"
           "  --port-range BASE-LIMIT  managed range, if rdzvd does not send it\n"
           "                           (RDZV_PORT_RANGE; default %d-%d)\n"
           "  --shim PATH              the shim CMD preloads (RDZV_SHIM; default: the\n"
           "                           one built or installed beside this rdzv)\n"
           "  --allow-uid UID          another uid that may use the socket and read\n"
           "                           PATH.env; repeat for more (default: none, only\n"
           "                           the agent's uid and root)\n"
           "  --health-path PATH       the engine's health URL path, GET on\n"
           "                           127.0.0.1:<api port> (RDZV_HEALTH_PATH;\n"
           "                           default %s, vLLM's)\n"
           "  --health-interval SEC    check the engine every SEC; 0: never\n"
           "                           (RDZV_HEALTH_INTERVAL; default %d)\n"
           "  --router URL             the group's router: http[s]://HOST[:PORT] or\n"
           "                           haproxy:///PATH#BACKEND (RDZV_ROUTER; default:\n"
           "                           none)\n"
           "  --drain-timeout SEC      on SIGTERM or PATH.drain, wait this long for the\n"
           "                           router to let the rank go (RDZV_DRAIN_TIMEOUT;\n"
           "                           default %d)\n",
           RDZV_DEFAULT_ENDPOINT, RDZV_DEFAULT_TIMEOUT_MS / 1000, RDZV_AGENT_DEFAULT_HEARTBEAT_S,
           RDZV_AGENT_DEFAULT_RESERVE_WAIT_S, RDZV_DEFAULT_PORT_BASE, RDZV_DEFAULT_PORT_LIMIT,
           RDZV_AGENT_DEFAULT_HEALTH_PATH, RDZV_AGENT_DEFAULT_HEALTH_INTERVAL_S,
           RDZV_AGENT_DEFAULT_DRAIN_TIMEOUT_S);
    /* Two parts: C compilers need not take a string longer than 4095 bytes. */
    printf("  --restart                on an epoch move, stop CMD and start it again\n"
           "                           with the new epoch's environment (RDZV_RESTART=1;\n"
           "                           default: off, CMD is stopped and the agent exits %d)\n"
           "  --elastic                on an epoch move, keep CMD running and tell it\n"
           "                           (RDZV_ELASTIC=1; default: off)\n"
           "  --on-epoch SIGNAL        with --elastic, send CMD SIGNAL (HUP, USR1, a\n"
           "                           number) (RDZV_ON_EPOCH; default: none)\n"
           "  --on-epoch-exec CMD      with --elastic, run /bin/sh -c CMD with the new\n"
           "                           epoch's environment (RDZV_ON_EPOCH_EXEC; default:\n"
           "                           none)\n"
           "  --curve-server-public FILE  rdzvd's public certificate\n"
           "                           (RDZV_CURVE_SERVER_PUBLIC; default: no CURVE)\n"
           "  --curve-secret FILE      this agent's secret certificate, its public key\n"
           "                           in rdzvd's --clients (RDZV_CURVE_SECRET)\n"
           "  --group-token FILE       the group token (RDZV_GROUP_TOKEN; default: none)\n"
           "  --help\n"
           "\n"
           "Also read, as by rdzv join: RDZV_NCCL_ID (server|rank0|none), RDZV_NCCL_IDS\n"
           "(IDs per epoch), RDZV_NCCL_LIBRARY, RDZV_MEMBERS.\n"
           "SIGTERM, SIGINT, SIGHUP and SIGQUIT go to CMD; without CMD they stop the\n"
           "agent. CMD gets SIGTERM if the agent dies, even by SIGKILL.\n"
           "Exit: CMD's status (128+N for signal N), or 0 without CMD; 2 usage; 3 first\n"
           "join timed out; 4 refused, or rdzvd no longer knows the rank (CMD stopped,\n"
           "ports released); %d the group moved to a new epoch under CMD (stopped;\n"
           "neither --restart nor --elastic); 1 other errors.\n",
           RDZV_AGENT_EXIT_EPOCH, RDZV_AGENT_EXIT_EPOCH);
}

static int s_parse_int(const char *text, long lo, long hi, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = (int) v;
    return 0;
}

int rdzv_agent_parse_signal(const char *text)
{
    static const struct { const char *name; int sig; } names[] = {
        { "HUP", SIGHUP }, { "INT", SIGINT }, { "QUIT", SIGQUIT }, { "TERM", SIGTERM },
        { "USR1", SIGUSR1 }, { "USR2", SIGUSR2 }, { "CONT", SIGCONT }, { "WINCH", SIGWINCH },
    };
    if (strncmp(text, "SIG", 3) == 0)
        text += 3;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(text, names[i].name) == 0)
            return names[i].sig;
    int sig = 0;
    return s_parse_int(text, 1, SIGRTMAX, &sig) == 0 && sig != SIGKILL && sig != SIGSTOP ? sig
                                                                                       : -1;
}

int rdzv_agent_parse_range(const char *text, int *base, int *limit)
{
    char buf[32];
    if (!text || strlen(text) >= sizeof buf)
        return -1;
    strcpy(buf, text);
    char *dash = strchr(buf, '-');
    if (!dash)
        return -1;
    *dash = '\0';
    if (s_parse_int(buf, 1, 65535, base) < 0 || s_parse_int(dash + 1, 2, 65536, limit) < 0
        || *base >= *limit)
        return -1;
    return 0;
}

static void s_defaults(rdzv_agent_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->server = getenv("RDZV_SERVER");
    o->group = getenv("RDZV_GROUP");
    o->host = getenv("RDZV_HOST");
    o->node = getenv("RDZV_NODE");
    o->socket_path = getenv(RDZV_AGENT_SOCKET_ENV);
    o->shim_path = getenv(RDZV_SHIM_ENV);
    o->world = -1;
    o->rank = -1;
    o->heartbeat_s = RDZV_AGENT_DEFAULT_HEARTBEAT_S;
    o->health_path = getenv("RDZV_HEALTH_PATH");
    if (!o->health_path || !*o->health_path)
        o->health_path = RDZV_AGENT_DEFAULT_HEALTH_PATH;
    o->health_interval_s = RDZV_AGENT_DEFAULT_HEALTH_INTERVAL_S;
    o->router = getenv("RDZV_ROUTER");
    if (o->router && !*o->router)
        o->router = NULL;
    o->drain_timeout_s = RDZV_AGENT_DEFAULT_DRAIN_TIMEOUT_S;
    const char *v = getenv("RDZV_ELASTIC");
    o->elastic = v && strcmp(v, "1") == 0;
    v = getenv("RDZV_RESTART");
    o->restart = v && strcmp(v, "1") == 0;
    o->on_epoch_exec = getenv("RDZV_ON_EPOCH_EXEC");
    if (o->on_epoch_exec && !*o->on_epoch_exec)
        o->on_epoch_exec = NULL;
    o->reserve_wait_s = RDZV_AGENT_DEFAULT_RESERVE_WAIT_S;
    o->range_base = RDZV_DEFAULT_PORT_BASE;
    o->range_limit = RDZV_DEFAULT_PORT_LIMIT;
}

/* The numeric options: each has a variable, and a bad value of either names
 * the option, the variable and the range, as rdzv join does. */
typedef struct {
    int opt;
    const char *flag, *env;
    long lo, hi;
    size_t offset;
} s_int_opt_t;

static const s_int_opt_t s_int_opts[] = {
    { 'w', "--world", "RDZV_WORLD", 1, INT_MAX, offsetof(rdzv_agent_opts_t, world) },
    { 'r', "--rank", "RDZV_RANK", 0, INT_MAX, offsetof(rdzv_agent_opts_t, rank) },
    { 't', "--timeout", NULL, 1, RDZV_MAX_TIMEOUT_MS / 1000,
      offsetof(rdzv_agent_opts_t, timeout_s) },
    { OPT_HEARTBEAT, "--heartbeat", "RDZV_HEARTBEAT", 1, 3600,
      offsetof(rdzv_agent_opts_t, heartbeat_s) },
    { OPT_RESERVE_WAIT, "--reserve-wait", "RDZV_RESERVE_WAIT", 0, 3600,
      offsetof(rdzv_agent_opts_t, reserve_wait_s) },
    { OPT_HEALTH_INTERVAL, "--health-interval", "RDZV_HEALTH_INTERVAL", 0, 3600,
      offsetof(rdzv_agent_opts_t, health_interval_s) },
    { OPT_DRAIN_TIMEOUT, "--drain-timeout", "RDZV_DRAIN_TIMEOUT", 0, 3600,
      offsetof(rdzv_agent_opts_t, drain_timeout_s) },
};

static int s_set_int(rdzv_agent_opts_t *o, const s_int_opt_t *spec, const char *text,
                     char *err, size_t errlen)
{
    if (s_parse_int(text, spec->lo, spec->hi, (int *) ((char *) o + spec->offset)) == 0)
        return 0;
    char or_env[48] = "";
    if (spec->env)
        snprintf(or_env, sizeof or_env, " (or %s)", spec->env);
    snprintf(err, errlen, "%s%s must be an integer in %ld..%ld, not '%s'", spec->flag, or_env,
             spec->lo, spec->hi, text);
    return -1;
}

static int s_env_overrides(rdzv_agent_opts_t *o, char *err, size_t errlen)
{
    const char *v;
    for (size_t i = 0; i < sizeof s_int_opts / sizeof s_int_opts[0]; i++)
        if (s_int_opts[i].env && (v = getenv(s_int_opts[i].env)) && *v
            && s_set_int(o, &s_int_opts[i], v, err, errlen) < 0)
            return -1;
    if ((v = getenv("RDZV_ON_EPOCH")) && *v && (o->on_epoch_signal = rdzv_agent_parse_signal(v)) <= 0)
        return snprintf(err, errlen, "RDZV_ON_EPOCH must name a signal (HUP, USR1, SIGUSR2, 10, "
                        "...), not '%s'", v), -1;
    if ((v = getenv(RDZV_PORT_RANGE_ENV)) && *v
        && rdzv_agent_parse_range(v, &o->range_base, &o->range_limit) < 0)
        return snprintf(err, errlen, "--port-range (or %s) must be BASE-LIMIT with "
                        "1 <= BASE < LIMIT <= 65536, not '%s'", RDZV_PORT_RANGE_ENV, v), -1;
    return 0;
}

static int s_option(rdzv_agent_opts_t *o, int c, const char *arg, char *err, size_t errlen)
{
    int uid = 0;
    for (size_t i = 0; i < sizeof s_int_opts / sizeof s_int_opts[0]; i++)
        if (s_int_opts[i].opt == c)
            return s_set_int(o, &s_int_opts[i], arg, err, errlen);
    switch (c) {
    case 's': o->server = arg; return 0;
    case 'g': o->group = arg; return 0;
    case 'H': o->host = arg; return 0;
    case 'n': o->node = arg; return 0;
    case 'S': o->socket_path = arg; return 0;
    case OPT_SHIM: o->shim_path = arg; return 0;
    case OPT_HEALTH_PATH: o->health_path = arg; return 0;
    case OPT_ROUTER: o->router = arg; return 0;
    case OPT_ELASTIC: o->elastic = true; return 0;
    case OPT_RESTART: o->restart = true; return 0;
    case OPT_ON_EPOCH_EXEC: o->on_epoch_exec = arg; return 0;
    case OPT_ON_EPOCH:
        if ((o->on_epoch_signal = rdzv_agent_parse_signal(arg)) > 0)
            return 0;
        snprintf(err, errlen, "--on-epoch (or RDZV_ON_EPOCH) must name a signal (HUP, USR1, "
                 "SIGUSR2, 10, ...), not '%s'", arg);
        return -1;
    case 'h': o->help = true; return 0;
    case OPT_PORT_RANGE:
        if (rdzv_agent_parse_range(arg, &o->range_base, &o->range_limit) == 0)
            return 0;
        snprintf(err, errlen, "--port-range (or %s) must be BASE-LIMIT with "
                 "1 <= BASE < LIMIT <= 65536, not '%s'", RDZV_PORT_RANGE_ENV, arg);
        return -1;
    case OPT_ALLOW_UID:
        if (o->n_allow_uids < RDZV_AGENT_MAX_ALLOW_UIDS
            && s_parse_int(arg, 0, INT_MAX, &uid) == 0) {
            o->allow_uids[o->n_allow_uids++] = (uid_t) uid;
            return 0;
        }
        snprintf(err, errlen, "--allow-uid must be a uid in 0..%d (at most %d of them), "
                 "not '%s'", INT_MAX, RDZV_AGENT_MAX_ALLOW_UIDS, arg);
        return -1;
    default:
        snprintf(err, errlen, "unknown option (see rdzv agent --help)");
        return -1;
    }
}

static int s_check(const rdzv_agent_opts_t *o, char *err, size_t errlen)
{
    if (!o->group || !o->socket_path || o->world < 1 || o->rank < 0)
        return snprintf(err, errlen, "--group, --world, --rank and --socket are required"), -1;
    if (o->rank >= o->world)
        return snprintf(err, errlen, "rank %d is outside world %d", o->rank, o->world), -1;
    if (!*o->socket_path)
        return snprintf(err, errlen, "--socket is empty"), -1;
    /* The path goes into a URL as it is: no scheme, host or space in it. */
    if (o->health_path[0] != '/' || strlen(o->health_path) > 256
        || strpbrk(o->health_path, " \t\r\n#"))
        return snprintf(err, errlen, "--health-path (or RDZV_HEALTH_PATH) must be a URL path "
                        "starting with '/', without spaces or '#', not '%s'", o->health_path), -1;
    rdzv_router_url_t url;
    char why[400];
    if (o->router && rdzv_router_url_parse(o->router, &url, why, sizeof why) < 0)
        return snprintf(err, errlen, "--router (or RDZV_ROUTER): %s", why), -1;
    if ((o->on_epoch_signal || o->on_epoch_exec) && !o->elastic)
        return snprintf(err, errlen, "--on-epoch and --on-epoch-exec tell an engine of an epoch "
                        "move: they need --elastic"), -1;
    if (o->restart && o->elastic)
        return snprintf(err, errlen, "--restart and --elastic are two answers to an epoch "
                        "move: give one"), -1;
    if (o->restart && !o->cmd)
        return snprintf(err, errlen, "--restart restarts CMD: it needs -- CMD"), -1;
    if (o->on_epoch_signal && !o->cmd)
        return snprintf(err, errlen, "--on-epoch signals CMD: it needs -- CMD"), -1;
    if (o->router && o->health_interval_s == 0)
        return snprintf(err, errlen, "--router needs health checks: rdzvd registers a rank "
                        "once its engine serves (--health-interval is 0)"), -1;
    return 0;
}

int rdzv_agent_opts_parse(rdzv_agent_opts_t *opts, int argc, char **argv,
                          char *err, size_t errlen)
{
    s_defaults(opts);
    if (s_env_overrides(opts, err, errlen) < 0)
        return -1;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "+h", s_options, NULL)) != -1) {
        if (s_option(opts, c, optarg, err, errlen) < 0)
            return -1;
    }
    if (optind < argc)
        opts->cmd = &argv[optind];
    if (opts->help)
        return 0;
    if (!opts->server)
        opts->server = RDZV_DEFAULT_ENDPOINT;
    return s_check(opts, err, errlen);
}
