/* How many CPUs rdzvd may use, for sizing its shards and I/O threads: the
 * CPUs of its affinity mask (a cpuset), further capped by a cgroup CPU quota
 * (a Kubernetes CPU limit), rounded up. */
#ifndef RDZV_CPUS_H
#define RDZV_CPUS_H

int rdzv_cpus_usable(void);

/* CPUs a cgroup v2 cpu.max line ("QUOTA PERIOD" or "max PERIOD") allows,
 * rounded up; 0 for "max" or text it cannot read. */
int rdzv_cpus_from_cpu_max(const char *text);

/* The ZMQ_AFFINITY mask of shard (of shards) when libzmq runs io_threads
 * I/O threads: the threads dealt to the shards in turn, so each shard's
 * connections live on threads of their own. */
unsigned long long rdzv_io_affinity(int shard, int shards, int io_threads);

#endif
