/*  One DP rank of a vLLM-like engine, following vLLM's bootstrap-port logic;
    the C twin of engine.py (same arguments, files, wire protocol and result).

    The front end probes up from VLLM_PORT with socket/bind(0.0.0.0)/close and
    no SO_REUSEADDR and collects five ports (get_open_ports_list(5)), of which
    the API server pops one that vLLM never listens on.  Then, by --model:
      moe    rank 0 binds its DP RPC listener (--data-parallel-rpc-port: from
             RDZV_VLLM_ARGS, else --rpc-port, vLLM's fixed default 29550) and
             publishes its list (the candidate broadcast); the other ranks
             read it.  A forked child ("EngineCore") sleeps a random delay
             (process start, imports, the handshake: all before the model
             loads), then rank 0 hosts the DP store on the next pop, retrying
             on EADDRINUSE with the next one as stateless_init_dp_group()
             does, and global rank 0's world store on the pop after; rank
             k > 0 dials the first DP pop and checks with its token that it
             reached its own group's rank 0.
      dense  no DP group (vLLM runs a dense model with DP size 1 in each
             engine): the executor's get_open_port() (which skips the ten
             ports from VLLM_DP_MASTER_PORT) picks this Pod's world store
             port, EngineCore binds it after the delay and its worker dials it.
    With --elastic (the scale-up scenario, moe only) the engine is one rank
    of a deployment that grows while it serves, as engine.py says: it stays
    up until DIR/stop, and on SIGUSR1 (the front end passes it on to
    EngineCore) moves to the next epoch, rank 0 binding that epoch's
    bootstrap ports beside the old epoch's and rank k dialling the new DP
    store.  Listeners bind with SO_REUSEADDR, as TCPStore's do, and each is
    reported with its role and epoch, for the harness to check against the
    assignment's named ports.  The child writes one JSON result with failures of kind
    eaddrinuse, wrong_peer or timeout. */

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PORT_LIST_LEN     5       /* get_open_ports_list(5) */
#define DP_BIND_ATTEMPTS  5       /* stateless_init_dp_group() retries */
#define MAX_PROBES        4096
#define DP_MASTER_RESERVED 10     /* get_open_port() avoids VLLM_DP_MASTER_PORT + 0..9 */
#define DP_RPC_DEFAULT    29550   /* vLLM's --data-parallel-rpc-port default */
#define DP_RPC_FLAG       "--data-parallel-rpc-port"
#define MAX_RESCANS       64
#define MAX_EVENTS        32
#define MAX_LISTENERS     16
#define MAX_SERVING       8       /* an elastic rank 0's stores, of both epochs */
#define MAX_HELD          4       /* listeners held, not served */
#define ELASTIC_MS        30000
#define ENV_FILE_MAX      65536   /* PATH.env: the NCCL IDs make it long */
#define ENV_KEYS_MAX      128
#define POLL_MS           5
#define PEERS_POLL_MS     50
#define DIAL_RETRY_MS     10
#define IO_TIMEOUT_MS     200
#define LISTEN_BACKLOG    128
#define LINE_MAX_LEN      256
#define FNV_OFFSET        UINT64_C(0xcbf29ce484222325)
#define FNV_PRIME         UINT64_C(0x100000001b3)
#define CPYTHON_SET_MASK  31      /* a 5-int set lives in a 32-slot table */

typedef struct {
    const char *kind;             /* eaddrinuse, wrong_peer, timeout */
    const char *what;
    int port;
    char detail[96];
    long t_ms;
    int epoch;
} race_event_t;

typedef struct {
    const char *role;             /* dp-rpc, dp-store, world-store */
    int port;
    int epoch;
} race_listener_t;

/*  An epoch's environment: the process's at the start, PATH.env after a
    move.  The named ports are the assignment's (rdzv mode). */
typedef struct {
    bool named;
    int store, dp_rpc, probe_lo, probe_hi;   /* dp_rpc -1: none named */
    long epoch, world;                       /* 0: not said (bare mode) */
    char vllm_args[512];
} race_env_t;

typedef struct {
    int fd;
    char secret[17];              /* its epoch's */
} race_serving_t;

typedef struct {
    int trial, group, rank, world;
    const char *dir;
    const char *peer_host;
    int delay_max_ms, timeout_ms;
    const char *model;            /* moe or dense */
    int rpc_port;                 /* --rpc-port: without RDZV_VLLM_ARGS */
    double start, deadline;
    char token[17], secret[17];
    int ports[PORT_LIST_LEN];
    int tp_port;
    race_event_t events[MAX_EVENTS];
    int n_events;
    int peers_ok, foreign_peers;
    int bound_port;
    long bound_t_ms;
    long long unix_start_ms;
    int last_error;               /* errno of the last failed dial */
    race_listener_t listeners[MAX_LISTENERS];
    int n_listeners;
    race_env_t env, start_env;    /* the epoch's environment; the start's */
    int epoch, start_epoch;
    /* --elastic */
    bool elastic, move_done, moved;
    int scale_world, elastic_ms;
    int start_ports[PORT_LIST_LEN];
    int moved_world, moved_bound_port;
    long moved_bound_t_ms;
    int rpc_bound;                /* the DP RPC port the front end holds */
    race_serving_t serving[MAX_SERVING];
    int n_serving;
    int held[MAX_HELD];
    int n_held;
} race_rank_t;

