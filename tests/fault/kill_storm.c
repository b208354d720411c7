/* kill -9 rdzvd at random points of a many-rank rendezvous
 * (docs/reliability.md).
 *
 *   kill_storm RDZVD [--ranks N] [--rounds R] [--ranks-per-node K]
 *              [--kills-per-round M] [--kill-window-ms W] [--seed S]
 *              [--timeout SEC]
 *
 * One thread per rank, each with its own librdzv client (a client per
 * thread, as rdzv.h asks). Each round every rank joins the group "storm"
 * with a fresh session, as a restarted process would, so round r forms epoch
 * r. Meanwhile this program SIGKILLs rdzvd up to M times at random moments
 * (0-W ms, default 600, after the round starts, or after the previous restart) and
 * starts it again on the same endpoint and state dir after a random pause
 * of 0-300 ms. Checks, per round: every rank finishes with an assignment;
 * all assignments of the round name the same epoch, which is the previous
 * round's plus one; their shared fields (group, epoch, world, master, NCCL
 * ID, members) are identical; each rank's port list is the one it had in
 * round 1. TAP output, one line per round. */
#include <rdzv.h>

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

typedef struct {
    int rank;
    int round;
    int rc;
    char err[256];
    char *json;                    /* assignment of this round */
    char *ports;                   /* JSON of its port list, round 1 */
} s_rank_t;

static const char *s_rdzvd;
static char s_dir[64], s_endpoint[128];
static pid_t s_pid;
static int s_ranks = 256, s_rounds = 10, s_per_node = 8, s_kills = 2, s_timeout = 120,
           s_window_ms = 600;
static s_rank_t *s_rank;
static pthread_barrier_t s_start;
static atomic_int s_done;

static int64_t s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void s_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void s_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("Bail out! ");
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    if (s_pid > 0)
        kill(s_pid, SIGKILL);
    exit(1);
}

static void s_spawn(const char *bind)
{
    char ep_file[128], cmd[1024];
    snprintf(ep_file, sizeof ep_file, "%s/endpoint", s_dir);
    unlink(ep_file);
    snprintf(cmd, sizeof cmd, "exec %s --bind %s --state-dir %s/state --endpoint-file %s "
             "--no-nccl --port-limit 32000 2>>%s/rdzvd.log", s_rdzvd, bind, s_dir, ep_file, s_dir);
    s_pid = fork();
    if (s_pid < 0)
        s_die("fork: %s", strerror(errno));
    if (s_pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *) NULL);
        _exit(127);
    }
    for (int i = 0; i < 2000; i++) {
        FILE *f = fopen(ep_file, "r");
        if (f) {
            char line[128] = "";
            if (fgets(line, sizeof line, f))
                line[strcspn(line, "\n")] = '\0';
            fclose(f);
            if (*line) {
                snprintf(s_endpoint, sizeof s_endpoint, "%s", line);
                return;
            }
        }
        if (waitpid(s_pid, NULL, WNOHANG) == s_pid) {
            s_pid = 0;
            s_die("rdzvd exited at start; see %s/rdzvd.log", s_dir);
        }
        usleep(5000);
    }
    s_die("rdzvd did not come up in 10 s (%s)", s_dir);
}

static void *s_rank_main(void *arg)
{
    s_rank_t *r = arg;
    char node[32], host[32];
    snprintf(node, sizeof node, "node-%d", r->rank / s_per_node);
    snprintf(host, sizeof host, "10.%d.%d.%d", r->rank >> 16 & 255, r->rank >> 8 & 255,
             r->rank & 255);
    for (;;) {
        pthread_barrier_wait(&s_start);
        if (r->round < 0)
            return NULL;
        free(r->json);
        r->json = NULL;
        r->err[0] = '\0';
        /* A fresh session each round: the process "restarted". */
        rdzv_client_t *c = rdzv_client_new(s_endpoint, NULL, r->err, sizeof r->err);
        /* The members list too: every rank must get the same one. */
        rdzv_client_set_members(c, true);
        rdzv_join_args_t args = { .group = "storm", .world = s_ranks, .rank = r->rank,
                                  .host = host, .node = node, .timeout_ms = s_timeout * 1000,
                                  .nccl_id = "none" };
        rdzv_assignment_t *a = NULL;
        r->rc = c ? rdzv_join(c, &args, &a) : RDZV_ERR_IO;
        if (r->rc == 0) {
            r->json = strdup(rdzv_assignment_json(a));
        } else if (c) {
            snprintf(r->err, sizeof r->err, "%s (%s)", rdzv_client_error(c),
                     rdzv_client_error_code(c));
        }
        rdzv_assignment_destroy(&a);
        rdzv_client_destroy(&c);
        atomic_fetch_add(&s_done, 1);
        pthread_barrier_wait(&s_start);
    }
}

