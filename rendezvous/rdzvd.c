/* rdzvd: the rendezvous server. Parses options, checks that the managed port
 * range cannot collide with kernel-chosen ports, then runs the server. */
#include "core.h"
#include "log.h"
#include "cpus.h"
#include "fds.h"
#include "http.h"
#include "journal_opts.h"
#include "listen.h"
#include "router.h"
#include "server.h"
#include "rdzv_proto.h"
#include "rdzv_util.h"
#include "rdzv_version.h"

#include <czmq.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef RDZV_LIBEXECDIR
#define RDZV_LIBEXECDIR "/usr/local/libexec/rdzv"
#endif
#ifndef RDZV_LIBEXEC_FROM_SBINDIR
#define RDZV_LIBEXEC_FROM_SBINDIR "../libexec/rdzv"
#endif
#define S_EPHEMERAL_FILE "/proc/sys/net/ipv4/ip_local_port_range"

typedef struct {
    rdzv_config_t cfg;
    rdzv_server_security_t security;
    const char *bind;
    const char *endpoint_file;
    const char *http;
    const char *token_file;
    const char *http_token_file;
    bool no_nccl;
    bool insecure_bind_any;
    bool bind_given;             /* --bind was on the command line */
    int io_threads;
    int shards;                  /* 0: as many as rdzvd picks */
    int listeners;               /* 0: as many as rdzvd picks */
    rdzv_journal_remote_t journal;   /* a replicated journal's options (journal_opts.h) */
    const char *advertise;
    const char *router_allow[64];    /* --router-allow, cfg.router_allow points here */
    rdzv_router_opts_t router;
} s_options_t;

