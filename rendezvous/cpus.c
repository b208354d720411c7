#include "cpus.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int rdzv_cpus_from_cpu_max(const char *text)
{
    long long quota, period;
    if (!text || sscanf(text, "%lld %lld", &quota, &period) != 2 || quota <= 0 || period <= 0)
        return 0;                            /* "max ..." fails the first %lld */
    long long cpus = (quota + period - 1) / period;
    return cpus > 4096 ? 4096 : (int) cpus;
}

/* The quota of this process's cgroup: v2 cpu.max, else v1 cfs_quota_us. */
static int s_quota_cpus(void)
{
    char text[128] = "";
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (f) {
        int cpus = fgets(text, sizeof text, f) ? rdzv_cpus_from_cpu_max(text) : 0;
        fclose(f);
        return cpus;
    }
    long long quota = -1, period = 0;
    f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r");
    if (f) {
        if (fscanf(f, "%lld", &quota) != 1)
            quota = -1;
        fclose(f);
    }
    f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r");
    if (f) {
        if (fscanf(f, "%lld", &period) != 1)
            period = 0;
        fclose(f);
    }
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
