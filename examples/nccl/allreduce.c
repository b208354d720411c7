/* One NCCL all-reduce whose unique ID comes from rdzv.
 *
 * Each rank joins its group through librdzv (or, with --from-env, takes the
 * assignment that `rdzv join -- ...` exported), builds an NCCL communicator
 * with the assignment's ID, all-reduces a buffer of floats holding rank+1 and
 * checks that every element is world*(world+1)/2. It prints one JSON line with
 * the join-to-assignment, ncclCommInitRank and first all-reduce times in ms.
 *
 * Exit status: 0 success; 1 failure; 2 usage; 77 (meson's "skipped") when
 * there is no CUDA device, unless --allow-no-gpu turns that into 0. */
#include "nccl_id.h"
#include "rdzv.h"
#include "rdzv_proto.h"
#include "rdzv_util.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* nccl.h declares a few functions without prototypes. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#define EXIT_USAGE 2
#define EXIT_SKIP 77
#define DEVICE_PICK (-1)       /* no --device: LOCAL_RANK or rank % count */
#define DEVICE_MALFORMED (-2)
#define DEFAULT_COUNT (1u << 20)
/* What `rdzv join -- PROG` exports for PROG (see rdzv_assignment_env). */
#define ENV_NCCL_ID "RDZV_NCCL_UNIQUE_ID"
#define ENV_EPOCH "RDZV_EPOCH"

typedef struct {
    const char *server;
    const char *group;
    int world;
    int rank;
    int device;          /* DEVICE_PICK, DEVICE_MALFORMED or an index */
    int timeout_ms;
    size_t count;
    bool allow_no_gpu;
    bool from_env;
} s_opts_t;

typedef struct {
    unsigned char id[RDZV_NCCL_ID_BYTES];
    int64_t epoch;
    double join_ms;      /* < 0: no join was made (--from-env) */
    double init_ms;
    double allreduce_ms;
    int device;
    char root[RDZV_NCCL_ID_ADDR_MAX + 8];
} s_run_t;

static double s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static void s_usage(FILE *f)
{
    fprintf(f,
        "usage: allreduce [--server ENDPOINT] [--group NAME] [--world N] [--rank R]\n"
        "                 [--device D] [--count N] [--timeout SEC]\n"
        "                 [--from-env] [--allow-no-gpu]\n"
        "  --server, --group, --world, --rank default to RDZV_SERVER (else\n"
        "  " RDZV_DEFAULT_ENDPOINT "), RDZV_GROUP, RDZV_WORLD, RDZV_RANK.\n"
        "  --from-env: do not join; take the assignment that `rdzv join -- allreduce`\n"
        "  exported (" ENV_NCCL_ID ", RANK, WORLD_SIZE); implied when " ENV_NCCL_ID "\n"
        "  is set and --server is not given.\n"
        "  --device defaults to LOCAL_RANK, else rank %% device count.\n");
}

/* Parses a non-negative int; returns -1 if text is not one. */
static int s_parse_int(const char *text)
{
    if (!text || !*text)
        return -1;
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end || v < 0 || v > INT_MAX)
        return -1;
    return (int) v;
}

static int s_env_int(const char *name)
{
    return s_parse_int(getenv(name));
}

/* Returns 0, or -1 with *why naming what is wrong. */
static int s_parse_opts(int argc, char **argv, s_opts_t *o, const char **why)
{
    static const struct option longopts[] = {
        {"server", required_argument, NULL, 's'},
        {"group", required_argument, NULL, 'g'},
        {"world", required_argument, NULL, 'w'},
        {"rank", required_argument, NULL, 'r'},
        {"device", required_argument, NULL, 'd'},
        {"count", required_argument, NULL, 'c'},
        {"timeout", required_argument, NULL, 't'},
        {"from-env", no_argument, NULL, 'e'},
        {"allow-no-gpu", no_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (s_opts_t) {getenv("RDZV_SERVER"), getenv("RDZV_GROUP"), s_env_int("RDZV_WORLD"),
                     s_env_int("RDZV_RANK"), DEVICE_PICK, RDZV_DEFAULT_TIMEOUT_MS, DEFAULT_COUNT,
                     false, false};
    int c, count = (int) DEFAULT_COUNT, timeout_s = RDZV_DEFAULT_TIMEOUT_MS / 1000;
    bool server_flag = false;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 's': o->server = optarg; server_flag = true; break;
        case 'g': o->group = optarg; break;
        case 'w': o->world = s_parse_int(optarg); break;
        case 'r': o->rank = s_parse_int(optarg); break;
        case 'd':
            o->device = s_parse_int(optarg);
            if (o->device < 0)
                o->device = DEVICE_MALFORMED;
            break;
        case 'c': count = s_parse_int(optarg); break;
        case 't': timeout_s = s_parse_int(optarg); break;
        case 'e': o->from_env = true; break;
        case 'a': o->allow_no_gpu = true; break;
        case 'h': s_usage(stdout); exit(EXIT_SUCCESS);
        default: *why = "unknown option"; return -1;
        }
    }
    *why = "stray arguments, or a bad --count, --timeout or --device";
    if (optind != argc || count <= 0 || timeout_s <= 0 || timeout_s > INT_MAX / 1000 ||
        o->device == DEVICE_MALFORMED)
        return -1;
    o->count = (size_t) count;
    o->timeout_ms = timeout_s * 1000;
    const char *env_id = getenv(ENV_NCCL_ID);
    /* Started by `rdzv join -- allreduce`: joining again would start a new epoch. */
    if (!server_flag && env_id && *env_id)
        o->from_env = true;
    if (o->from_env) {
        o->world = s_env_int("WORLD_SIZE");
        o->rank = s_env_int("RANK");
    } else if (!o->group) {
        *why = "--group (or RDZV_GROUP) is required";
        return -1;
    }
    if (!o->server)
        o->server = RDZV_DEFAULT_ENDPOINT;
    *why = o->from_env ? "RANK and WORLD_SIZE must be set, 0 <= RANK < WORLD_SIZE"
                       : "--world and --rank (or RDZV_WORLD, RDZV_RANK): 0 <= rank < world";
    if (o->world <= 0 || o->rank < 0 || o->rank >= o->world)
        return -1;
    return 0;
}

