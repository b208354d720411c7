/* rdzv-bench: N simulated ranks join a real rdzvd on loopback; prints one
 * JSON object. See docs/performance.md.
 *
 *   rdzv-bench --rdzvd PATH [--ranks N] [--processes P] [--simulator lean|librdzv]
 *              [--groups G] [--preload K] [--fsync on|off] [--floor] [--zmq-floor] [--no-rdzv]
 *              [--members] [--timeout SEC] [--perf FILE] [--rdzvd-arg ARG]...
 *
 * Timeline of one run: rdzvd is spawned (fresh state directory), K groups of
 * world 1 are preloaded, then P worker processes get ready (threads created,
 * requests formatted) and are released together at t0. Each rank connects,
 * joins and reads its assignment; the workers keep their connections open
 * until rdzvd's memory and CPU have been read. */
#include "bench.h"
#include "rdzv.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    const char *rdzvd;
    int ranks;
    int processes;
    const char *simulator;   /* "lean" or "librdzv" */
    int groups;
    int preload;
    bool fsync;
    bool floor;
    bool zmq_floor;
    bool rdzv;
    int window;
    int straggler_ms;
    bool members;
    bool busy_poll;
    int timeout_s;
    const char *perf;
    const char *rdzvd_log;   /* append rdzvd's output here (else a temp file) */
    const char *extra[16];
    int nextra;
    size_t floor_reply;
    int floor_threads;
    bench_zmq_shape_t zmq;   /* the libzmq floor's; 0s: rdzvd's defaults */
} s_opts_t;

typedef struct {
    double cpu_s;
    double rss_mib, hwm_mib;
} s_procstat_t;

static void s_usage(FILE *f)
{
    fprintf(f,
        "usage: rdzv-bench --rdzvd PATH [options]\n"
        "  --ranks N           simulated ranks (default 4096)\n"
        "  --processes P       worker processes (default: online CPUs)\n"
        "  --simulator S       lean (ZMTP over epoll, default) or librdzv (a client per thread)\n"
        "  --groups G          split the ranks into G groups of N/G (default 1)\n"
        "  --preload K         rdzvd already holds K complete groups (world 1) before t0\n"
        "  --fsync on|off      rdzvd's journal fsync (default on)\n"
        "  --floor             also time the floor: a bare epoll server, same N connections\n"
        "  --floor-threads T   the floor answers with T threads, a slice each (default 1)\n"
        "  --zmq-floor         also time the libzmq floor: a bare ROUTER server in rdzvd's shape\n"
        "                      (shards, I/O threads, listeners, socket options), same N\n"
        "                      connections, one fixed reply each: libzmq's own cost\n"
        "  --zmq-floor-shards S, --zmq-floor-io-threads T\n"
        "                      the libzmq floor's ROUTERs and I/O threads (default: rdzvd's\n"
        "                      defaults here; listeners as rdzvd's, max(8, S))\n"
        "  --no-rdzv           only the floor(s)\n"
        "  --straggler MS      hold the last rank back MS ms after the others (isolates the\n"
        "                      release: last join to every assignment, no queue ahead of it)\n"
        "  --window W          lean: at most W connections per process awaiting the server's\n"
        "                      greeting (default 0: all at once, as real ranks do)\n"
        "  --members           ask for the members list (default: \"members\":false)\n"
        "  --busy-poll         lean: workers spin instead of sleeping in epoll_wait (on loopback\n"
        "                      the server's send pays for waking a sleeping rank)\n"
        "  --timeout SEC       give up after SEC (default 120)\n"
        "  --perf FILE         perf record -g the rdzvd process during the run into FILE\n"
        "  --rdzvd-arg ARG     pass ARG to rdzvd (repeatable)\n"
        "  --rdzvd-log FILE    append rdzvd's log to FILE (release_trace.py reads it)\n");
}