static char *s_shared_fields(const char *json)
{
    cJSON *a = cJSON_Parse(json);
    if (!a)
        return NULL;
    cJSON_DeleteItemFromObject(a, "rank");
    cJSON_DeleteItemFromObject(a, "local_rank");     /* a rank's own, like its ports */
    cJSON_DeleteItemFromObject(a, "local_world");
    cJSON_DeleteItemFromObject(a, "group_rank");     /* its node's */
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(a, "named_ports"), "probe");
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(a, "named_ports"), "api");   /* each rank's own */
    cJSON_DeleteItemFromObject(a, "ports");
    cJSON_DeleteItemFromObject(a, "port_range");
    char *text = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    return text;
}

static char *s_field_json(const char *json, const char *name)
{
    cJSON *a = cJSON_Parse(json);
    char *text = a ? cJSON_PrintUnformatted(cJSON_GetObjectItem(a, name)) : NULL;
    cJSON_Delete(a);
    return text;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "ranks", required_argument, 0, 'n' }, { "rounds", required_argument, 0, 'r' },
        { "ranks-per-node", required_argument, 0, 'k' }, { "kills-per-round", required_argument, 0, 'm' },
        { "seed", required_argument, 0, 's' }, { "kill-window-ms", required_argument, 0, 'w' }, { "timeout", required_argument, 0, 't' },
        { 0, 0, 0, 0 },
    };
    unsigned seed = (unsigned) time(NULL) ^ (unsigned) getpid();
    if (getenv("KILL_STORM_ROUNDS"))
        s_rounds = atoi(getenv("KILL_STORM_ROUNDS"));
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'n': s_ranks = atoi(optarg); break;
        case 'r': s_rounds = atoi(optarg); break;
        case 'k': s_per_node = atoi(optarg); break;
        case 'm': s_kills = atoi(optarg); break;
        case 's': seed = (unsigned) strtoul(optarg, NULL, 10); break;
        case 't': s_timeout = atoi(optarg); break;
        case 'w': s_window_ms = atoi(optarg) > 0 ? atoi(optarg) : 1; break;
        default: return 2;
        }
    }
    if (optind != argc - 1 || s_ranks < 1 || s_rounds < 1 || s_per_node < 1) {
        fprintf(stderr, "usage: kill_storm RDZVD [--ranks N] [--rounds R] [--ranks-per-node K] "
                "[--kills-per-round M] [--kill-window-ms W] [--seed S] [--timeout SEC]\n");
        return 2;
    }
    s_rdzvd = argv[optind];
    srand(seed);
    strcpy(s_dir, "/tmp/rdzv-storm-XXXXXX");
    if (!mkdtemp(s_dir))
        s_die("mkdtemp: %s", strerror(errno));
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("TAP version 13\n1..%d\n# seed %u ranks %d rounds %d per-node %d kills/round %d dir %s\n",
           s_rounds, seed, s_ranks, s_rounds, s_per_node, s_kills, s_dir);
    /* A port below the ephemeral range: 256 clients reconnecting while
     * rdzvd is down could otherwise take an ephemeral one as their source
     * port and make the restart fail with EADDRINUSE. */
    char first[64] = "tcp://127.0.0.1:*";
    for (int i = 0; i < 200; i++) {
        int port = 17000 + rand() % 2400;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port),
                                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        int ok = fd >= 0 && bind(fd, (struct sockaddr *) &sin, sizeof sin) == 0;
        if (fd >= 0)
            close(fd);
        if (ok) {
            snprintf(first, sizeof first, "tcp://127.0.0.1:%d", port);
            break;
        }
    }
    s_spawn(first);

    s_rank = calloc((size_t) s_ranks, sizeof *s_rank);
    pthread_t *threads = calloc((size_t) s_ranks, sizeof *threads);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_barrier_init(&s_start, NULL, (unsigned) s_ranks + 1);
    for (int i = 0; i < s_ranks; i++) {
        s_rank[i].rank = i;
        if (pthread_create(&threads[i], &attr, s_rank_main, &s_rank[i]) != 0)
            s_die("pthread_create: %s", strerror(errno));
    }

    int64_t prev_epoch = 0;
    int failed = 0, total_kills = 0;
    int64_t total_ms = 0, worst_ms = 0;
    for (int round = 1; round <= s_rounds; round++) {
        for (int i = 0; i < s_ranks; i++)
            s_rank[i].round = round;
        atomic_store(&s_done, 0);
        int64_t t0 = s_now_ms();
        pthread_barrier_wait(&s_start);
        int kills = 0;
        while (atomic_load(&s_done) < s_ranks && kills < s_kills) {
            int64_t at = s_now_ms() + rand() % s_window_ms;
            while (s_now_ms() < at && atomic_load(&s_done) < s_ranks)
                usleep(1000);
            if (atomic_load(&s_done) >= s_ranks)
                break;
            kill(s_pid, SIGKILL);
            waitpid(s_pid, NULL, 0);
            kills++;
            usleep((useconds_t) (rand() % 300) * 1000);
            char bind[128];
            snprintf(bind, sizeof bind, "%s", s_endpoint);
            s_spawn(bind);
        }
        pthread_barrier_wait(&s_start);    /* every rank has finished */
        int64_t took = s_now_ms() - t0;
        total_ms += took;
        worst_ms = took > worst_ms ? took : worst_ms;
        total_kills += kills;

        char why[512] = "";
        char *shared0 = NULL;
        int64_t epoch = -1;
        int finished = 0;
        for (int i = 0; i < s_ranks && !*why; i++) {
            s_rank_t *r = &s_rank[i];
            if (r->rc != 0) {
                snprintf(why, sizeof why, "rank %d failed: rc %d: %s", i, r->rc, r->err);
                break;
            }
            finished++;
            char *shared = s_shared_fields(r->json);
            char *ep = s_field_json(r->json, "epoch");
            char *rank = s_field_json(r->json, "rank");
            char *ports = s_field_json(r->json, "ports");
            if (!shared || !ep || !rank || !ports)
                snprintf(why, sizeof why, "rank %d: malformed assignment %s", i, r->json);
            else if (atoi(rank) != i)
                snprintf(why, sizeof why, "rank %d got an assignment for rank %s", i, rank);
            else if (!shared0) {
                shared0 = strdup(shared);
                epoch = atoll(ep);
            } else if (strcmp(shared, shared0) != 0)
                snprintf(why, sizeof why, "rank %d diverges from rank 0 in shared fields:\n"
                         "# %.200s\n# %.200s", i, shared, shared0);
            if (!*why && ports) {
                if (!r->ports)
                    r->ports = strdup(ports);
                else if (strcmp(r->ports, ports) != 0)
                    snprintf(why, sizeof why, "rank %d: ports changed from %.80s to %.80s",
                             i, r->ports, ports);
            }
            free(shared);
            free(ep);
            free(rank);
            free(ports);
        }
        if (!*why && epoch != prev_epoch + 1)
            snprintf(why, sizeof why, "epoch %lld after %lld (one per round expected)",
                     (long long) epoch, (long long) prev_epoch);
        prev_epoch = epoch;
        free(shared0);
        if (*why) {
            failed++;
            printf("not ok %d - round %d: %s\n", round, round, why);
        } else
            printf("ok %d - round %d: %d/%d ranks, epoch %lld, %d kills, %lld ms\n", round,
                   round, finished, s_ranks, (long long) epoch, kills, (long long) took);
    }
    printf("# %d rounds, %d kills, %lld ms in all, slowest round %lld ms, %d failed\n",
           s_rounds, total_kills, (long long) total_ms, (long long) worst_ms, failed);
    for (int i = 0; i < s_ranks; i++)
        s_rank[i].round = -1;
    pthread_barrier_wait(&s_start);
    for (int i = 0; i < s_ranks; i++) {
        pthread_join(threads[i], NULL);
        free(s_rank[i].json);
        free(s_rank[i].ports);
    }
    free(s_rank);
    free(threads);
    kill(s_pid, SIGTERM);
    waitpid(s_pid, NULL, 0);
    if (!failed) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", s_dir);
    } else
        printf("# state dir and rdzvd.log kept in %s\n", s_dir);
    return failed ? 1 : 0;
}