static void s_usage(FILE *out)
{
    fprintf(out,
        "usage: rdzvd [options]\n"
        "  --bind ENDPOINT          ZeroMQ endpoint to serve (default %s; on loopback\n"
        "                           without keys)\n"
        "  --state-dir DIR          where the journal lives (default ./rdzv-state)\n"
        "  --port-base N            first managed port (default %d)\n"
        "  --ports-per-rank K       ports in each rank's plan (default %d)\n"
        "  --port-limit M           end of the managed range, exclusive (default %d)\n"
        "  --max-world N            largest group (default %d)\n"
        "  --dead-after SEC         a rank silent this long shows as dead (default 15)\n"
        "  --nccl-root-timeout SEC  end an NCCL root whose ranks never all arrive (default 600)\n"
        "  --nccl-helper PATH       the rdzv-nccl-root program\n"
        "  --no-nccl                groups get no NCCL ID unless they ask (nccl_id=server)\n"
        "  --no-fsync               do not fsync the journal (benchmarks only)\n"
        "  --repair                 cut a journal corrupted in the middle at the damage\n",
        RDZV_DEFAULT_BIND, RDZV_DEFAULT_PORT_BASE, RDZV_DEFAULT_PORTS_PER_RANK,
        RDZV_DEFAULT_PORT_LIMIT, RDZV_DEFAULT_MAX_WORLD);
    rdzv_journal_usage(out);
    fputs("  --advertise ENDPOINT     the endpoint clients reach this rdzvd at, which a\n"
        "                           standby names (default: the bound one, with the host\n"
        "                           name for a wildcard address)\n", out);
    fputs("  --shards N               ROUTER sockets, each in its own thread on its own\n"
        "                           SO_REUSEPORT listener of the port (default: half the\n"
        "                           CPUs, 2 to 8; 1 for endpoints other than tcp://ADDR:PORT)\n"
        "  --listeners N            SO_REUSEPORT listeners of the port, dealt to the shards\n"
        "                           (default: 8, or the shards if more; at least --shards)\n"
        "  --io-threads N           ZeroMQ I/O threads (default: twice the shards, at most\n"
        "                           the CPUs)\n"
        "  --log-format text|json   one line per event, as text or a JSON object\n"
        "  --log-level LEVEL        error, warn, info or debug: the least severe lines\n"
        "                           written (default info; debug adds each CURVE client\n"
        "                           let in)\n"
        "  --compact-mib N          rewrite the journal as a snapshot past N MiB (default 64),\n"
        "                           then whenever it has doubled since; 0: never\n"
        "  --max-groups N           groups held at once (default 100000)\n"
        "  --max-ranks N            the worlds of all groups held, summed (default 16777216)\n"
        "  --forming-ttl S          delete a group whose first epoch has not formed, with\n"
        "                           nobody waiting or heard from in it for S seconds\n"
        "                           (default 3600; 0: never)\n"
        "  --max-kv-mib N           KV bytes per group and epoch (default 64)\n"
        "  --max-kv-total-mib N     KV bytes of all groups together (default 1024)\n"
        "  --max-member-mib N       bytes of every rank's host, node and session strings\n"
        "                           together (default 1024)\n"
        "  --max-waits N            joins and kv waits pending at once (default 1000000)\n"
        "  --max-rps N              requests per second per connection, -1: no limit (default 1000)\n"
        "  --endpoint-file PATH     write the bound endpoint to PATH once serving\n"
        "  --http [ADDR:]PORT       serve /healthz /readyz /metrics /v1/groups over HTTP\n"
        "                           (off by default; PORT alone binds 127.0.0.1)\n"
        "  --http-token FILE        /metrics and /v1/groups want \"Authorization: Bearer\"\n"
        "                           with the token in FILE (the probes never do)\n"
        "  --curve-secret FILE      rdzvd's secret certificate (rdzv keygen): CURVE on\n"
        "  --clients DIR            public certificates of the clients accepted: DIR's\n"
        "                           files not named .* or *_secret, links followed; read\n"
        "                           again when they change (checked at each handshake\n"
        "                           and every second), a Kubernetes Secret's swap too\n"
        "  --group-token FILE       every request must carry this token\n"
        "  --tokens DIR             each group its own token: a request naming group G\n"
        "                           must carry the token in DIR/G (tenants apart)\n"
        "  --insecure-bind-any      without keys, serve other than loopback anyway\n"
        "  --peer-timeout S         drop a connection that does not answer a ZMTP heartbeat\n"
        "                           within S seconds, or whose handshake takes over S/6\n"
        "                           (at least 1 s; default 30)\n"
        "  --router-allow URL       groups may name this router (rdzv agent --router):\n"
        "                           a whole URL, or its start before '/' or '#'; '*' any;\n"
        "                           repeat for more; empty allows nothing (default:\n"
        "                           none, registration off)\n"
        "  --router-token FILE      bearer token for HTTP routers' worker APIs\n"
        "  --router-interval SEC    reconcile every group's router this often (default 1)\n"
        "  --router-drain SEC       a drained HAProxy server goes when its last session\n"
        "                           ends, or after SEC (default 20: under the agents'\n"
        "                           --drain-timeout)\n"
        "  --max-connections N      close a connection beyond N at once (default: the\n"
        "                           limit on open files less those open at start, and\n"
        "                           a reserve of 1/40 of it, at least 32)\n"
        "  --help, --version\n", out);
}

static int s_int_arg(const char *flag, const char *text, long lo, long hi, int *out)
{
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (!*text || *end || v < lo || v > hi) {
        fprintf(stderr, "rdzvd: %s must be an integer in [%ld, %ld], not \"%s\"\n",
                flag, lo, hi, text);
        return -1;
    }
    *out = (int) v;
    return 0;
}

static int s_log_level(const char *name)
{
    rdzv_log_level_t level;
    if (rdzv_log_level_parse(name, &level) < 0) {
        fprintf(stderr, "rdzvd: --log-level must be error, warn, info or debug, not \"%s\"\n",
                name);
        return -1;
    }
    rdzv_log_set_level(level);
    return 0;
}

/* The NCCL helper: beside rdzvd in the build tree, then where the install
 * put it relative to rdzvd (so an unpacked or DESTDIR tree finds its own),
 * then at the configured libexecdir. */
static const char *s_default_helper(void)
{
    static char path[PATH_MAX + 32];
    const char *places[] = { "rdzv-nccl-root", RDZV_LIBEXEC_FROM_SBINDIR "/rdzv-nccl-root" };
    for (size_t i = 0; i < sizeof places / sizeof places[0]; i++)
        if (rdzv_path_beside_exe(places[i], path, sizeof path) == 0 && access(path, X_OK) == 0)
            return path;
    snprintf(path, sizeof path, "%s/rdzv-nccl-root", RDZV_LIBEXECDIR);
    return access(path, X_OK) == 0 ? path : NULL;
}