static int s_parse(int argc, char **argv, s_opts_t *o)
{
    static const struct option lo[] = {
        { "rdzvd", required_argument, 0, 'd' }, { "ranks", required_argument, 0, 'n' },
        { "processes", required_argument, 0, 'p' }, { "simulator", required_argument, 0, 's' },
        { "groups", required_argument, 0, 'g' }, { "preload", required_argument, 0, 'k' },
        { "fsync", required_argument, 0, 'f' }, { "floor", no_argument, 0, 'F' },
        { "no-rdzv", no_argument, 0, 'R' }, { "zmq-floor", no_argument, 0, 'Z' },
        { "window", required_argument, 0, 'W' }, { "straggler", required_argument, 0, 'S' }, { "members", no_argument, 0, 'm' },
        { "timeout", required_argument, 0, 't' }, { "perf", required_argument, 0, 'P' },
        { "rdzvd-arg", required_argument, 0, 'a' }, { "help", no_argument, 0, 'h' },
        { "rdzvd-log", required_argument, 0, 'L' }, { "busy-poll", no_argument, 0, 'B' },
        { "floor-threads", required_argument, 0, 'T' },
        { "zmq-floor-shards", required_argument, 0, 1001 },
        { "zmq-floor-io-threads", required_argument, 0, 1002 },
        { 0, 0, 0, 0 },
    };
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'd': o->rdzvd = optarg; break;
        case 'n': o->ranks = atoi(optarg); break;
        case 'p': o->processes = atoi(optarg); break;
        case 's': o->simulator = optarg; break;
        case 'g': o->groups = atoi(optarg); break;
        case 'k': o->preload = atoi(optarg); break;
        case 'f':
            if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
                fprintf(stderr, "rdzv-bench: --fsync on|off\n");
                return -1;
            }
            o->fsync = !strcmp(optarg, "on");
            break;
        case 'F': o->floor = true; break;
        case 'R': o->rdzv = false; break;
        case 'Z': o->zmq_floor = true; break;
        case 'W': o->window = atoi(optarg); break;
        case 'S': o->straggler_ms = atoi(optarg); break;
        case 'm': o->members = true; break;
        case 't': o->timeout_s = atoi(optarg); break;
        case 'P': o->perf = optarg; break;
        case 'L': o->rdzvd_log = optarg; break;
        case 'B': o->busy_poll = true; break;
        case 'T': o->floor_threads = atoi(optarg); break;
        case 1001: o->zmq.shards = atoi(optarg); break;
        case 1002: o->zmq.io_threads = atoi(optarg); break;
        case 'a':
            if (o->nextra >= 16)
                return -1;
            o->extra[o->nextra++] = optarg;
            break;
        case 'h': s_usage(stdout); exit(0);
        default: s_usage(stderr); return -1;
        }
    }
    if (o->ranks < 1 || o->processes < 1 || o->groups < 1 || o->ranks % o->groups
        || o->preload < 0 || o->timeout_s < 1 || o->floor_threads < 1 || o->floor_threads > 64
        || (strcmp(o->simulator, "lean") && strcmp(o->simulator, "librdzv"))
        || (o->rdzv && !o->rdzvd) || (!o->rdzv && !o->floor && !o->zmq_floor)) {
        fprintf(stderr, "rdzv-bench: bad options (ranks must divide into groups; --rdzvd is "
                        "required)\n");
        s_usage(stderr);
        return -1;
    }
    if (o->processes > o->ranks)
        o->processes = o->ranks;
    bench_zmq_shape_t dflt;
    bench_zmq_shape_default(&dflt);
    if (o->zmq.shards < 1 || o->zmq.shards > 64)
        o->zmq.shards = dflt.shards;
    if (o->zmq.io_threads < 1 || o->zmq.io_threads > 64)
        o->zmq.io_threads = dflt.io_threads;
    o->zmq.listeners = o->zmq.shards > 8 ? o->zmq.shards : 8;
    return 0;
}

/* ---- rdzvd as a child ---------------------------------------------------- */