/*  SIGUSR1, the deployment's move to a new epoch: the front end passes it
    on to EngineCore, where the move happens. */
static volatile sig_atomic_t g_moved;
static volatile pid_t g_engine_core;

static void s_on_move(int sig)
{
    if (g_engine_core > 0)
        kill(g_engine_core, sig);
    else
        g_moved = 1;
}

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long s_ms(const race_rank_t *self)
{
    return (long) ((s_now() - self->start) * 1000);
}

static void s_sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

static uint64_t s_random64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != sizeof v)
        v = (uint64_t) getpid() * FNV_PRIME ^ (uint64_t) (s_now() * 1e9);
    return v;
}

static void s_mac(const char *secret, const char *token, char out[17])
{
    char text[64];
    snprintf(text, sizeof text, "%s:%s", secret, token);
    uint64_t h = FNV_OFFSET;
    for (const unsigned char *p = (const unsigned char *) text; *p; p++)
        h = (h ^ *p) * FNV_PRIME;
    snprintf(out, 17, "%016" PRIx64, h);
}

__attribute__((format(printf, 5, 6)))
static void s_event(race_rank_t *self, const char *kind, const char *what,
                    int port, const char *fmt, ...)
{
    if (self->n_events >= MAX_EVENTS)
        return;
    race_event_t *ev = &self->events[self->n_events++];
    ev->kind = kind;
    ev->what = what;
    ev->port = port;
    ev->t_ms = s_ms(self);
    ev->epoch = self->epoch;
    ev->detail[0] = '\0';
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ev->detail, sizeof ev->detail, fmt, ap);
        va_end(ap);
    }
}

static struct sockaddr_in s_any(int port)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    return sa;
}

/*  vLLM's _get_open_port() with VLLM_PORT set: the first port from START
    that binds; -1 if none does. */
static int s_probe_scan(int start)
{
    for (int port = start, n = 0; port <= 65535 && n < MAX_PROBES; port++, n++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd == -1)
            return -1;
        struct sockaddr_in sa = s_any(port);
        int rc = bind(fd, (struct sockaddr *) &sa, sizeof sa);
        close(fd);
        if (rc == 0)
            return port;
    }
    return -1;
}

/*  vLLM's get_open_port(): a scan, but never one of the ten ports from
    VLLM_DP_MASTER_PORT when that is set; vLLM then scans again until it gets
    another port (each scan starts at VLLM_PORT).  -1 if it never does. */
static int s_get_open_port(int start)
{
    const char *env = getenv("VLLM_DP_MASTER_PORT");
    if (!env)
        return s_probe_scan(start);
    int master = atoi(env);
    for (int n = 0; n < MAX_RESCANS; n++) {
        int port = s_probe_scan(start);
        if (port == -1 || port < master || port >= master + DP_MASTER_RESERVED)
            return port;
    }
    return -1;
}

/*  --data-parallel-rpc-port as a launch script passes it: the value after
    the flag in the assignment's RDZV_VLLM_ARGS under rdzv, else GIVEN
    (vLLM's default when the operator sets none). */
static int s_rpc_port(const char *args, int given)
{
    char *words = strdup(args), *save = NULL, *prev = NULL;
    int port = given;
    if (!words)
        return given;
    for (char *w = strtok_r(words, " \t\n\r\f\v", &save); w;
         prev = w, w = strtok_r(NULL, " \t\n\r\f\v", &save))
        if (prev && strcmp(prev, DP_RPC_FLAG) == 0) {
            port = atoi(w);
            break;
        }
    free(words);
    return port;
}

typedef const char *(*race_get_fn)(void *ctx, const char *key);

static const char *s_getenv(void *ctx, const char *key)
{
    (void) ctx;
    return getenv(key);
}

/*  PATH.env as the agent writes it: KEY=VALUE lines, a value with spaces
    (RDZV_VLLM_ARGS) in single quotes. */
typedef struct {
    char text[ENV_FILE_MAX];
    const char *keys[ENV_KEYS_MAX], *values[ENV_KEYS_MAX];
    int n;
} race_env_file_t;

static int s_env_file_read(race_env_file_t *file, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t len = fread(file->text, 1, sizeof file->text - 1, f);
    fclose(f);
    file->text[len] = '\0';
    file->n = 0;
    char *save = NULL;
    for (char *line = strtok_r(file->text, "\n", &save); line && file->n < ENV_KEYS_MAX;
         line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        char *value = eq + 1;
        size_t n = strlen(value);
        if (n >= 2 && value[0] == '\'' && value[n - 1] == '\'') {
            value[n - 1] = '\0';
            value++;
        }
        file->keys[file->n] = line;
        file->values[file->n++] = value;
    }
    return 0;
}

static const char *s_env_file_get(void *ctx, const char *key)
{
    const race_env_file_t *file = ctx;
    for (int i = 0; i < file->n; i++)
        if (strcmp(file->keys[i], key) == 0)
            return file->values[i];
    return NULL;
}

/*  The named ports, for the harness's role check, are none in bare mode,
    where no RDZV_PORT_STORE is set.  A missing RDZV_PORT_DP_RPC (the agent
    names none for a group without DP RPC) is written as null. */