/* One --router-allow: a router URL (checked as a join's would be) or a
 * start of one, or "*". */
static int s_router_allow(s_options_t *o, const char *arg)
{
    /* Empty allows nothing: a template's --router-allow $(ROUTER) with no
     * router set. */
    if (!*arg)
        return 0;
    size_t max = sizeof o->router_allow / sizeof o->router_allow[0];
    if (o->cfg.nrouter_allow >= (int) max) {
        fprintf(stderr, "rdzvd: --router-allow given more than %zu times\n", max);
        return -1;
    }
    rdzv_router_url_t url;
    char err[300];
    /* haproxy:///PATH alone allows every backend of that socket. */
    char whole[RDZV_ROUTER_URL_MAX + 8];
    snprintf(whole, sizeof whole, "%s%s", arg,
             strncmp(arg, "haproxy://", 10) == 0 && !strchr(arg, '#') ? "#b" : "");
    if (strcmp(arg, "*") != 0 && rdzv_router_url_parse(whole, &url, err, sizeof err) < 0) {
        fprintf(stderr, "rdzvd: --router-allow: %s\n", err);
        return -1;
    }
    o->router_allow[o->cfg.nrouter_allow++] = arg;
    o->cfg.router_allow = o->router_allow;
    return 0;
}

static int s_parse(int argc, char **argv, s_options_t *o)
{
    static const struct option longopts[] = {
        { "bind", required_argument, 0, 'b' }, { "state-dir", required_argument, 0, 's' },
        { "port-base", required_argument, 0, 'p' }, { "ports-per-rank", required_argument, 0, 'k' },
        { "port-limit", required_argument, 0, 'l' }, { "max-world", required_argument, 0, 'w' },
        { "dead-after", required_argument, 0, 'd' }, { "nccl-root-timeout", required_argument, 0, 't' },
        { "nccl-helper", required_argument, 0, 'n' }, { "no-nccl", no_argument, 0, 'N' },
        { "no-fsync", no_argument, 0, 'F' }, { "repair", no_argument, 0, 'R' },
        { "endpoint-file", required_argument, 0, 'e' }, { "http", required_argument, 0, 'H' },
        { "http-token", required_argument, 0, 'A' }, { "help", no_argument, 0, 'h' },
        { "version", no_argument, 0, 'V' }, { "curve-secret", required_argument, 0, 'C' },
        { "clients", required_argument, 0, 'L' }, { "group-token", required_argument, 0, 'T' },
        { "tokens", required_argument, 0, 'Z' },
        { "insecure-bind-any", no_argument, 0, 'I' },
        { "peer-timeout", required_argument, 0, 'O' },
        { "max-connections", required_argument, 0, 'c' }, { "compact-mib", required_argument, 0, 'M' },
        { "log-format", required_argument, 0, 'f' }, { "log-level", required_argument, 0, 1012 }, { "io-threads", required_argument, 0, 'i' },
        { "max-groups", required_argument, 0, 'G' },
        { "max-ranks", required_argument, 0, 'X' }, { "forming-ttl", required_argument, 0, 'Y' },
        { "max-kv-mib", required_argument, 0, 'K' },
        { "max-kv-total-mib", required_argument, 0, 'J' },
        { "max-member-mib", required_argument, 0, 1007 },
        { "max-waits", required_argument, 0, 'W' }, { "max-rps", required_argument, 0, 'P' },
        { "shards", required_argument, 0, 'S' }, { "listeners", required_argument, 0, 'Q' },
        { "advertise", required_argument, 0, 1006 },
        { "router-allow", required_argument, 0, 1008 },
        { "router-token", required_argument, 0, 1009 },
        { "router-interval", required_argument, 0, 1010 },
        { "router-drain", required_argument, 0, 1011 },
        { 0, 0, 0, 0 },
    };
    /* rdzvd's options, then the journal's (journal_opts.h). */
    enum { S_OWN = sizeof longopts / sizeof longopts[0] - 1 };
    struct option all[S_OWN + 16];
    memcpy(all, longopts, sizeof longopts);
    for (int i = 0, n = S_OWN; n < S_OWN + 15; i++, n++)
        if (!(all[n] = rdzv_journal_options[i]).name)
            break;
    all[S_OWN + 15] = (struct option) { 0 };
    char err[256];
    int c, dead_after = 15, compact_mib = 64, kv_mib = 64, kv_total_mib = 1024, member_mib = 1024;
    int max_ranks = RDZV_DEFAULT_MAX_RANKS, forming_ttl = 3600;
    while ((c = getopt_long(argc, argv, "", all, NULL)) != -1) {
        int rc = 0;
        if (c >= RDZV_JOURNAL_OPT_FIRST && c <= RDZV_JOURNAL_OPT_LAST) {
            if (rdzv_journal_opt(&o->journal, c, optarg, err, sizeof err) < 0) {
                fprintf(stderr, "rdzvd: %s\n", err);
                return -1;
            }
            continue;
        }
        switch (c) {
        case 'b': {
            /* "host:port" and "host" as well as a ZeroMQ endpoint. */
            static char bind[RDZV_MAX_NAME + 16];
            if (rdzv_endpoint_normalize(optarg, bind, sizeof bind) < 0) {
                fprintf(stderr, "rdzvd: --bind must be tcp://HOST:PORT, HOST:PORT or HOST "
                        "(port %d), not '%s'\n", RDZV_DEFAULT_PORT, optarg);
                rc = -1;
            }
            o->bind = bind;
            o->bind_given = true;
            break;
        }
        case 's': o->cfg.state_dir = optarg; break;
        case 'p': rc = s_int_arg("--port-base", optarg, 1, 65535, &o->cfg.port_base); break;
        case 'k': rc = s_int_arg("--ports-per-rank", optarg, RDZV_MIN_PORTS_PER_RANK, 4096, &o->cfg.ports_per_rank); break;
        case 'l': rc = s_int_arg("--port-limit", optarg, 2, 65536, &o->cfg.port_limit); break;
        case 'w': rc = s_int_arg("--max-world", optarg, 1, 1 << 24, &o->cfg.max_world); break;
        case 'd': rc = s_int_arg("--dead-after", optarg, 1, 86400, &dead_after); break;
        case 't': rc = s_int_arg("--nccl-root-timeout", optarg, 1, 86400, &o->cfg.nccl_root_timeout_s); break;
        case 'n': o->cfg.nccl_helper = optarg; break;
        case 'N': o->no_nccl = true; break;
        case 'F': o->cfg.do_fsync = false; break;
        case 'R': o->cfg.repair = true; break;
        case 'e': o->endpoint_file = optarg; break;
        case 'H': o->http = optarg; break;
        case 'A': o->http_token_file = optarg; break;
        case 'C': o->security.curve_secret = optarg; break;
        case 'L': o->security.clients_dir = optarg; break;
        case 'T': o->token_file = optarg; break;
        case 'Z': o->cfg.tokens_dir = optarg; break;
        case 'I': o->insecure_bind_any = true; break;
        case 'O':
            rc = s_int_arg("--peer-timeout", optarg, 1, 3600, &o->security.peer_timeout_ms);
            o->security.peer_timeout_ms *= 1000;
            break;
        case 'c': {
            int n = 0;
            rc = s_int_arg("--max-connections", optarg, 1, 1 << 30, &n);
            o->security.max_connections = n;
            break;
        }
        case 'i': rc = s_int_arg("--io-threads", optarg, 1, 64, &o->io_threads); break;
        case 'S': rc = s_int_arg("--shards", optarg, 1, RDZV_MAX_SHARDS, &o->shards); break;
        case 'Q': rc = s_int_arg("--listeners", optarg, 1, RDZV_MAX_LISTENERS, &o->listeners); break;
        case 'f':
            if (strcmp(optarg, "json") != 0 && strcmp(optarg, "text") != 0) {
                fprintf(stderr, "rdzvd: --log-format must be text or json, not \"%s\"\n", optarg);
                return -1;
            }
            rdzv_log_set_json(strcmp(optarg, "json") == 0);
            break;
        case 1012: rc = s_log_level(optarg); break;
        case 'M': rc = s_int_arg("--compact-mib", optarg, 0, 1 << 20, &compact_mib); break;
        case 'G': rc = s_int_arg("--max-groups", optarg, 1, 1 << 24, &o->cfg.limits.max_groups); break;
        case 'K': rc = s_int_arg("--max-kv-mib", optarg, 1, 1 << 16, &kv_mib); break;
        case 'X': rc = s_int_arg("--max-ranks", optarg, 1, INT_MAX, &max_ranks); break;
        case 'Y': rc = s_int_arg("--forming-ttl", optarg, 0, 30 * 86400, &forming_ttl); break;
        case 'J': rc = s_int_arg("--max-kv-total-mib", optarg, 1, 1 << 20, &kv_total_mib); break;
        case 1007: rc = s_int_arg("--max-member-mib", optarg, 1, 1 << 20, &member_mib); break;
        case 'W': rc = s_int_arg("--max-waits", optarg, 1, 1 << 28, &o->cfg.limits.max_waits); break;
        case 'P': rc = s_int_arg("--max-rps", optarg, -1, 1 << 24, &o->cfg.limits.max_rps); break;
        case 1006: o->advertise = optarg; break;
        case 1008: rc = s_router_allow(o, optarg); break;
        case 1009: o->router.token_file = optarg; break;
        case 1010: rc = s_int_arg("--router-interval", optarg, 1, 3600, &o->router.interval_ms);
            o->router.interval_ms *= 1000;
            break;
        case 1011: rc = s_int_arg("--router-drain", optarg, 0, 86400, &o->router.drain_s); break;
        case 'h': s_usage(stdout); exit(0);
        case 'V': printf("rdzvd %s\n", RDZV_VERSION_STRING); exit(0);
        default: s_usage(stderr); return -1;
        }
        if (rc < 0)
            return -1;
    }
    if (o->token_file && o->cfg.tokens_dir) {
        fprintf(stderr, "rdzvd: --group-token (one token for every group) and --tokens (one "
                "per group) exclude each other\n");
        return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "rdzvd: unexpected argument \"%s\" (see --help)\n", argv[optind]);
        return -1;
    }
    if (rdzv_journal_opts_done(&o->journal, o->advertise != NULL, &o->cfg.journal_remote,
                               err, sizeof err) < 0) {
        fprintf(stderr, "rdzvd: %s\n", err);
        return -1;
    }
    o->cfg.dead_after_ms = (int64_t) dead_after * 1000;
    o->cfg.compact_bytes = (uint64_t) compact_mib << 20;
    o->cfg.limits.max_kv_bytes = (uint64_t) kv_mib << 20;
    o->cfg.limits.max_kv_total_bytes = (uint64_t) kv_total_mib << 20;
    o->cfg.limits.max_member_bytes = (uint64_t) member_mib << 20;
    o->cfg.limits.max_ranks = max_ranks;
    o->cfg.forming_ttl_ms = (int64_t) forming_ttl * 1000;
    return 0;
}

