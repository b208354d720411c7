#include "cpus.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int rdzv_cpus_from_cpu_max(const char *text)
{
    long long quota, period;
    if (!text || sscanf(text, "%lld %lld", &quota, &period) != 2 || quota <= 0 || period <= 0)
        return 0;                            /* "max ..." fails the first %lld */
    long long cpus = (quota + period - 1) / period;
    return cpus > 4096 ? 4096 : (int) cpus;
}

/* This process's cgroup under one hierarchy, from /proc/self/cgroup: the
 * v2 line "0::/PATH", or the v1 line whose controllers include "cpu"
 * ("4:cpu,cpuacct:/PATH"). "" for the root (and inside a cgroup namespace). */
static int s_cgroup_path(int v2, char *out, size_t len)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[512];
    int found = 0;
    while (!found && f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *ctl = strchr(line, ':'), *path = ctl ? strchr(ctl + 1, ':') : NULL;
        if (!path)
            continue;
        *path++ = '\0';
        ctl++;
        if (v2)
            found = strcmp(line, "0") == 0 && *ctl == '\0';
        else
            for (char *save = NULL, *c = strtok_r(ctl, ",", &save); c && !found;
                 c = strtok_r(NULL, ",", &save))
                found = strcmp(c, "cpu") == 0;
        if (found)
            snprintf(out, len, "%s", strcmp(path, "/") == 0 ? "" : path);
    }
    if (f)
        fclose(f);
    return found ? 0 : -1;
}

static long long s_read_ll(const char *path)
{
    long long v = -1;
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%lld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

/* The CPU quota of this process's cgroup: v2 cpu.max, else v1 cfs_quota_us. */
static int s_quota_cpus(void)
{
    char cg[400], path[512], text[128] = "";
    if (s_cgroup_path(1, cg, sizeof cg) == 0) {
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", cg);
        FILE *f = fopen(path, "r");
        if (f) {
            int cpus = fgets(text, sizeof text, f) ? rdzv_cpus_from_cpu_max(text) : 0;
            fclose(f);
            return cpus;
        }
    }
    if (s_cgroup_path(0, cg, sizeof cg) < 0)
        return 0;
    snprintf(path, sizeof path, "/sys/fs/cgroup/cpu%s/cpu.cfs_quota_us", cg);
    long long quota = s_read_ll(path);
    snprintf(path, sizeof path, "/sys/fs/cgroup/cpu%s/cpu.cfs_period_us", cg);
    long long period = s_read_ll(path);
    snprintf(text, sizeof text, "%lld %lld", quota, period);
    return rdzv_cpus_from_cpu_max(text);
}

int rdzv_cpus_usable(void)
{
    cpu_set_t set;
    long cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                            : sysconf(_SC_NPROCESSORS_ONLN);
    int quota = s_quota_cpus();
    if (quota > 0 && quota < cpus)
        cpus = quota;
    return cpus > 0 ? (int) cpus : 1;
}

unsigned long long rdzv_io_affinity(int shard, int shards, int io_threads)
{
    if (shards < 1 || io_threads < 1 || shard < 0 || shard >= shards)
        return 0;
    if (io_threads <= shards)             /* fewer threads: shards share them */
        return 1ULL << (shard % io_threads);
    unsigned long long mask = 0;
    for (int t = shard; t < io_threads && t < 64; t += shards)
        mask |= 1ULL << t;
    return mask;
}