static void s_env_fill(race_env_t *env, race_get_fn get, void *ctx)
{
    memset(env, 0, sizeof *env);
    const char *v;
    if ((v = get(ctx, "RDZV_VLLM_ARGS")))
        snprintf(env->vllm_args, sizeof env->vllm_args, "%s", v);
    if ((v = get(ctx, "RDZV_EPOCH")))
        env->epoch = atol(v);
    if ((v = get(ctx, "RDZV_WORLD")))
        env->world = atol(v);
    const char *store = get(ctx, "RDZV_PORT_STORE");
    if (!store)
        return;
    const char *dp_rpc = get(ctx, "RDZV_PORT_DP_RPC");
    const char *probe = get(ctx, "RDZV_PORT_PROBE");
    env->named = true;
    env->store = atoi(store);
    env->dp_rpc = dp_rpc ? atoi(dp_rpc) : -1;
    if (!probe || sscanf(probe, "%d-%d", &env->probe_lo, &env->probe_hi) != 2) {
        env->probe_lo = 0;
        env->probe_hi = -1;       /* an empty pool: every store reads as outside */
    }
}

/*  With VLLM_PORT set: consecutive hits of one scan (no VLLM_DP_MASTER_PORT
    check), put in the order CPython's list(set(...))
    gives five small ints: by value modulo the table size, ties in order. */
static int s_get_open_ports_list(int start, int ports[PORT_LIST_LEN])
{
    int port = start;
    for (int i = 0; i < PORT_LIST_LEN; i++) {
        if ((port = s_probe_scan(port)) == -1)
            return -1;
        ports[i] = port++;
    }
    for (int i = 1; i < PORT_LIST_LEN; i++)
        for (int j = i; j > 0 && (ports[j] & CPYTHON_SET_MASK)
                                  < (ports[j - 1] & CPYTHON_SET_MASK); j--) {
            int t = ports[j];
            ports[j] = ports[j - 1];
            ports[j - 1] = t;
        }
    return 0;
}

static void s_path(const race_rank_t *self, char *buf, size_t size, const char *what)
{
    /* each epoch of an elastic deployment has its own candidate list */
    if (strcmp(what, "ports") == 0 && (!self->elastic || self->epoch <= 1))
        snprintf(buf, size, "%s/g%d.ports", self->dir, self->group);
    else
    if (strcmp(what, "ports") == 0)
        snprintf(buf, size, "%s/g%d.e%d.ports", self->dir, self->group, self->epoch);
    else
        snprintf(buf, size, "%s/result-g%d-r%d.json", self->dir, self->group, self->rank);
}

static int s_publish(race_rank_t *self)
{
    char path[512], tmp[560];
    snprintf(self->secret, sizeof self->secret, "%016" PRIx64, s_random64());
    s_path(self, path, sizeof path, "ports");
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int) getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fprintf(f, "%d %s", self->trial, self->secret);
    for (int i = 0; i < PORT_LIST_LEN; i++)
        fprintf(f, " %d", self->ports[i]);
    fprintf(f, "\n");
    if (fclose(f) != 0)
        return -1;
    return rename(tmp, path);
}

static bool s_parse_broadcast(race_rank_t *self, FILE *f)
{
    int trial, n = 0;
    char secret[17];
    if (fscanf(f, "%d %16s", &trial, secret) != 2 || trial != self->trial)
        return false;
    while (n < PORT_LIST_LEN && fscanf(f, "%d", &self->ports[n]) == 1)
        n++;
    if (n != PORT_LIST_LEN)
        return false;
    memcpy(self->secret, secret, sizeof secret);
    /* the list is rank 0's handshake: waiting starts from it */
    self->deadline = s_now() + self->timeout_ms / 1000.0;
    return true;
}

static bool s_stopped(const race_rank_t *self);

static bool s_read_broadcast(race_rank_t *self)
{
    char path[512];
    s_path(self, path, sizeof path, "ports");
    /* An elastic engine waits for the list as long as it serves, as vLLM's
       handshake waits minutes: a rank 0 that starts late is not what its
       scenario is about.  The window after the list is the same. */
    while (self->elastic ? !s_stopped(self) : s_now() < self->deadline) {
        FILE *f = fopen(path, "r");
        if (f) {
            bool ok = s_parse_broadcast(self, f);
            fclose(f);
            if (ok)
                return true;
        }
        s_sleep_ms(POLL_MS);
    }
    s_event(self, "timeout", "broadcast", 0, "no candidate list");
    return false;
}

/*  A listener as PyTorch's TCPStore makes it: SO_REUSEADDR, bind, listen;
    recorded with its ROLE for the result.  Returns the fd, or -1 with errno
    set. */
static int s_listen(race_rank_t *self, int port, const char *role)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd == -1)
        return -1;
    int one = 1;
    struct sockaddr_in sa = s_any(port);
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == -1
    ||  bind(fd, (struct sockaddr *) &sa, sizeof sa) == -1
    ||  listen(fd, LISTEN_BACKLOG) == -1) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    if (self->n_listeners < MAX_LISTENERS)
        self->listeners[self->n_listeners++] = (race_listener_t) { role, port, self->epoch };
    return fd;
}