/* Ports the kernel picks for port-0 binds must never land in a plan. */
static int s_check_range(const rdzv_config_t *cfg)
{
    if (cfg->port_base + cfg->ports_per_rank > cfg->port_limit) {
        fprintf(stderr, "rdzvd: --port-base %d + --ports-per-rank %d exceeds --port-limit %d\n",
                cfg->port_base, cfg->ports_per_rank, cfg->port_limit);
        return -1;
    }
    /* vLLM takes five ports of its scan and more for its workers; a plan
     * shorter than RDZV_PROBE_OFFSET + 2 also puts the probe pool inside
     * the ten ports from VLLM_DP_MASTER_PORT that vLLM's get_open_port()
     * skips (common/rdzv_proto.h). */
    if (cfg->ports_per_rank < 16)
        fprintf(stderr, "rdzvd: warning: --ports-per-rank %d is under 16; a plan holds the store, "
                "DP RPC and API ports and probes from port %d of it, and vLLM's scans would leave "
                "it\n", cfg->ports_per_rank, rdzv_probe_offset(cfg->ports_per_rank));
    FILE *f = fopen(S_EPHEMERAL_FILE, "r");
    int lo = 0, hi = 0;
    if (!f || fscanf(f, "%d %d", &lo, &hi) != 2) {
        if (f)
            fclose(f);
        fprintf(stderr, "rdzvd: warning: cannot read %s; not checking the range\n",
                S_EPHEMERAL_FILE);
        return 0;
    }
    fclose(f);
    if (cfg->port_limit > lo && cfg->port_base <= hi) {
        fprintf(stderr, "rdzvd: managed range [%d, %d) overlaps the kernel's ephemeral range "
                "[%d, %d] (%s); lower --port-limit to %d or move the ephemeral range\n",
                cfg->port_base, cfg->port_limit, lo, hi, S_EPHEMERAL_FILE, lo);
        return -1;
    }
    return 0;
}

