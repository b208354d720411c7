/* rdzv-shim-bench: the cost of librdzv_shim.so, measured from inside a
 * process (shim_bench.py runs it in each setting and prints the table).
 *
 *   rdzv-shim-bench passthrough [N]   ns per pass-through call, N calls of
 *                                     each: bind() of a port outside the
 *                                     managed range, bind() of port 0 on
 *                                     127.0.0.1 (NCCL's listeners), bind()
 *                                     of port 0 on 0.0.0.0 with SO_REUSEADDR
 *                                     (ZeroMQ's), close() of a socket the
 *                                     shim never handed over
 *   rdzv-shim-bench managed [N]       under `rdzv agent -- ...`: µs per probe
 *                                     (plan port, no SO_REUSEADDR), per
 *                                     port-0 probe, per listener hand-over
 *                                     (SO_REUSEADDR bind) and per close of a
 *                                     handed-over listener
 * Each prints one JSON object on stdout. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WARMUP 64
#define CLOCK_SAMPLES 10001

static int64_t s_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

static double s_pct(double *v, size_t n, double p)
{
    if (!n)
        return 0;
    size_t i = (size_t) (p / 100.0 * (double) (n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

static double s_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, s_cmp);
    return s_pct(v, n, 50);
}

static struct sockaddr_in s_addr(int port)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sa;
}

/* vLLM's probe binds the wildcard address; a port-0 bind to 127.0.0.1 is
 * a listener letting the kernel choose, which passes through. */
static struct sockaddr_in s_any(int port)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port) };
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    return sa;
}

/* A port outside any managed range: the kernel's choice (ephemeral range). */
static int s_outside_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = s_addr(0);
    socklen_t sl = sizeof sa;
    if (bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0
        || getsockname(fd, (struct sockaddr *) &sa, &sl) < 0) {
        perror("bind");
        exit(1);
    }
    close(fd);
    return ntohs(sa.sin_port);
}

/* libc's own bind() and close(), whatever is preloaded: each call through
 * the symbol (the shim's, when preloaded) is paired with the same call
 * straight to libc in the same process, so the shim's share shows apart
 * from the system call's noise. dlsym() returns an object pointer; ISO C
 * has no cast from it to a function pointer. */
typedef int (*s_bind_fn)(int, const struct sockaddr *, socklen_t);
typedef int (*s_close_fn)(int);
typedef union {
    void *obj;
    s_bind_fn bind;
    s_close_fn close;
} s_sym_t;

static s_bind_fn s_libc_bind;
static s_close_fn s_libc_close;

static void s_find_libc(void)
{
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    s_sym_t b = { .obj = libc ? dlsym(libc, "bind") : NULL };
    s_sym_t c = { .obj = libc ? dlsym(libc, "close") : NULL };
    if (!b.obj || !c.obj) {
        fprintf(stderr, "rdzv-shim-bench: no libc.so.6 bind/close: %s\n", dlerror());
        exit(1);
    }
    s_libc_bind = b.bind;
    s_libc_close = c.close;
}

/* One kind of pass-through call on a fresh TCP socket: bind() to addr, or
 * close(). */
typedef struct {
    const char *name;
    bool reuseaddr;
    struct sockaddr_in addr;
    bool is_close;
} s_op_t;

/* ns of one call on a fresh socket, through the symbol or straight to libc;
 * *failed counts calls that did not succeed. */
static double s_time_one(const s_op_t *op, bool via_libc, long *failed)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (op->reuseaddr)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const struct sockaddr *sa = (const struct sockaddr *) &op->addr;
    int64_t t = s_now_ns();
    int rc = op->is_close ? (via_libc ? s_libc_close(fd) : close(fd))
                          : (via_libc ? s_libc_bind(fd, sa, sizeof op->addr)
                                      : bind(fd, sa, sizeof op->addr));
    int64_t dt = s_now_ns() - t;
    if (rc < 0)
        (*failed)++;
    if (!op->is_close)
        s_libc_close(fd);
    return (double) dt;
}

/* The clock's own cost: the median of back-to-back readings. */
static double s_clock_ns(void)
{
    static double v[CLOCK_SAMPLES];
    for (size_t i = 0; i < CLOCK_SAMPLES; i++) {
        int64_t t = s_now_ns();
        v[i] = (double) (s_now_ns() - t);
    }
    return s_median(v, CLOCK_SAMPLES);
}

/* Median ns per call of op, through the symbol (*sym) and straight to libc
 * (*libc), the calls alternating; the clock's cost taken off. */
static void s_measure(const s_op_t *op, long n, double clock_ns, double *sym, double *libc,
                      long *failed)
{
    double *a = calloc((size_t) n, sizeof *a), *b = calloc((size_t) n, sizeof *b);
    long ignored = 0;
    for (int i = 0; i < WARMUP; i++) {
        s_time_one(op, false, &ignored);
        s_time_one(op, true, &ignored);
    }
    for (long i = 0; i < n; i++) {
        a[i] = s_time_one(op, false, failed);
        b[i] = s_time_one(op, true, failed);
    }
    *sym = s_median(a, (size_t) n) - clock_ns;
    *libc = s_median(b, (size_t) n) - clock_ns;
    free(a);
    free(b);
}