/*  A bind vLLM does not retry: EADDRINUSE is this rank's end.  Returns the
    fd, or -1 with the failure recorded as an event. */
static int s_listen_or_report(race_rank_t *self, int port, const char *role)
{
    int fd = s_listen(self, port, role);
    if (fd == -1 && errno == EADDRINUSE)
        s_event(self, "eaddrinuse", role, port, NULL);
    else
    if (fd == -1)
        s_event(self, "timeout", role, port, "bind: %s", strerror(errno));
    return fd;
}

/*  An elastic deployment's manager names each epoch's DP master port: under
    rdzv the assignment's store port of this epoch.  -1: vLLM takes a pop of
    its list (bare, and every start-up scenario). */
static int s_named_store(const race_rank_t *self)
{
    return self->elastic && self->env.named ? self->env.store : -1;
}

/*  The port rank 0's DP store binds first and rank k dials: the named store
    port, else the first DP pop (the API server took the last). */
static int s_dp_port(const race_rank_t *self)
{
    int named = s_named_store(self);
    return named >= 0 ? named : self->ports[PORT_LIST_LEN - 2];
}

/*  As stateless_init_dp_group(): on EADDRINUSE the next port, up to five
    times: the next pop from the end of POPS (*N of them), or after a named
    port the one above it (get_next_dp_init_port() with no list left). */
static int s_bind_dp_store(race_rank_t *self, const int *pops, int *n)
{
    int named = s_named_store(self);
    for (int attempt = 0; attempt < DP_BIND_ATTEMPTS; attempt++) {
        int port;
        if (named >= 0)
            port = named + attempt;
        else
        if (*n > 0)
            port = pops[--*n];
        else
            break;
        int fd = s_listen(self, port, "dp-store");
        if (fd != -1) {
            if (self->moved) {
                self->moved_bound_port = port;
                self->moved_bound_t_ms = s_ms(self);
            } else {
                self->bound_port = port;
                self->bound_t_ms = s_ms(self);
            }
            return fd;
        }
        if (errno != EADDRINUSE)
            s_event(self, "timeout", "dp-store", port, "bind: %s", strerror(errno));
        else
            s_event(self, "eaddrinuse", "dp-store", port, NULL);
    }
    return -1;
}

/*  Reads one line (without the newline) within IO_TIMEOUT_MS; 0 on success. */
static int s_read_line(int fd, char *buf, size_t size)
{
    size_t len = 0;
    while (len + 1 < size) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        int rc = poll(&pfd, 1, IO_TIMEOUT_MS);
        if (rc == -1 && errno == EINTR)
            continue;             /* an epoch move's signal */
        if (rc != 1)
            return -1;
        ssize_t n = recv(fd, buf + len, 1, 0);
        if (n <= 0)
            return -1;
        if (buf[len] == '\n') {
            buf[len] = '\0';
            return 0;
        }
        len++;
    }
    return -1;
}

static void s_send_all(int fd, const char *text)
{
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t n = send(fd, text + off, len - off, MSG_NOSIGNAL);
        if (n <= 0 && errno != EINTR)
            return;
        if (n > 0)
            off += (size_t) n;
    }
}

static void s_serve_one(race_rank_t *self, int conn, const char *secret)
{
    char line[LINE_MAX_LEN], token[17], mac[17], reply[LINE_MAX_LEN];
    int trial, group, rank;
    if (s_read_line(conn, line, sizeof line) == 0
    &&  sscanf(line, "HELLO %d %d %d %16s", &trial, &group, &rank, token) == 4) {
        s_mac(secret, token, mac);
        snprintf(reply, sizeof reply, "OK %d %d %d %s %s\n",
                 self->trial, self->group, rank, token, mac);
        s_send_all(conn, reply);
        if (trial == self->trial && group == self->group)
            self->peers_ok++;
        else
            self->foreign_peers++;
        struct pollfd pfd = { .fd = conn, .events = POLLIN };
        poll(&pfd, 1, IO_TIMEOUT_MS);   /* the client closes first */
    }
    close(conn);
}

/*  Every other rank has written its result: nobody will dial any more. */
static bool s_peers_done(const race_rank_t *self)
{
    char path[512];
    for (int r = 1; r < self->world; r++) {
        snprintf(path, sizeof path, "%s/result-g%d-r%d.json", self->dir, self->group, r);
        if (access(path, F_OK) != 0)
            return false;
    }
    return true;
}

static void s_serve(race_rank_t *self, int lfd)
{
    while (self->peers_ok < self->world - 1 && !s_peers_done(self)) {
        int left_ms = (int) ((self->deadline - s_now()) * 1000);
        if (left_ms <= 0)
            break;
        struct pollfd pfd = { .fd = lfd, .events = POLLIN };
        if (poll(&pfd, 1, left_ms < PEERS_POLL_MS ? left_ms : PEERS_POLL_MS) != 1)
            continue;
        int conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (conn != -1)
            s_serve_one(self, conn, self->secret);
    }
}

/*  Dials HOST:PORT once.  1: right peer, 0: wrong peer, -1: nobody there
    (yet), with self->last_error. */