static bool s_is_loopback(const char *host)
{
    return strncmp(host, "127.", 4) == 0 || strcmp(host, "localhost") == 0
           || strcmp(host, "[::1]") == 0 || strcmp(host, "::1") == 0;
}

/* Without CURVE anyone who reaches the port can join any group, so one rule:
 * without keys rdzvd serves loopback only unless --insecure-bind-any says
 * otherwise. The default endpoint then becomes its loopback twin; a --bind
 * the user typed is never changed behind their back, so a non-loopback one
 * (a wildcard as much as an address) is refused. */
static int s_open_bind(const s_options_t *o, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s", o->bind);
    if (o->security.curve_secret || strncmp(o->bind, "tcp://", 6) != 0)
        return 0;
    const char *host = o->bind + 6;
    const char *colon = strrchr(host, ':');
    char name[256];
    snprintf(name, sizeof name, "%.*s", colon ? (int) (colon - host) : 0, host);
    if (colon && !o->insecure_bind_any && !s_is_loopback(name)) {
        if (o->bind_given) {
            fprintf(stderr, "rdzvd: NO CURVE KEYS: without keys rdzvd serves loopback only; "
                    "refusing --bind %s. Give --curve-secret and --clients, or "
                    "--insecure-bind-any to serve it anyway\n", o->bind);
            return -1;
        }
        snprintf(out, outlen, "tcp://127.0.0.1%s", colon);
    }
    rdzv_core_log("open", "NO CURVE KEYS: anyone who reaches rdzvd can join any group; %s (%s)",
                  o->insecure_bind_any ? "serving as asked (--insecure-bind-any)"
                                       : "without keys rdzvd serves loopback only", out);
    return 0;
}

