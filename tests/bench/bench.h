/* rdzv-bench: shared declarations of the bench's parts (see rdzv_bench.c). */
#ifndef RDZV_BENCH_H
#define RDZV_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One simulated rank's outcome, in memory shared by every worker process.
 * Times are CLOCK_MONOTONIC nanoseconds (one clock for every process). */
typedef struct {
    int64_t t_connect;       /* connect() called */
    int64_t t_sent;          /* join (or floor request) written */
    int64_t t_recv;          /* assignment (or floor reply) read in full */
    int64_t t_arrived;       /* the kernel's receive time of its last bytes
                              * (SO_TIMESTAMPNS); 0 if not given */
    int32_t ok;              /* 1: a valid assignment for this rank */
    int32_t port;            /* first port of the plan (floor: 0) */
} bench_rank_t;

typedef enum { WIRE_ZMTP, WIRE_RAW } bench_wire_t;

/* What one lean worker does: connect to 127.0.0.1:port for each rank listed,
 * speak the wire, send its request, read one reply. */
typedef struct {
    bench_wire_t wire;
    int port;
    const int *ranks;        /* global rank indices this worker simulates */
    size_t count;
    int group_size;          /* ranks per group (world of each group) */
    const char *group_prefix; /* group name is prefix + (global / group_size) */
    const char *node_prefix;
    bool members;            /* ask for the members list in replies */
    bool any_reply;          /* ZMTP: any one message answers (the zmq floor's) */
    int timeout_ms;
    bool busy_poll;          /* never sleep in epoll_wait: ranks whose waking
                              * costs the server nothing, as on other hosts */
    int window;              /* >0: at most this many connections of this
                              * process wait for the server's greeting */
    bench_rank_t *out;       /* indexed by global rank */
} bench_lean_job_t;

int64_t bench_now_ns(void);
/* Raises RLIMIT_NOFILE's soft limit to the hard limit; returns the new soft one. */
long bench_raise_nofile(void);
/* Runs the job to completion (or timeout); returns the number of ranks
 * that got a valid reply. */
size_t bench_lean_run(const bench_lean_job_t *job);
/* The address a simulated rank gives as its host: one of its own in
 * 127.0.0.0/8 for each rank (each its own node), as each rank Pod has its
 * own address. Nothing binds it; rdzvd only records it. With every node
 * name on one address, rdzvd would check each release against every node
 * of that address for plans that overlap (documents.c), a check meant for
 * a few names sharing one network namespace. */
void bench_rank_host(int global, char *buf, size_t len);
/* The join request text for one rank (malloc'd). */
char *bench_join_json(const char *group, int world, int rank, const char *host, const char *node,
                      const char *session, bool members, int timeout_ms);
/* Checks a join reply; returns 1 with *port set if it is an assignment for
 * `rank`, else 0. */
int bench_check_reply(const char *text, size_t len, int rank, int *port);

/* The floor (floor.c): a minimal epoll server. Forks it, listening on
 * 127.0.0.1:0; it answers every connection once `expect` requests have
 * arrived, `threads` writers a slice each, then exits when its peers close.
 * Returns its pid, the port in *port. */
int bench_floor_spawn(size_t expect, size_t reply_bytes, int threads, int *port);
/* What both floors answer each request with, in bytes. */
#define BENCH_FLOOR_REPLY_BYTES 600

/* The libzmq floor (zmq_floor.c): a bare ROUTER server in rdzvd's shape. */
typedef struct {
    int shards;              /* ROUTER sockets, a thread each */
    int io_threads;          /* libzmq I/O threads */
    int listeners;           /* SO_REUSEPORT listeners dealt to the shards */
} bench_zmq_shape_t;

/* rdzvd's default shape on this machine (rdzvd.c). */
void bench_zmq_shape_default(bench_zmq_shape_t *shape);
/* Forks the libzmq floor, listening on 127.0.0.1; once `expect` requests
 * have arrived it answers each with reply_bytes, from the shard that took
 * it; it serves until SIGTERM. Returns its pid, the port in *port. */
int bench_zmq_floor_spawn(size_t expect, size_t reply_bytes, const bench_zmq_shape_t *shape,
                          int *port);

#endif