static int s_dial_once(race_rank_t *self, int port, const char *host)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd == -1)
        return -1;
    struct timeval tv = { 0, IO_TIMEOUT_MS * 1000 };
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char hello[LINE_MAX_LEN], reply[LINE_MAX_LEN], want[LINE_MAX_LEN], mac[17];
    snprintf(hello, sizeof hello, "HELLO %d %d %d %s\n",
             self->trial, self->group, self->rank, self->token);
    int rc = -1;
    self->last_error = 0;
    if (connect(fd, (struct sockaddr *) &sa, sizeof sa) == -1)
        self->last_error = errno;
    else {
        s_send_all(fd, hello);
        if (s_read_line(fd, reply, sizeof reply) == -1)
            self->last_error = ETIMEDOUT;
        else {
            s_mac(self->secret, self->token, mac);
            snprintf(want, sizeof want, "OK %d %d %d %s %s",
                     self->trial, self->group, self->rank, self->token, mac);
            rc = strcmp(reply, want) == 0;
            if (rc == 0)
                s_event(self, "wrong_peer", "dial", port, "%.80s", reply);
        }
    }
    close(fd);
    return rc;
}

static void s_dial(race_rank_t *self)
{
    int port = s_dp_port(self), attempts = 0;
    long first = s_ms(self);
    while (s_now() < self->deadline) {
        attempts++;
        if (s_dial_once(self, port, self->peer_host) >= 0)
            return;
        s_sleep_ms(DIAL_RETRY_MS);
    }
    s_event(self, "timeout", "dial", port, "%d attempts from %ld ms, last: %s",
            attempts, first, self->last_error ? strerrorname_np(self->last_error) : "");
}

static long s_delay_ms(const race_rank_t *self)
{
    return self->delay_max_ms > 0
        ? (long) (s_random64() % (uint64_t) (self->delay_max_ms + 1)) : 0;
}

static void s_delay(race_rank_t *self)
{
    s_sleep_ms(s_delay_ms(self));
}

/*  --elastic: the scale-up scenario. */

/*  The trial is over (the harness made DIR/stop) or this engine's own limit
    passed: an elastic engine serves until then, as a deployment's engines
    serve on after they grew. */
static bool s_stopped(const race_rank_t *self)
{
    char path[512];
    snprintf(path, sizeof path, "%s/stop", self->dir);
    return access(path, F_OK) == 0 || s_now() >= self->start + self->elastic_ms / 1000.0;
}

/*  This rank's part of its epoch is done (rank 0's stores bound, rank k's
    dial answered or given up): the harness grows the deployments, and ends
    the trial, once every rank has said so. */
static void s_mark_ready(const race_rank_t *self)
{
    char path[512];
    snprintf(path, sizeof path, "%s/ready-g%d-r%d-e%d", self->dir, self->group, self->rank,
             self->epoch);
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
}

/*  The epoch the deployment moved to: PATH.env, which the agent rewrote
    before it signalled (rdzv), else the next one with --scale-world ranks
    (bare).  False if there is no newer epoch than this one. */
static bool s_next_epoch(race_rank_t *self)
{
    static race_env_file_t file;
    self->move_done = true;
    const char *sock = getenv("RDZV_AGENT_SOCKET");
    race_env_t env = self->env;
    long epoch = self->epoch + 1;
    if (sock) {
        char path[512];
        snprintf(path, sizeof path, "%s.env", sock);
        if (s_env_file_read(&file, path) == -1) {
            s_event(self, "timeout", "epoch", 0, "signalled, but cannot read %s: %s",
                    path, strerror(errno));
            return false;
        }
        s_env_fill(&env, s_env_file_get, &file);
        epoch = env.epoch;
    }
    if (epoch <= self->epoch) {
        s_event(self, "timeout", "epoch", 0, "signalled, but %s.env says epoch %ld",
                sock ? sock : "", epoch);
        return false;
    }
    self->env = env;
    self->epoch = (int) epoch;
    self->moved = true;
    self->moved_world = env.world > 0 ? (int) env.world : self->scale_world;
    self->moved_bound_port = 0;
    self->moved_bound_t_ms = -1;
    memset(self->ports, 0, sizeof self->ports);
    self->deadline = s_now() + self->timeout_ms / 1000.0;
    return true;
}

/*  The epoch's DP store, with vLLM's retries, and world store, each served
    with the epoch's secret. */
static void s_add_serving(race_rank_t *self, int fd)
{
    if (self->n_serving == MAX_SERVING) {
        close(fd);
        return;
    }
    race_serving_t *s = &self->serving[self->n_serving++];
    s->fd = fd;
    memcpy(s->secret, self->secret, sizeof s->secret);
}

static void s_bind_stores(race_rank_t *self)
{
    int pops[PORT_LIST_LEN], n = PORT_LIST_LEN;
    memcpy(pops, self->ports, sizeof pops);
    n--;                          /* the API server's data_parallel_master_port */
    int dp = s_bind_dp_store(self, pops, &n);
    if (dp == -1) {
        s_event(self, "timeout", "dp-store", 0, "no port left to bind");
        return;
    }
    s_add_serving(self, dp);
    int world = n > 0 ? s_listen_or_report(self, pops[--n], "world-store") : -1;
    if (world != -1)
        s_add_serving(self, world);
}