/* Half the usable CPUs (cpus.h: affinity and a cgroup CPU limit), 2 to 8
 * (main gives them twice as many I/O threads, up to the CPUs): on the
 * 16-core device 8 shards beat 4, and 16 I/O threads beat 8, at 1024, 4096
 * and 16384 ranks (docs/notes/performance-history.md). With one CPU there is nothing to
 * spread. */
static int s_default_shards(const char *endpoint, int cpus)
{
    if (!rdzv_listen_shardable(endpoint) || cpus < 2)
        return 1;
    int half = cpus / 2;
    return half < 2 ? 2 : half > 8 ? 8 : half;
}

static char *s_read_token(const char *path, const char *flag)
{
    char *token = rdzv_read_token_file(path);
    if (!token)
        fprintf(stderr, "rdzvd: cannot read a token from %s (%s)\n", path, flag);
    return token;
}

static void s_write_endpoint(const char *path, const char *endpoint)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f && fprintf(f, "%s\n", endpoint) > 0 && fclose(f) == 0)
        rename(tmp, path);
    else if (f)
        fclose(f);
}

/* What a standby names to clients as this rdzvd's address: --advertise,
 * else the bound endpoint, where a wildcard address becomes the host name
 * (a Pod's resolves to its IP). */
static void s_advertise(const s_options_t *o, const char *bound, char *buf, size_t len)
{
    if (o->advertise) {
        snprintf(buf, len, "%s", o->advertise);
        return;
    }
    const char *colon = strrchr(bound, ':');
    char host[256];
    bool wildcard = strncmp(bound, "tcp://0.0.0.0:", 14) == 0 || strncmp(bound, "tcp://*:", 8) == 0
                    || strncmp(bound, "tcp://[::]:", 11) == 0;
    if (wildcard && colon && gethostname(host, sizeof host) == 0) {
        host[sizeof host - 1] = '\0';
        snprintf(buf, len, "tcp://%s%s", host, colon);
    } else {
        snprintf(buf, len, "%s", bound);
    }
}