static int s_procstat(pid_t pid, s_procstat_t *ps)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    /* After ") ": state(3) ... utime(14) stime(15). */
    unsigned long ut = 0, st = 0;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    ps->cpu_s = (double) (ut + st) / (double) sysconf(_SC_CLK_TCK);
    /* Nanoseconds on CPU of every live thread, finer than clock ticks. */
    double ns = 0;
    int tasks = 0;
    snprintf(path, sizeof path, "/proc/%d/task", (int) pid);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char tp[300];
        snprintf(tp, sizeof tp, "/proc/%d/task/%s/schedstat", (int) pid, e->d_name);
        FILE *tf = fopen(tp, "r");
        unsigned long long run = 0;
        if (tf) {
            if (fscanf(tf, "%llu", &run) == 1) {
                ns += (double) run;
                tasks++;
            }
            fclose(tf);
        }
    }
    if (d)
        closedir(d);
    if (tasks)
        ps->cpu_s = ns / 1e9;
    snprintf(path, sizeof path, "/proc/%d/status", (int) pid);
    f = fopen(path, "r");
    if (!f)
        return -1;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        long kb;
        if (sscanf(line, "VmRSS: %ld", &kb) == 1)
            ps->rss_mib = kb / 1024.0;
        else if (sscanf(line, "VmHWM: %ld", &kb) == 1)
            ps->hwm_mib = kb / 1024.0;
    }
    fclose(f);
    return 0;
}

static int s_ephemeral_low(void)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    int lo = 0, hi = 0;
    if (f) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2)
            lo = 0;
        fclose(f);
    }
    return lo;
}