/*  Rank 0, told the deployment grew: the new epoch's DP RPC port when it
    names another one (rdzv; vLLM's own is fixed), and a new list from
    VLLM_PORT (the new topology's DP master ports), published with a new
    secret.  The RPC listener binds here rather than in the front end: the
    port is what counts.  Returns when EngineCore binds the stores (after
    the reconfiguration's handshake, a random delay), or -1. */
static double s_begin_move(race_rank_t *self)
{
    if (!s_next_epoch(self))
        return -1;
    int port = s_rpc_port(self->env.vllm_args, self->rpc_port);
    if (port != self->rpc_bound) {
        int fd = s_listen_or_report(self, port, "dp-rpc");
        if (fd != -1 && self->n_held < MAX_HELD)
            self->held[self->n_held++] = fd;
    }
    const char *env = getenv("VLLM_PORT");
    if (s_get_open_ports_list(env ? atoi(env) : 19500, self->ports) == -1
    ||  s_publish(self) == -1) {
        s_event(self, "timeout", "broadcast", 0, "no new list: %s", strerror(errno));
        return -1;
    }
    return s_now() + s_delay_ms(self) / 1000.0;
}

/*  The old epoch's stores serve until the trial ends, beside the new
    epoch's: a deployment's old DP group lives on while the new one forms. */
static void s_elastic_rank0(race_rank_t *self)
{
    s_delay(self);
    s_bind_stores(self);
    s_mark_ready(self);
    double bind_at = -1;
    while (!s_stopped(self)) {
        if (g_moved && !self->move_done)
            bind_at = s_begin_move(self);
        double now = s_now();
        if (bind_at >= 0 && now >= bind_at) {
            bind_at = -1;
            s_bind_stores(self);
            s_mark_ready(self);
        }
        int wait_ms = PEERS_POLL_MS;
        if (bind_at >= 0 && (bind_at - now) * 1000 < wait_ms)
            wait_ms = (int) ((bind_at - now) * 1000);
        struct pollfd pfds[MAX_SERVING];
        for (int i = 0; i < self->n_serving; i++)
            pfds[i] = (struct pollfd) { .fd = self->serving[i].fd, .events = POLLIN };
        if (poll(pfds, (nfds_t) self->n_serving, wait_ms < 0 ? 0 : wait_ms) <= 0)
            continue;
        for (int i = 0; i < self->n_serving; i++) {
            if (!(pfds[i].revents & POLLIN))
                continue;
            int conn = accept4(pfds[i].fd, NULL, NULL, SOCK_CLOEXEC);
            if (conn != -1)
                s_serve_one(self, conn, self->serving[i].secret);
        }
    }
    for (int i = 0; i < self->n_serving; i++)
        close(self->serving[i].fd);
    for (int i = 0; i < self->n_held; i++)
        close(self->held[i]);
}

/*  Dials its epoch's DP store; on a move, the new epoch's. */
static void s_elastic_rank_k(race_rank_t *self)
{
    s_delay(self);
    s_dial(self);
    s_mark_ready(self);
    while (!s_stopped(self)) {
        if (g_moved && !self->move_done) {
            if (s_next_epoch(self) && s_read_broadcast(self)) {
                s_delay(self);
                s_dial(self);
            }
            s_mark_ready(self);
        }
        s_sleep_ms(POLL_MS);
    }
}

static void s_engine_core_moe(race_rank_t *self)
{
    if (self->elastic) {
        if (self->rank == 0)
            s_elastic_rank0(self);
        else
            s_elastic_rank_k(self);
        return;
    }
    s_delay(self);
    if (self->rank > 0) {
        s_dial(self);
        return;
    }
    int pops[PORT_LIST_LEN], n = PORT_LIST_LEN;
    memcpy(pops, self->ports, sizeof pops);
    n--;                          /* the API server's data_parallel_master_port */
    int dp = s_bind_dp_store(self, pops, &n);
    if (dp == -1) {
        s_event(self, "timeout", "dp-store", 0, "no port left to bind");
        return;
    }
    int world = n > 0 ? s_listen_or_report(self, pops[--n], "world-store") : -1;
    s_serve(self, dp);
    close(dp);
    if (world != -1)
        close(world);
}

/*  The serving side of the dense world store: the first connection that
    comes before the deadline.  Runs in a child of EngineCore, so that the
    worker's dial and the store's reply happen at once; the exit status
    carries the count back: 1 a peer of ours, 2 a foreign one, 0 none.  No
    close() of the listener: it stays the parent's to close. */
static void s_serve_first(race_rank_t *self, int lfd)
{
    int left_ms = (int) ((self->deadline - s_now()) * 1000);
    struct pollfd pfd = { .fd = lfd, .events = POLLIN };
    if (left_ms > 0 && poll(&pfd, 1, left_ms) == 1) {
        int conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (conn != -1)
            s_serve_one(self, conn, self->secret);
    }
    _exit(self->peers_ok ? 1 : self->foreign_peers ? 2 : 0);
}