/* Under the agent (RDZV_PORTS set): a listener on the first plan port,
 * handed over by the agent, so that the shim's table of hand-overs is not
 * empty, as in an engine. Returns its descriptor, or -1 (none). */
static int s_hold_handover(void)
{
    const char *ports = getenv("RDZV_PORTS");
    if (!ports || !getenv("RDZV_AGENT_SOCKET") || !*ports)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = s_any(atoi(ports));
    if (bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0 || listen(fd, 16) < 0) {
        perror("rdzv-shim-bench: a listener on the first plan port");
        exit(1);
    }
    return fd;
}

static int s_passthrough(long n)
{
    s_find_libc();
    int held = s_hold_handover();
    int port = s_outside_port();
    const s_op_t ops[] = {
        { "bind_outside", true, s_addr(port), false },
        { "bind_port0", false, s_addr(0), false },
        { "bind_port0_any_reuse", true, s_any(0), false },
        { "close_unmanaged", false, s_addr(0), true },
    };
    double clock_ns = s_clock_ns();
    long failed = 0;
    printf("{\"mode\":\"passthrough\",\"iterations\":%ld,\"port\":%d,\"clock_ns\":%.1f,\"ops\":{",
           n, port, clock_ns);
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        double sym, libc;
        s_measure(&ops[i], n, clock_ns, &sym, &libc, &failed);
        printf("%s\"%s\":{\"ns\":%.1f,\"libc_ns\":%.1f}", i ? "," : "", ops[i].name, sym, libc);
    }
    printf("},\"handover_held\":%d,\"failed\":%ld}\n", held >= 0, failed);
    if (held >= 0)
        close(held);
    return failed ? 1 : 0;
}

static void s_print_dist(const char *name, double *v, size_t n, int comma)
{
    qsort(v, n, sizeof *v, s_cmp);
    printf("\"%s\":{\"n\":%zu,\"p50_us\":%.2f,\"p99_us\":%.2f,\"max_us\":%.2f}%s", name, n,
           s_pct(v, n, 50), s_pct(v, n, 99), n ? v[n - 1] : 0.0, comma ? "," : "");
}

static int s_managed(long n)
{
    const char *list = getenv("RDZV_PORTS");
    if (!list || !getenv("RDZV_AGENT_SOCKET")) {
        fprintf(stderr, "rdzv-shim-bench managed: run me under `rdzv agent ... --`\n");
        return 2;
    }
    size_t np = 0;
    int *ports = malloc(sizeof(int) * (strlen(list) / 2 + 2));
    for (const char *p = list; *p;) {
        ports[np++] = (int) strtol(p, (char **) &p, 10);
        if (*p == ',')
            p++;
    }
    if (np < 4) {
        fprintf(stderr, "rdzv-shim-bench managed: need a plan of at least 4 ports\n");
        return 2;
    }
    size_t nprobe = np / 2, nzero = np - nprobe - 1;
    double *probe = calloc(np, sizeof *probe), *zero = calloc(np, sizeof *zero);
    double *hand = calloc((size_t) n, sizeof *hand), *hclose = calloc((size_t) n, sizeof *hclose);
    long failed = 0;
    /* Probes: each plan port once (a probe leases it; close keeps the lease). */
    for (size_t i = 0; i < nprobe; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = s_addr(ports[1 + i]);
        int64_t t = s_now_ns();
        int rc = bind(fd, (struct sockaddr *) &sa, sizeof sa);
        probe[i] = (double) (s_now_ns() - t) / 1e3;
        if (rc < 0)
            failed++;
        close(fd);
    }
    /* Port-0 probes: the agent picks the first free plan port. */
    for (size_t i = 0; i < nzero; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = s_any(0);
        int64_t t = s_now_ns();
        int rc = bind(fd, (struct sockaddr *) &sa, sizeof sa);
        zero[i] = (double) (s_now_ns() - t) / 1e3;
        if (rc < 0)
            failed++;
        close(fd);
    }
    /* Listener hand-overs on plan port 0, n times: bind gets the agent's
     * socket; close tells the agent, which frees the port for the next. */
    int one = 1;
    for (long i = 0; i < n; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in sa = s_addr(ports[0]);
        int64_t t = s_now_ns();
        int rc = bind(fd, (struct sockaddr *) &sa, sizeof sa);
        hand[i] = (double) (s_now_ns() - t) / 1e3;
        if (rc < 0 || listen(fd, 16) < 0)
            failed++;
        t = s_now_ns();
        close(fd);
        hclose[i] = (double) (s_now_ns() - t) / 1e3;
    }
    printf("{\"mode\":\"managed\",\"plan_ports\":%zu,\"failed\":%ld,", np, failed);
    s_print_dist("probe", probe, nprobe, 1);
    s_print_dist("port0_probe", zero, nzero, 1);
    s_print_dist("handover", hand, (size_t) n, 1);
    s_print_dist("handover_close", hclose, (size_t) n, 0);
    printf("}\n");
    return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "passthrough"))
        return s_passthrough(argc >= 3 ? atol(argv[2]) : 20000);
    if (argc >= 2 && !strcmp(argv[1], "managed"))
        return s_managed(argc >= 3 ? atol(argv[2]) : 2000);
    fprintf(stderr, "usage: rdzv-shim-bench passthrough [N] | managed [N]\n");
    return 2;
}
