/* rdzv-release-bench: the core's part of a release, without sockets. N-1
 * ranks (one node each) join a group; the time of handling the last join is
 * what every rank of the group waits for under rdzvd's lock (plans laid out,
 * the journal records, N assignments queued). Then the N replies are
 * formatted, as the shards do after the lock. Repeats with a fresh state
 * directory and prints one JSON object with medians.
 *
 *   rdzv-release-bench [--ranks N] [--repeat R] [--one-node]
 */
#include "core_drive.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double s_now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static double s_median(double *v, int n)
{
    qsort(v, (size_t) n, sizeof *v, s_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void s_join(rdzv_core_t *core, int world, int rank, int one_node)
{
    char frame[512];
    int len = snprintf(frame, sizeof frame,
                       "{\"v\":1,\"id\":%d,\"op\":\"join\",\"group\":\"bench\",\"world\":%d,"
                       "\"rank\":%d,\"host\":\"10.0.%d.%d\",\"node\":\"%s%d\","
                       "\"session\":\"s%d\",\"timeout_ms\":60000,\"members\":false}",
                       rank, world, rank, rank / 256, rank % 256, one_node ? "node" : "pod-",
                       one_node ? 0 : rank, rank);
    rdzv_peer_t peer = { .len = sizeof rank };
    memcpy(peer.id, &rank, sizeof rank);
    drive_request(core, &peer, frame, (size_t) len, 1000);
}

int main(int argc, char **argv)
{
    int ranks = 1024, repeat = 9, one_node = 0;
    static const struct option opts[] = {
        { "ranks", required_argument, 0, 'n' }, { "repeat", required_argument, 0, 'r' },
        { "one-node", no_argument, 0, 'o' }, { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
    };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'n')
            ranks = atoi(optarg);
        else if (c == 'r')
            repeat = atoi(optarg);
        else if (c == 'o')
            one_node = 1;
        else {
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: rdzv-release-bench [--ranks N] [--repeat R] [--one-node]\n"
                    "  the core's share of a release of N ranks (default 1024), without\n"
                    "  sockets: medians of R (default 9) runs; --one-node puts every rank\n"
                    "  on one node (at most 400)\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (ranks < 2 || repeat < 1 || (one_node && ranks > 400)) {
        fprintf(stderr, "rdzv-release-bench: --ranks >= 2 (at most 400 on one node), --repeat >= 1\n");
        return 2;
    }
    double *held = calloc((size_t) repeat, sizeof *held);
    double *format = calloc((size_t) repeat, sizeof *format);
    /* The core logs every join to stderr; the bench is about the release. */
    if (!freopen("/dev/null", "w", stderr))
        return 1;
    for (int rep = 0; rep < repeat; rep++) {
        char dir[] = "/tmp/rdzv-release-bench-XXXXXX";
        if (!mkdtemp(dir))
            return 1;
        rdzv_config_t cfg = { .port_base = 19500, .ports_per_rank = 32, .port_limit = 32768,
                              .max_world = 1 << 20, .dead_after_ms = 15000, .do_fsync = false,
                              .state_dir = dir };
        char err[256];
        rdzv_core_t *core = rdzv_core_new(&cfg, err, sizeof err);
        if (!core) {
            printf("{\"error\":\"%s\"}\n", err);
            char cmd[128];
            snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
            if (system(cmd) != 0)
                printf("{\"error\":\"%s left behind\"}\n", dir);
            return 1;
        }
        for (int r = 1; r < ranks; r++)
            s_join(core, ranks, r, one_node);
        drive_commit(core, 1000, NULL, NULL);
        double t0 = s_now_us();
        s_join(core, ranks, 0, one_node);
        held[rep] = s_now_us() - t0;
        rdzv_commit_t commit;
        rdzv_core_begin(core, 1000);
        rdzv_core_end(core, &commit);
        rdzv_core_wait(core, commit.gate);
        /* Every peer is on shard 0 here. */
        rdzv_outbox_t *out = &commit.out[0];
        t0 = s_now_us();
        size_t ok = 0;
        for (size_t i = 0; i < out->len; i++)
            ok += rdzv_reply_render(&out->v[i]) == 0 && out->v[i].text
                  && strstr(out->v[i].text, "\"assignment\"") != NULL;
        format[rep] = s_now_us() - t0;
        for (size_t i = 0; i < out->len; i++)
            rdzv_reply_clear(&out->v[i]);
        free(out->v);
        rdzv_core_destroy(&core);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0 || ok != (size_t) ranks) {
            printf("{\"error\":\"%zu of %d assignments\"}\n", ok, ranks);
            return 1;
        }
    }
    double held_median = s_median(held, repeat), format_median = s_median(format, repeat);
    printf("{\"ranks\":%d,\"repeat\":%d,\"one_node\":%s,\"release_held_us\":%.1f,"
           "\"release_held_min_us\":%.1f,\"format_all_us\":%.1f}\n", ranks, repeat,
           one_node ? "true" : "false", held_median, held[0], format_median);
    free(held);
    free(format);
    return 0;
}