static pid_t s_spawn_rdzvd(const s_opts_t *o, const char *dir, int *port)
{
    char ep_file[PATH_MAX], state[PATH_MAX], log[PATH_MAX], limit[32];
    snprintf(ep_file, sizeof ep_file, "%s/endpoint", dir);
    snprintf(state, sizeof state, "%s/state", dir);
    snprintf(log, sizeof log, "%s/rdzvd.log", dir);
    const char *argv[48];
    int a = 0;
    argv[a++] = o->rdzvd;
    argv[a++] = "--bind";
    argv[a++] = "tcp://127.0.0.1:*";
    argv[a++] = "--endpoint-file";
    argv[a++] = ep_file;
    argv[a++] = "--state-dir";
    argv[a++] = state;
    argv[a++] = "--no-nccl";
    if (!o->fsync)
        argv[a++] = "--no-fsync";
    /* rdzvd refuses a managed range that overlaps the kernel's ephemeral
     * ports; machines differ. */
    int lo = s_ephemeral_low();
    if (lo > 19500 + 32 && lo < 32768) {
        snprintf(limit, sizeof limit, "%d", lo);
        argv[a++] = "--port-limit";
        argv[a++] = limit;
    }
    for (int i = 0; i < o->nextra; i++)
        argv[a++] = o->extra[i];
    argv[a] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        int fd = o->rdzvd_log ? open(o->rdzvd_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)
                              : open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, 2);
            dup2(fd, 1);
        }
        execv(o->rdzvd, (char *const *) argv);
        perror("exec rdzvd");
        _exit(127);
    }
    if (pid < 0)
        return -1;
    for (int i = 0; i < 1000; i++) {
        FILE *f = fopen(ep_file, "r");
        if (f) {
            char ep[256] = "";
            char *ok = fgets(ep, sizeof ep, f);
            fclose(f);
            char *colon = ok ? strrchr(ep, ':') : NULL;
            if (colon) {
                *port = atoi(colon + 1);
                return pid;
            }
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            fprintf(stderr, "rdzv-bench: rdzvd exited at start (log: %s)\n", log);
            return -1;
        }
        usleep(10000);
    }
    fprintf(stderr, "rdzv-bench: rdzvd wrote no endpoint file (log: %s)\n", log);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static void s_stop(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    for (int i = 0; i < 300; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void s_rmtree(const char *dir)
{
    pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", dir, (char *) NULL);
        _exit(127);
    }
    if (pid > 0)
        waitpid(pid, NULL, 0);
}

/* ---- the librdzv simulator ----------------------------------------------- */

typedef struct {
    const char *endpoint;
    int global;
    int group_size;
    const char *group_prefix;
    int timeout_ms;
    bench_rank_t *out;
    pthread_barrier_t *go;
    rdzv_client_t *client;
} s_thread_arg_t;

static void *s_librdzv_rank(void *p)
{
    s_thread_arg_t *t = p;
    char group[64], node[64], host[32], err[256];
    bench_rank_host(t->global, host, sizeof host);
    snprintf(group, sizeof group, "%s%d", t->group_prefix, t->global / t->group_size);
    snprintf(node, sizeof node, "n%d", t->global);
    pthread_barrier_wait(t->go);
    bench_rank_t *r = &t->out[t->global];
    r->t_connect = r->t_sent = bench_now_ns();
    t->client = rdzv_client_new(t->endpoint, NULL, err, sizeof err);
    if (!t->client) {
        fprintf(stderr, "rank %d: %s\n", t->global, err);
        return NULL;
    }
    rdzv_join_args_t args = { .group = group, .world = t->group_size,
                              .rank = t->global % t->group_size, .host = host,
                              .node = node, .timeout_ms = t->timeout_ms, .nccl_id = "none" };
    rdzv_assignment_t *as = NULL;
    int rc = rdzv_join(t->client, &args, &as);
    r->t_recv = bench_now_ns();
    if (rc == 0 && as && rdzv_assignment_rank(as) == args.rank
        && rdzv_assignment_port_count(as) > 0) {
        r->ok = 1;
        r->port = rdzv_assignment_port(as, 0);
    } else if (getenv("RDZV_BENCH_DEBUG"))
        fprintf(stderr, "rank %d: %s\n", t->global, rdzv_client_error(t->client));
    rdzv_assignment_destroy(&as);
    return NULL;
}

/* ---- workers --------------------------------------------------------------- */

typedef struct {
    int ready[2], go[2], done[2], quit[2];
} s_sync_t;

enum { MODE_RDZV, MODE_FLOOR, MODE_ZMQ };

static void s_worker(const s_opts_t *o, int w, int port, int mode, bench_rank_t *out,
                     s_sync_t *sy)
{
    /* Only the parent writes go and quit: EOF on quit must reach us. */
    close(sy->go[1]);
    close(sy->quit[1]);
    close(sy->ready[0]);
    close(sy->done[0]);
    size_t count = 0;
    int *ranks = malloc(sizeof(int) * ((size_t) o->ranks / (size_t) o->processes + 1));
    int held = o->straggler_ms > 0 && o->ranks > 1 ? o->ranks - 1 : -1;
    if (w == o->processes) {             /* the straggler's own process */
        ranks[count++] = held;
    } else {
        for (int i = w; i < o->ranks; i += o->processes)
            if (i != held)
                ranks[count++] = i;
    }
    int gsize = o->ranks / o->groups;
    char c = 0;
    if (mode != MODE_RDZV || !strcmp(o->simulator, "lean")) {
        bench_lean_job_t job = {
            .wire = mode == MODE_FLOOR ? WIRE_RAW : WIRE_ZMTP, .port = port, .ranks = ranks,
            .window = o->window, .busy_poll = o->busy_poll, .any_reply = mode == MODE_ZMQ,
            .count = count, .group_size = gsize, .group_prefix = "bench", .node_prefix = "n",
            .members = o->members, .timeout_ms = o->timeout_s * 1000, .out = out,
        };
        if (write(sy->ready[1], &c, 1) != 1 || read(sy->go[0], &c, 1) != 1)
            _exit(1);
        if (w == o->processes)
            usleep((useconds_t) o->straggler_ms * 1000);
        bench_lean_run(&job);
        if (write(sy->done[1], &c, 1) != 1 || read(sy->quit[0], &c, 1) < 0)
            _exit(1);
        _exit(0);
    }
    char endpoint[64];
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", port);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned) count + 1);
    s_thread_arg_t *args = calloc(count, sizeof *args);
    pthread_t *th = calloc(count, sizeof *th);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (size_t i = 0; i < count; i++) {
        args[i] = (s_thread_arg_t) { .endpoint = endpoint, .global = ranks[i], .group_size = gsize,
                                     .group_prefix = "bench", .timeout_ms = o->timeout_s * 1000,
                                     .out = out, .go = &go };
        if (pthread_create(&th[i], &attr, s_librdzv_rank, &args[i]) != 0) {
            fprintf(stderr, "rdzv-bench: cannot create thread %zu\n", i);
            _exit(1);
        }
    }
    if (write(sy->ready[1], &c, 1) != 1 || read(sy->go[0], &c, 1) != 1)
        _exit(1);
    pthread_barrier_wait(&go);
    for (size_t i = 0; i < count; i++)
        pthread_join(th[i], NULL);
    if (write(sy->done[1], &c, 1) != 1 || read(sy->quit[0], &c, 1) < 0)
        _exit(1);
    for (size_t i = 0; i < count; i++)
        rdzv_client_destroy(&args[i].client);
    _exit(0);
}

static int s_read_n(int fd, int n, int timeout_s)
{
    int64_t end = bench_now_ns() + (int64_t) timeout_s * 1000000000LL;
    int got = 0;
    char buf[256];
    while (got < n) {
        if (bench_now_ns() > end)
            return got;
        struct timeval tv = { .tv_sec = 0, .tv_usec = 100000 };
        fd_set rs;
        FD_ZERO(&rs);
        FD_SET(fd, &rs);
        if (select(fd + 1, &rs, NULL, NULL, &tv) <= 0)
            continue;
        ssize_t r = read(fd, buf, (size_t) (n - got) < sizeof buf ? (size_t) (n - got) : sizeof buf);
        if (r <= 0)
            return got;
        got += (int) r;
    }
    return got;
}

/* ---- statistics ------------------------------------------------------------ */

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

static double s_pct(const double *sorted, size_t n, double p)
{
    if (!n)
        return 0;
    size_t i = (size_t) (p / 100.0 * (double) (n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

typedef struct {
    size_t assigned;
    double seconds, wall_seconds, connect_spread_s;
    double p50, p99, max, rel_p50, rel_p99, rel_max;
    double rel_user_p50, rel_user_p99, rel_min;
    int64_t last_join_ns;    /* the first group's last join, CLOCK_MONOTONIC */
    bool rel_kernel;         /* release times from the kernel's receive stamps */
    int distinct_ports_bad;
} s_stats_t;

static void s_stats(const bench_rank_t *r, int n, int groups, int64_t t0, s_stats_t *s)
{
    memset(s, 0, sizeof *s);
    int gsize = n / groups;
    double *lat = malloc(sizeof(double) * (size_t) n);
    double *rel = malloc(sizeof(double) * (size_t) n);
    int64_t *last_join = calloc((size_t) groups, sizeof *last_join);
    int64_t first_sent = INT64_MAX, last_recv = 0, last_connect = 0;
    for (int i = 0; i < n; i++) {
        if (r[i].t_sent && r[i].t_sent < first_sent)
            first_sent = r[i].t_sent;
        if (r[i].t_sent > last_join[i / gsize])
            last_join[i / gsize] = r[i].t_sent;
        if (r[i].t_connect > last_connect)
            last_connect = r[i].t_connect;
    }
    double *rel_user = malloc(sizeof(double) * (size_t) n);
    size_t k = 0, stamped = 0;
    for (int i = 0; i < n; i++) {
        if (!r[i].ok)
            continue;
        if (r[i].t_recv > last_recv)
            last_recv = r[i].t_recv;
        lat[k] = (double) (r[i].t_recv - r[i].t_sent) / 1e6;
        rel_user[k] = (double) (r[i].t_recv - last_join[i / gsize]) / 1e6;
        rel[k] = (double) (r[i].t_arrived - last_join[i / gsize]) / 1e6;
        stamped += r[i].t_arrived != 0;
        k++;
    }
    s->assigned = k;
    s->last_join_ns = last_join[0];
    /* Without a stamp on every reply, the release is what the workers saw. */
    s->rel_kernel = k > 0 && stamped == k;
    if (!s->rel_kernel)
        memcpy(rel, rel_user, k * sizeof *rel);
    qsort(lat, k, sizeof *lat, s_cmp_double);
    qsort(rel, k, sizeof *rel, s_cmp_double);
    qsort(rel_user, k, sizeof *rel_user, s_cmp_double);
    if (k) {
        s->seconds = (double) (last_recv - first_sent) / 1e9;
        s->wall_seconds = (double) (last_recv - t0) / 1e9;
        s->p50 = s_pct(lat, k, 50);
        s->p99 = s_pct(lat, k, 99);
        s->max = lat[k - 1];
        s->rel_p50 = s_pct(rel, k, 50);
        s->rel_p99 = s_pct(rel, k, 99);
        s->rel_max = rel[k - 1];
        s->rel_min = rel[0];
        s->rel_user_p50 = s_pct(rel_user, k, 50);
        s->rel_user_p99 = s_pct(rel_user, k, 99);
    }
    free(rel_user);
    s->connect_spread_s = (double) (last_connect - t0) / 1e9;
    free(lat);
    free(rel);
    free(last_join);
}

/* ---- one measured run ------------------------------------------------------- */

/* Runs the workers against port; fills out; server_pid (may be 0) is
 * sampled before the workers close their connections. */
static int s_run(const s_opts_t *o, int port, int mode, pid_t server_pid,
                 bench_rank_t *out, int64_t *t0, s_procstat_t *before, s_procstat_t *after,
                 pid_t *perf_pid)
{
    s_sync_t sy;
    if (pipe(sy.ready) || pipe(sy.go) || pipe(sy.done) || pipe(sy.quit))
        return -1;
    memset(out, 0, sizeof *out * (size_t) o->ranks);
    int nproc = o->processes + (o->straggler_ms > 0 && o->ranks > 1 ? 1 : 0);
    pid_t *pids = calloc((size_t) nproc, sizeof *pids);
    for (int w = 0; w < nproc; w++) {
        pids[w] = fork();
        if (pids[w] == 0)
            s_worker(o, w, port, mode, out, &sy);
        if (pids[w] < 0) {
            perror("fork");
            return -1;
        }
    }
    int ok = 0;
    if (s_read_n(sy.ready[0], nproc, 60) == nproc) {
        if (server_pid > 0)
            s_procstat(server_pid, before);
        if (o->perf && perf_pid && server_pid > 0) {
            char spid[32];
            snprintf(spid, sizeof spid, "%d", (int) server_pid);
            *perf_pid = fork();
            if (*perf_pid == 0) {
                int fd = open("/dev/null", O_WRONLY);
                dup2(fd, 1);
                dup2(fd, 2);
                const char *cg = getenv("RDZV_BENCH_CALL_GRAPH");   /* e.g. dwarf */
                if (cg)
                    execlp("perf", "perf", "record", "--call-graph", cg, "-q", "-o", o->perf,
                           "-p", spid, (char *) NULL);
                else
                    execlp("perf", "perf", "record", "-g", "-q", "-o", o->perf, "-p", spid,
                           (char *) NULL);
                _exit(127);
            }
            usleep(500000);              /* perf attaches */
        }
        char *go = malloc((size_t) nproc);
        memset(go, 'g', (size_t) nproc);
        *t0 = bench_now_ns();
        if (write(sy.go[1], go, (size_t) nproc) != nproc)
            perror("write");
        free(go);
        int done = s_read_n(sy.done[0], nproc, o->timeout_s + 10);
        if (server_pid > 0)
            s_procstat(server_pid, after);
        if (o->perf && perf_pid && *perf_pid > 0) {
            kill(*perf_pid, SIGINT);
            waitpid(*perf_pid, NULL, 0);
            *perf_pid = 0;
        }
        ok = done == nproc;
    }
    close(sy.quit[1]);                   /* workers close their connections */
    for (int w = 0; w < nproc; w++)
        waitpid(pids[w], NULL, 0);
    close(sy.ready[0]); close(sy.ready[1]); close(sy.go[0]); close(sy.go[1]);
    close(sy.done[0]); close(sy.done[1]); close(sy.quit[0]);
    free(pids);
    return ok ? 0 : -1;
}

static int s_preload(const s_opts_t *o, int port)
{
    int done = 0;
    bench_rank_t *out = calloc((size_t) o->preload, sizeof *out);
    int *ranks = malloc(sizeof(int) * (size_t) o->preload);
    for (int i = 0; i < o->preload; i++)
        ranks[i] = i;
    for (int at = 0; at < o->preload; at += 2048) {
        int batch = o->preload - at < 2048 ? o->preload - at : 2048;
        /* A child, so its connections go when it exits. */
        pid_t pid = fork();
        if (pid == 0) {
            bench_lean_job_t job = { .wire = WIRE_ZMTP, .port = port, .ranks = ranks + at,
                                     .count = (size_t) batch, .group_size = 1,
                                     .group_prefix = "preload", .node_prefix = "p",
                                     .members = false, .timeout_ms = o->timeout_s * 1000,
                                     .out = out };
            size_t good = bench_lean_run(&job);
            _exit(good == (size_t) batch ? 0 : 1);
        }
        int st = 1;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) {
            fprintf(stderr, "rdzv-bench: preload failed near group %d\n", at);
            break;
        }
        done += batch;
    }
    free(out);
    free(ranks);
    return done == o->preload ? 0 : -1;
}

int main(int argc, char **argv)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    s_opts_t o = { .ranks = 4096, .processes = online > 0 ? (int) online : 2,
                   .simulator = "lean", .groups = 1, .fsync = true, .rdzv = true,
                   .timeout_s = 120, .floor_reply = 0, .floor_threads = 1 };
    if (s_parse(argc, argv, &o) < 0)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    long nofile = bench_raise_nofile();
    bench_rank_t *out = mmap(NULL, sizeof(bench_rank_t) * (size_t) o.ranks,
                             PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (out == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    int rc = 0;
    s_stats_t st = { 0 }, fl = { 0 };
    s_procstat_t before = { 0 }, after = { 0 }, idle = { 0 };
    s_procstat_t fbefore = { 0 }, fafter = { 0 };
    int64_t t0 = 0;
    if (o.rdzv) {
        char dir[] = "/tmp/rdzv-bench-XXXXXX";
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            return 1;
        }
        int port = 0;
        pid_t srv = s_spawn_rdzvd(&o, dir, &port);
        if (srv < 0) {
            s_rmtree(dir);
            return 1;
        }
        if (o.preload && s_preload(&o, port) < 0)
            rc = 1;
        s_procstat(srv, &idle);
        pid_t perf_pid = 0;
        if (s_run(&o, port, MODE_RDZV, srv, out, &t0, &before, &after, &perf_pid) < 0) {
            fprintf(stderr, "rdzv-bench: not every worker finished (timeout %d s)\n", o.timeout_s);
            rc = 1;
        }
        s_stats(out, o.ranks, o.groups, t0, &st);
        s_stop(srv);
        if (st.assigned != (size_t) o.ranks)
            rc = 1;
        if (rc)
            fprintf(stderr, "rdzv-bench: %zu of %d ranks assigned; rdzvd's log and state kept "
                            "in %s\n", st.assigned, o.ranks, dir);
        else
            s_rmtree(dir);
    }
    if (o.floor) {
        int port = 0;
        pid_t fsrv = bench_floor_spawn((size_t) o.ranks, BENCH_FLOOR_REPLY_BYTES, o.floor_threads, &port);
        if (fsrv < 0) {
            perror("floor");
            return 1;
        }
        int64_t ft0 = 0;
        if (s_run(&o, port, MODE_FLOOR, fsrv, out, &ft0, &fbefore, &fafter, NULL) < 0)
            rc = 1;
        s_stats(out, o.ranks, 1, ft0, &fl);
        s_stop(fsrv);
        if (fl.assigned != (size_t) o.ranks)
            rc = 1;
    }
    s_stats_t zs = { 0 };
    s_procstat_t zbefore = { 0 }, zafter = { 0 }, zidle = { 0 };
    if (o.zmq_floor) {
        int port = 0;
        pid_t zsrv = bench_zmq_floor_spawn((size_t) o.ranks, BENCH_FLOOR_REPLY_BYTES, &o.zmq, &port);
        if (zsrv < 0) {
            perror("zmq floor");
            return 1;
        }
        usleep(20000);
        s_procstat(zsrv, &zidle);
        int64_t zt0 = 0;
        if (s_run(&o, port, MODE_ZMQ, zsrv, out, &zt0, &zbefore, &zafter, NULL) < 0)
            rc = 1;
        s_stats(out, o.ranks, 1, zt0, &zs);
        s_stop(zsrv);
        if (zs.assigned != (size_t) o.ranks)
            rc = 1;
    }
    int somaxconn = 0;
    FILE *sf = fopen("/proc/sys/net/core/somaxconn", "r");
    if (sf) {
        if (fscanf(sf, "%d", &somaxconn) != 1)
            somaxconn = 0;
        fclose(sf);
    }
    printf("{\"ranks\":%d,\"processes\":%d,\"simulator\":\"%s\",\"groups\":%d,\"preload\":%d,"
           "\"fsync\":%s,\"members\":%s,\"busy_poll\":%s,\"window\":%d,\"straggler_ms\":%d,\"nofile\":%ld,\"somaxconn\":%d",
           o.ranks, o.processes, o.simulator, o.groups, o.preload, o.fsync ? "true" : "false",
           o.members ? "true" : "false", o.busy_poll ? "true" : "false", o.window, o.straggler_ms, nofile, somaxconn);
    if (o.rdzv) {
        double cpu = after.cpu_s - before.cpu_s;
        printf(",\"assigned\":%zu,\"seconds\":%.4f,\"wall_seconds\":%.4f,"
               "\"connect_spread_s\":%.4f,"
               "\"release_min_ms\":%.3f,\"release_p50_ms\":%.3f,\"release_p99_ms\":%.3f,"
               "\"release_max_ms\":%.3f,\"last_join_sent_ns\":%lld,\"release_clock\":\"%s\",\"release_user_p50_ms\":%.3f,\"release_user_p99_ms\":%.3f,"
               "\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,"
               "\"server_rss_mib\":%.2f,\"server_hwm_mib\":%.2f,\"server_idle_rss_mib\":%.2f,"
               "\"server_cpu_s\":%.3f,\"server_cpu_us_per_rank\":%.1f,"
               "\"server_kib_per_rank\":%.2f",
               st.assigned, st.seconds, st.wall_seconds, st.connect_spread_s,
               st.rel_min, st.rel_p50, st.rel_p99, st.rel_max, (long long) st.last_join_ns,
               st.rel_kernel ? "kernel" : "user",
               st.rel_user_p50, st.rel_user_p99, st.p50, st.p99, st.max,
               after.rss_mib, after.hwm_mib, idle.rss_mib, cpu, cpu * 1e6 / o.ranks,
               (after.rss_mib - idle.rss_mib) * 1024.0 / o.ranks);
    }
    if (o.floor)
        printf(",\"floor_assigned\":%zu,\"floor_seconds\":%.4f,\"floor_join_seconds\":%.4f,"
               "\"floor_p99_ms\":%.3f,\"floor_threads\":%d,\"floor_release_min_ms\":%.3f,\"floor_release_p50_ms\":%.3f,"
               "\"floor_release_p99_ms\":%.3f,\"floor_server_cpu_s\":%.3f,\"floor_server_rss_mib\":%.2f",
               fl.assigned, fl.wall_seconds, fl.seconds, fl.p99, o.floor_threads, fl.rel_min, fl.rel_p50, fl.rel_p99,
               fafter.cpu_s - fbefore.cpu_s, fafter.rss_mib);
    if (o.zmq_floor)
        printf(",\"zmq_assigned\":%zu,\"zmq_seconds\":%.4f,\"zmq_release_min_ms\":%.3f,"
               "\"zmq_release_p50_ms\":%.3f,\"zmq_release_p99_ms\":%.3f,"
               "\"zmq_p99_ms\":%.3f,\"zmq_server_cpu_s\":%.3f,\"zmq_server_rss_mib\":%.2f,"
               "\"zmq_server_kib_per_rank\":%.2f,\"zmq_server_cpu_us_per_rank\":%.1f,"
               "\"zmq_shards\":%d,\"zmq_io_threads\":%d,\"zmq_listeners\":%d",
               zs.assigned, zs.wall_seconds, zs.rel_min, zs.rel_p50, zs.rel_p99, zs.p99, zafter.cpu_s - zbefore.cpu_s,
               zafter.rss_mib, (zafter.rss_mib - zidle.rss_mib) * 1024.0 / o.ranks,
               (zafter.cpu_s - zbefore.cpu_s) * 1e6 / o.ranks, o.zmq.shards, o.zmq.io_threads,
               o.zmq.listeners);
    printf(",\"ok\":%s}\n", rc == 0 ? "true" : "false");
    return rc;
}