/*  The world store, and its worker's check that it reached it. */
static void s_engine_core_dense(race_rank_t *self)
{
    int port = self->tp_port;
    s_delay(self);
    int lfd = s_listen_or_report(self, port, "world-store");
    if (lfd == -1)
        return;
    snprintf(self->secret, sizeof self->secret, "%016" PRIx64, s_random64());
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        s_serve_first(self, lfd);
    if (pid == -1)
        s_event(self, "timeout", "dial", port, "fork: %s", strerror(errno));
    else
    if (s_dial_once(self, port, "127.0.0.1") == -1)
        s_event(self, "timeout", "dial", port, "%s",
                self->last_error ? strerrorname_np(self->last_error) : "");
    /* the store lives as long as the engine: to the end of its window */
    long left_ms = (long) ((self->deadline - s_now()) * 1000);
    if (left_ms > 0)
        s_sleep_ms(left_ms);
    close(lfd);
    if (pid != -1) {
        int status;
        while (waitpid(pid, &status, 0) == -1 && errno == EINTR)
            ;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 1)
            self->peers_ok++;
        else
        if (WIFEXITED(status) && WEXITSTATUS(status) == 2)
            self->foreign_peers++;
    }
}

static void s_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else
        if ((unsigned char) *s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void s_write_named(FILE *f, const race_env_t *env)
{
    if (!env->named)
        fprintf(f, "null");
    else
    if (env->dp_rpc < 0)
        fprintf(f, "{\"store\": %d, \"dp_rpc\": null, \"probe\": [%d, %d]}",
                env->store, env->probe_lo, env->probe_hi);
    else
        fprintf(f, "{\"store\": %d, \"dp_rpc\": %d, \"probe\": [%d, %d]}",
                env->store, env->dp_rpc, env->probe_lo, env->probe_hi);
}

static void s_write_ports(FILE *f, const int *ports)
{
    fputc('[', f);
    for (int i = 0; i < PORT_LIST_LEN; i++)
        fprintf(f, "%s%d", i ? ", " : "", ports[i]);
    fputc(']', f);
}

static int s_write_result(const race_rank_t *self)
{
    char path[512], tmp[520];
    s_path(self, path, sizeof path, "result");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fprintf(f, "{\"trial\": %d, \"group\": %d, \"rank\": %d, \"engine\": \"c\", \"ports\": ",
            self->trial, self->group, self->rank);
    /* "ports" stays the start-up list; the move's goes with the move */
    s_write_ports(f, self->moved ? self->start_ports : self->ports);
    fprintf(f, ", \"tp_port\": %d, \"unix_start_ms\": %lld, \"events\": [",
            self->tp_port, self->unix_start_ms);
    for (int i = 0; i < self->n_events; i++) {
        const race_event_t *ev = &self->events[i];
        fprintf(f, "%s{\"kind\": \"%s\", \"what\": \"%s\", \"port\": %d, \"detail\": ",
                i ? ", " : "", ev->kind, ev->what, ev->port);
        s_json_string(f, ev->detail);
        fprintf(f, ", \"t_ms\": %ld, \"epoch\": %d}", ev->t_ms, ev->epoch);
    }
    fprintf(f, "], \"foreign_peers\": %d, \"peers_ok\": %d, \"bound_port\": %d, "
               "\"bound_t_ms\": %ld, \"listeners\": [",
            self->foreign_peers, self->peers_ok, self->bound_port, self->bound_t_ms);
    for (int i = 0; i < self->n_listeners; i++)
        fprintf(f, "%s[\"%s\", %d, %d]", i ? ", " : "", self->listeners[i].role,
                self->listeners[i].port, self->listeners[i].epoch);
    fprintf(f, "], \"named\": ");
    s_write_named(f, &self->start_env);
    fprintf(f, ", \"model\": \"%s\", \"epoch\": %d, \"moved\": ", self->model,
            self->start_epoch);
    if (!self->moved)
        fprintf(f, "null");
    else {
        fprintf(f, "{\"epoch\": %d, \"world\": %d, \"named\": ", self->epoch,
                self->moved_world);
        s_write_named(f, &self->env);
        fprintf(f, ", \"bound_port\": %d, \"bound_t_ms\": %ld, \"ports\": ",
                self->moved_bound_port, self->moved_bound_t_ms);
        s_write_ports(f, self->ports);
        fputc('}', f);
    }
    fprintf(f, "}\n");
    if (fclose(f) != 0)
        return -1;
    return rename(tmp, path);
}

/*  Runs BODY in a forked child (EngineCore), which writes the result; the
    child's exit status is this process's. */
static int s_fork_engine_core(race_rank_t *self, void (*body)(race_rank_t *))
{
    memcpy(self->start_ports, self->ports, sizeof self->ports);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == -1)
        return 2;
    if (pid == 0) {
        body(self);
        _exit(s_write_result(self) != 0 ? 2 : self->n_events ? 1 : 0);
    }
    g_engine_core = pid;
    if (g_moved)                  /* it came before EngineCore existed */
        kill(pid, SIGUSR1);
    int status;
    while (waitpid(pid, &status, 0) == -1 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}

static void s_usage(void)
{
    fprintf(stderr, "usage: rdzv-race-engine --trial T --group G --rank R --world N "
                    "--dir DIR [--peer-host ADDR] [--delay-max-ms MS] [--timeout-ms MS] "
                    "[--model moe|dense] [--rpc-port PORT] [--elastic] [--epoch E] "
                    "[--scale-world N] [--elastic-ms MS]\n");
}

static int s_parse_args(race_rank_t *self, int argc, char **argv)
{
    static const struct option opts[] = {
        { "trial", required_argument, NULL, 't' },
        { "group", required_argument, NULL, 'g' },
        { "rank", required_argument, NULL, 'r' },
        { "world", required_argument, NULL, 'w' },
        { "dir", required_argument, NULL, 'd' },
        { "peer-host", required_argument, NULL, 'p' },
        { "delay-max-ms", required_argument, NULL, 'D' },
        { "timeout-ms", required_argument, NULL, 'T' },
        { "model", required_argument, NULL, 'm' },
        { "rpc-port", required_argument, NULL, 'P' },
        { "elastic", no_argument, NULL, 'E' },
        { "epoch", required_argument, NULL, 'e' },
        { "scale-world", required_argument, NULL, 'S' },
        { "elastic-ms", required_argument, NULL, 'M' },
        { NULL, 0, NULL, 0 }
    };
    self->trial = self->group = self->rank = self->world = -1;
    self->peer_host = "127.0.0.1";
    self->delay_max_ms = 300;
    self->timeout_ms = 800;
    self->model = "moe";
    self->rpc_port = DP_RPC_DEFAULT;
    self->epoch = 1;
    self->elastic_ms = ELASTIC_MS;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
            case 't': self->trial = atoi(optarg); break;
            case 'g': self->group = atoi(optarg); break;
            case 'r': self->rank = atoi(optarg); break;
            case 'w': self->world = atoi(optarg); break;
            case 'd': self->dir = optarg; break;
            case 'p': self->peer_host = optarg; break;
            case 'D': self->delay_max_ms = atoi(optarg); break;
            case 'T': self->timeout_ms = atoi(optarg); break;
            case 'm': self->model = optarg; break;
            case 'P': self->rpc_port = atoi(optarg); break;
            case 'E': self->elastic = true; break;
            case 'e': self->epoch = atoi(optarg); break;
            case 'S': self->scale_world = atoi(optarg); break;
            case 'M': self->elastic_ms = atoi(optarg); break;
            default: return -1;
        }
    }
    if (self->trial < 0 || self->group < 0 || self->rank < 0 || self->world < 1
    ||  self->rank >= self->world || !self->dir || self->delay_max_ms < 0
    ||  (strcmp(self->model, "moe") != 0 && strcmp(self->model, "dense") != 0)
    ||  (self->elastic && strcmp(self->model, "moe") != 0) || self->epoch < 1)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    static race_rank_t rank;
    race_rank_t *self = &rank;
    if (s_parse_args(self, argc, argv) == -1) {
        s_usage();
        return 2;
    }
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    self->unix_start_ms = wall.tv_sec * 1000LL + wall.tv_nsec / 1000000;
    self->start = s_now();
    self->deadline = self->start + self->timeout_ms / 1000.0;
    self->bound_t_ms = -1;
    snprintf(self->token, sizeof self->token, "%016" PRIx64, s_random64());
    s_env_fill(&self->start_env, s_getenv, NULL);
    self->env = self->start_env;
    /* a rank that joins a grown deployment starts in its next epoch */
    if (self->start_env.epoch > 0)
        self->epoch = (int) self->start_env.epoch;
    self->start_epoch = self->epoch;
    if (self->elastic) {
        /* from the start: an engine without a handler dies of the signal */
        struct sigaction sa = { .sa_handler = s_on_move, .sa_flags = SA_RESTART };
        sigemptyset(&sa.sa_mask);
        sigaction(SIGUSR1, &sa, NULL);
    }
    const char *env = getenv("VLLM_PORT");
    int vllm_port = env ? atoi(env) : 19500;
    int own[PORT_LIST_LEN];
    if (s_get_open_ports_list(vllm_port, own) == -1)
        return 2;
    if (strcmp(self->model, "dense") == 0) {
        memcpy(self->ports, own, sizeof own);
        if ((self->tp_port = s_get_open_port(vllm_port)) == -1)
            return 2;
        return s_fork_engine_core(self, s_engine_core_dense);
    }
    int rpc = -1;
    if (self->rank == 0) {
        memcpy(self->ports, own, sizeof own);
        self->rpc_bound = s_rpc_port(self->env.vllm_args, self->rpc_port);
        rpc = s_listen_or_report(self, self->rpc_bound, "dp-rpc");
        if (rpc == -1)
            return s_write_result(self) == 0 ? 1 : 2;
        if (s_publish(self) == -1) {
            close(rpc);
            return 2;
        }
        /* serve until the last rank, which may bind late, had its window */
        self->deadline = s_now() + (self->timeout_ms + self->delay_max_ms) / 1000.0;
    }
    else
    if (!s_read_broadcast(self))
        return s_write_result(self) == 0 ? 1 : 2;
    /* the executor's scan: with DP > 1 its port is replaced by a pop */
    self->tp_port = s_get_open_port(vllm_port);
    int rc = self->tp_port == -1 ? 2 : s_fork_engine_core(self, s_engine_core_moe);
    /* the front end holds the DP RPC port until its EngineCore is gone */
    if (rpc != -1)
        close(rpc);
    return rc;
}