/* The start line's word on who may talk to rdzvd: CURVE and the keys
 * --clients held, the request token's mode, and whether HTTP wants one. */
static void s_guards(const s_options_t *o, int client_keys, char *buf, size_t len)
{
    char curve[48] = "curve=off";
    if (client_keys >= 0)
        snprintf(curve, sizeof curve, "curve=on client_keys=%d", client_keys);
    snprintf(buf, len, "%s token=%s http_token=%s", curve,
             o->token_file ? "group" : o->cfg.tokens_dir ? "per-group" : "none",
             o->http_token_file ? "yes" : "no");
}

/* Whether groups get server-made NCCL IDs: by default, only when a join
 * asks (--no-nccl), or never (no helper); the helper only where it runs. */
static void s_nccl(const rdzv_config_t *cfg, char *buf, size_t len)
{
    if (!cfg->nccl_helper)
        snprintf(buf, len, "nccl=none");
    else
        snprintf(buf, len, "nccl=%s nccl_helper=%s",
                 cfg->nccl_default ? "default" : "on-request", cfg->nccl_helper);
}

int main(int argc, char **argv)
{
    /* A burst of joins writes a log line each; the loop flushes per batch.
     * setvbuf must come before anything is written to the stream. */
    setvbuf(stderr, NULL, _IOFBF, 1 << 16);
    /* Every connection costs libzmq ~28 KiB of fresh heap; growing the heap
     * 64 MiB at a time instead of a page range at a time took 12 % off
     * rdzvd's CPU per rank on the device. Untouched pages cost no RSS. */
    mallopt(M_TOP_PAD, 64 << 20);
    long fds = rdzv_fds_raise();
    /* A release's outbox (~330 bytes per rank) and the journal's buffer
     * would each be a fresh mmap and munmap past glibc's fixed 128 KiB
     * threshold (fixed once M_TOP_PAD is set): page faults on every
     * release and a TLB shoot-down across every thread when it goes. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    s_options_t o = {
        .router = { .interval_ms = 1000, .drain_s = 20 },
        .cfg = { .port_base = RDZV_DEFAULT_PORT_BASE, .ports_per_rank = RDZV_DEFAULT_PORTS_PER_RANK,
                 .port_limit = RDZV_DEFAULT_PORT_LIMIT, .max_world = RDZV_DEFAULT_MAX_WORLD,
                 .do_fsync = true, .nccl_root_timeout_s = 600, .state_dir = "./rdzv-state" },
        .bind = RDZV_DEFAULT_BIND,
    };
    if (s_parse(argc, argv, &o) < 0 || s_check_range(&o.cfg) < 0)
        return 2;
    /* Past --help and --version rdzvd writes only its log, on stderr. czmq
     * prints some errors on stdout whatever it is told (zconfig's, for a
     * file in --clients that is no certificate): they join the log. */
    fflush(stdout);
    dup2(STDERR_FILENO, STDOUT_FILENO);
#ifdef RDZV_HAVE_NCCL
    if (!o.cfg.nccl_helper)
        o.cfg.nccl_helper = s_default_helper();
#else
    (void) s_default_helper;
    o.cfg.nccl_helper = NULL;
#endif
    o.cfg.nccl_default = o.cfg.nccl_helper && !o.no_nccl;
    char err[512], bind[512];
    char *token = NULL, *http_token = NULL;
    if (s_open_bind(&o, bind, sizeof bind) < 0
        || (o.token_file && !(token = s_read_token(o.token_file, "--group-token")))
        || (o.http_token_file && !(http_token = s_read_token(o.http_token_file, "--http-token"))))
        return 2;
    o.cfg.group_token = token;
    int cpus = rdzv_cpus_usable();
    int shards = o.shards ? o.shards : s_default_shards(bind, cpus);
    /* Listeners hold the connect burst (each queue is capped by somaxconn):
     * at 16384 ranks here 2 listeners overflowed 634-2485 times, 8 never. */
    int listeners = o.listeners ? o.listeners
                    : !rdzv_listen_shardable(bind) ? 1 : shards > 8 ? shards : 8;
    int io_threads = o.io_threads ? o.io_threads
                     : 2 * shards < cpus ? 2 * shards : cpus;
    zsys_set_io_threads((size_t) io_threads);
    /* Up before the replay: /healthz answers and /readyz says 503 meanwhile. */
    rdzv_http_t *http = NULL;
    if (o.http && !(http = rdzv_http_new(o.http, http_token, err, sizeof err))) {
        fprintf(stderr, "rdzvd: %s\n", err);
        return 1;
    }
    free(http_token);
    if (o.http && !o.http_token_file && !rdzv_http_is_loopback(o.http))
        rdzv_core_log("open", "--http %s serves /metrics and /v1/groups (every group's hosts "
                      "and ports) to anyone who reaches it; give --http-token FILE", o.http);
    rdzv_core_t *core = rdzv_core_new(&o.cfg, err, sizeof err);
    if (!core) {
        fprintf(stderr, "rdzvd: %s\n", err);
        free(token);
        rdzv_http_destroy(&http);
        return 1;
    }
    rdzv_server_t *server = rdzv_server_new(core, bind, shards, listeners, &o.security, err, sizeof err);
    if (!server) {
        fprintf(stderr, "rdzvd: %s\n", err);
        rdzv_core_destroy(&core);
        free(token);
        rdzv_http_destroy(&http);
        return 1;
    }
    char advertise[RDZV_MAX_NAME + 64];
    s_advertise(&o, rdzv_server_endpoint(server), advertise, sizeof advertise);
    const rdzv_journal_remote_t *remote = o.cfg.journal_remote;
    if (remote && rdzv_core_campaign(core, advertise, err, sizeof err) < 0) {
        fprintf(stderr, "rdzvd: %s: %s\n", rdzv_journal_remote_name(remote), err);
        rdzv_server_destroy(&server);
        rdzv_core_destroy(&core);
        free(token);
        rdzv_http_destroy(&http);
        return 1;
    }
    rdzv_http_set_core(http, core);
    if (http)
        rdzv_core_log("http", "port=%d", rdzv_http_port(http));
    char guards[160], nccl[PATH_MAX + 64];
    s_guards(&o, rdzv_server_client_keys(server), guards, sizeof guards);
    s_nccl(&o.cfg, nccl, sizeof nccl);
    rdzv_core_log("start", "version=%s endpoint=%s shards=%d listeners=%d io_threads=%d state=%s "
                  "open_files=%ld max_connections=%ld ports=[%d,%d) per_rank=%d %s %s",
                  RDZV_VERSION_STRING, rdzv_server_endpoint(server), shards, listeners, io_threads,
                  remote ? rdzv_journal_remote_name(remote) : o.cfg.state_dir, fds, rdzv_server_max_connections(server),
                  o.cfg.port_base, o.cfg.port_limit, o.cfg.ports_per_rank, guards, nccl);
    /* The log first: whoever waits for the endpoint file (a test, a probe)
     * then finds the start-up lines, a torn journal's among them. */
    fflush(stderr);
    if (o.endpoint_file)
        s_write_endpoint(o.endpoint_file, rdzv_server_endpoint(server));
    rdzv_router_t *router = NULL;
    o.router.allow = o.cfg.router_allow;
    o.router.nallow = o.cfg.nrouter_allow;
    if (o.cfg.nrouter_allow > 0 && !(router = rdzv_router_start(core, &o.router, err, sizeof err)))
        rdzv_core_log("router", "not started: %s", err);
    rdzv_server_run(server);
    rdzv_core_log("stop", "signal received; exiting");
    rdzv_router_stop(&router);
    rdzv_http_destroy(&http);
    rdzv_server_destroy(&server);
    rdzv_core_destroy(&core);
    free(token);
    return 0;
}