/* Joins the group; on success run->id, epoch and join_ms are filled. */
static int s_join(const s_opts_t *o, s_run_t *run)
{
    char err[256] = "";
    rdzv_client_t *client = rdzv_client_new(o->server, NULL, err, sizeof err);
    if (!client) {
        fprintf(stderr, "allreduce: cannot create a client for %s: %s\n", o->server, err);
        return -1;
    }
    rdzv_join_args_t args = {.group = o->group, .world = o->world, .rank = o->rank,
                             .timeout_ms = o->timeout_ms, .nccl_id = "server"};
    rdzv_assignment_t *a = NULL;
    double start = s_now_ms();
    int rc = rdzv_join(client, &args, &a);
    run->join_ms = s_now_ms() - start;
    if (rc != RDZV_OK) {
        fprintf(stderr, "allreduce: join failed: %s\n", rdzv_client_error(client));
    } else if (rdzv_assignment_nccl_id(a, run->id) != RDZV_OK) {
        fprintf(stderr, "allreduce: the assignment has no NCCL ID "
                        "(rdzvd built without NCCL?)\n");
        rc = RDZV_ERR_USAGE;
    } else {
        run->epoch = rdzv_assignment_epoch(a);
    }
    rdzv_assignment_destroy(&a);
    rdzv_client_destroy(&client);
    return rc == RDZV_OK ? 0 : -1;
}

static int s_take_env(s_run_t *run)
{
    const char *hex = getenv(ENV_NCCL_ID);
    if (rdzv_hex_decode(hex, run->id, RDZV_NCCL_ID_BYTES) != 0) {
        fprintf(stderr, "allreduce: %s is %s, not 256 hex digits\n", ENV_NCCL_ID,
                hex ? "malformed" : "unset");
        return -1;
    }
    const char *epoch = getenv(ENV_EPOCH);
    run->epoch = epoch ? strtoll(epoch, NULL, 10) : 0;
    run->join_ms = -1;
    return 0;
}

/* "address:port" of the NCCL root, for the report; "?" if undecodable. */
static void s_describe_root(s_run_t *run)
{
    rdzv_nccl_id_info_t info;
    if (rdzv_nccl_id_decode(run->id, &info, RDZV_NCCL_LAYOUT_AUTO) != 0)
        snprintf(run->root, sizeof run->root, "?");
    else if (info.family == AF_INET6)
        snprintf(run->root, sizeof run->root, "[%s]:%u", info.address, (unsigned) info.port);
    else
        snprintf(run->root, sizeof run->root, "%s:%u", info.address, (unsigned) info.port);
}

static void s_print_ms(const char *key, double ms)
{
    if (ms < 0)
        printf(",\"%s\":null", key);
    else
        printf(",\"%s\":%.3f", key, ms);
}

/* Group names are printable ASCII; only quote and backslash need escaping. */
static void s_print_json_string(const char *s)
{
    putchar('"');
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            putchar('\\');
        putchar(*s);
    }
    putchar('"');
}

