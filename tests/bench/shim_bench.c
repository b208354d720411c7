/* rdzv-shim-bench: the cost of librdzv_shim.so, measured from inside a
 * process (shim_bench.py runs it in each setting and prints one JSON).
 *
 *   rdzv-shim-bench passthrough [N]   ns per bind()+close() of a TCP socket on
 *                                     a port outside the managed range, and
 *                                     per bind() and close() of fd -1 (EBADF)
 *   rdzv-shim-bench managed [N]       under `rdzv agent -- ...`: µs per probe
 *                                     (plan port, no SO_REUSEADDR), per
 *                                     port-0 probe, per listener hand-over
 *                                     (SO_REUSEADDR bind) and per close of a
 *                                     handed-over listener
 * Each prints one JSON object on stdout. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 512

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

static int s_passthrough(long n)
{
    int port = s_outside_port();
    struct sockaddr_in sa = s_addr(port);
    int fds[BATCH], one = 1;
    int64_t total = 0;
    long done = 0, failed = 0;
    /* Warm up: the shim resolves libc's symbols on first use. */
    for (int i = 0; i < 16; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0)
            failed++;
        close(fd);
    }
    while (done < n) {
        int k = n - done < BATCH ? (int) (n - done) : BATCH;
        for (int i = 0; i < k; i++) {
            fds[i] = socket(AF_INET, SOCK_STREAM, 0);
            setsockopt(fds[i], SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        }
        int64_t t = s_now_ns();
        for (int i = 0; i < k; i++) {
            if (bind(fds[i], (struct sockaddr *) &sa, sizeof sa) < 0)
                failed++;
            close(fds[i]);
        }
        total += s_now_ns() - t;
        done += k;
    }
    /* The same calls on no socket at all: the kernel refuses fd -1 at once
     * (EBADF), so what is left is the shim's own work plus a bare system
     * call, and a few ns of difference are not lost in a 2 us bind+close. */
    int64_t t = s_now_ns();
    for (long i = 0; i < n; i++)
        if (bind(-1, (struct sockaddr *) &sa, sizeof sa) == 0 || errno != EBADF)
            failed++;
    int64_t bind_ebadf = s_now_ns() - t;
    t = s_now_ns();
    for (long i = 0; i < n; i++)
        if (close(-1) == 0 || errno != EBADF)
            failed++;
    int64_t close_ebadf = s_now_ns() - t;
    printf("{\"mode\":\"passthrough\",\"iterations\":%ld,\"port\":%d,\"failed\":%ld,"
           "\"ns_per_bind_close\":%.1f,\"ns_per_bind_ebadf\":%.1f,\"ns_per_close_ebadf\":%.1f}\n",
           n, port, failed, (double) total / (double) n, (double) bind_ebadf / (double) n,
           (double) close_ebadf / (double) n);
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
        return s_passthrough(argc >= 3 ? atol(argv[2]) : 200000);
    if (argc >= 2 && !strcmp(argv[1], "managed"))
        return s_managed(argc >= 3 ? atol(argv[2]) : 2000);
    fprintf(stderr, "usage: rdzv-shim-bench passthrough [N] | managed [N]\n");
    return 2;
}
