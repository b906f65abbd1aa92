/* How many BLAS threads a rank runs by default: the cores the launcher bound it to, or, when it
 * is not bound (its affinity covers every online core), its share of the node's cores. Never
 * more threads than the rank's cores, so ranks never oversubscribe the machine. */
#define _GNU_SOURCE

#include "dp/backend.h"

#include <sched.h>
#include <stdio.h>
#include <unistd.h>

int dp_backend_cpu_default_threads(int local_size, char *why, size_t size)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    long bound = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : online;
    if (online < 1)
        online = 1;
    if (bound >= 1 && bound < online) {
        snprintf(why, size, "the %ld core%s this rank is bound to", bound, bound == 1 ? "" : "s");
        return (int)bound;
    }
    long share = online / (local_size > 0 ? local_size : 1);
    share = share > 0 ? share : 1;
    snprintf(why, size, "%ld core%s / %d rank%s on this node, unbound", online, online == 1 ? "" : "s", local_size,
             local_size == 1 ? "" : "s");
    return (int)share;
}