static void s_report(const s_opts_t *o, const s_run_t *run, bool gpu, bool ok)
{
    printf("{\"group\":");
    s_print_json_string(o->group);
    printf(",\"epoch\":%lld,\"rank\":%d,\"world\":%d,\"nccl_root\":\"%s\"",
           (long long) run->epoch, o->rank, o->world, run->root);
    if (gpu)
        printf(",\"device\":%d,\"count\":%zu", run->device, o->count);
    else
        printf(",\"device\":null");
    s_print_ms("join_ms", run->join_ms);
    s_print_ms("comm_init_ms", gpu ? run->init_ms : -1);
    s_print_ms("allreduce_ms", gpu ? run->allreduce_ms : -1);
    printf(",\"sum_ok\":%s}\n", !gpu ? "null" : ok ? "true" : "false");
    fflush(stdout);
}

/* Returns the device count, or 0 with the reason in why. */
static int s_device_count(char *why, size_t len)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        snprintf(why, len, "cudaGetDeviceCount: %s", cudaGetErrorString(err));
        return 0;
    }
    if (n == 0)
        snprintf(why, len, "cudaGetDeviceCount: 0 devices");
    return n;
}

static int s_pick_device(const s_opts_t *o, int ndev)
{
    if (o->device >= 0)
        return o->device;
    int local = s_env_int("LOCAL_RANK");
    return local >= 0 ? local % ndev : o->rank % ndev;
}

#define CUDA_OK(call)                                                          \
    do {                                                                       \
        cudaError_t e_ = (call);                                               \
        if (e_ != cudaSuccess) {                                               \
            fprintf(stderr, "allreduce: %s: %s\n", #call, cudaGetErrorString(e_)); \
            goto cleanup;                                                      \
        }                                                                      \
    } while (0)

#define NCCL_OK(call)                                                          \
    do {                                                                       \
        ncclResult_t r_ = (call);                                              \
        if (r_ != ncclSuccess) {                                               \
            fprintf(stderr, "allreduce: %s: %s\n", #call, ncclGetErrorString(r_)); \
            goto cleanup;                                                      \
        }                                                                      \
    } while (0)

/* Fills a device buffer with rank+1, all-reduces it and checks the sum.
 * Returns 0 when every element is right. */
static int s_allreduce(const s_opts_t *o, s_run_t *run)
{
    int rc = -1;
    float *host = NULL, *dev = NULL;
    cudaStream_t stream = NULL;
    ncclComm_t comm = NULL;
    ncclUniqueId id;
    memcpy(id.internal, run->id, sizeof id.internal);

    CUDA_OK(cudaSetDevice(run->device));
    CUDA_OK(cudaStreamCreate(&stream));
    host = malloc(o->count * sizeof *host);
    if (!host)
        goto cleanup;
    for (size_t i = 0; i < o->count; i++)
        host[i] = (float) (o->rank + 1);
    CUDA_OK(cudaMalloc((void **) &dev, o->count * sizeof *dev));
    CUDA_OK(cudaMemcpy(dev, host, o->count * sizeof *dev, cudaMemcpyHostToDevice));

    double start = s_now_ms();
    NCCL_OK(ncclCommInitRank(&comm, o->world, id, o->rank));
    run->init_ms = s_now_ms() - start;
    start = s_now_ms();
    NCCL_OK(ncclAllReduce(dev, dev, o->count, ncclFloat, ncclSum, comm, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    run->allreduce_ms = s_now_ms() - start;

    CUDA_OK(cudaMemcpy(host, dev, o->count * sizeof *dev, cudaMemcpyDeviceToHost));
    const float want = (float) o->world * (float) (o->world + 1) / 2.0f;
    rc = 0;
    for (size_t i = 0; i < o->count && rc == 0; i++) {
        if (host[i] != want) {
            fprintf(stderr, "allreduce: element %zu is %g, want %g\n", i,
                    (double) host[i], (double) want);
            rc = -1;
        }
    }
cleanup:
    if (comm)
        ncclCommDestroy(comm);
    if (dev)
        cudaFree(dev);
    if (stream)
        cudaStreamDestroy(stream);
    free(host);
    return rc;
}

int main(int argc, char **argv)
{
    s_opts_t o;
    const char *why = "";
    if (s_parse_opts(argc, argv, &o, &why) != 0) {
        fprintf(stderr, "allreduce: %s\n", why);
        s_usage(stderr);
        return EXIT_USAGE;
    }
    s_run_t run;
    memset(&run, 0, sizeof run);
    if ((o.from_env ? s_take_env(&run) : s_join(&o, &run)) != 0)
        return EXIT_FAILURE;
    s_describe_root(&run);

    char no_device[128] = "";
    int ndev = s_device_count(no_device, sizeof no_device);
    if (ndev <= 0) {
        s_report(&o, &run, false, false);
        fprintf(stderr, "no CUDA device: stopping before ncclCommInitRank (%s)\n", no_device);
        return o.allow_no_gpu ? EXIT_SUCCESS : EXIT_SKIP;
    }
    run.device = s_pick_device(&o, ndev);
    int rc = s_allreduce(&o, &run);
    s_report(&o, &run, true, rc == 0);
    return rc == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
