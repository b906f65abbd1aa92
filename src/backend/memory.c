/* The allocation counter: a book of live backend allocations (pointer, bytes, kind), totals
 * per kind and their peaks, and the per-process limit. Allocations happen before training
 * and at its end, a few hundred at most, so a list searched from its newest entry is enough. */
#include "dp/memory.h"

#include "dp/error.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    const void *ptr;
    size_t bytes;
    dp_memory_kind kind;
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static entry *entries;
static size_t used, capacity;
static dp_memory_usage usage;
static long refusals;
static double limit_mb; /* the limit as it was given, for messages */

static const char *const kind_names[DP_MEM_KINDS] = {
    [DP_MEM_PARAMETERS] = "parameters", [DP_MEM_GRADIENTS] = "gradients",
    [DP_MEM_OPTIMIZER] = "optimizer state", [DP_MEM_WORKING] = "working buffers",
    [DP_MEM_BUFFERS] = "running statistics", [DP_MEM_ACTIVATIONS] = "activations",
    [DP_MEM_DATA] = "data",
    [DP_MEM_COMM] = "collective scratch", [DP_MEM_OTHER] = "other",
};

const char *dp_memory_kind_name(dp_memory_kind kind)
{
    return (unsigned)kind < DP_MEM_KINDS ? kind_names[kind] : "unknown";
}

static double mib(size_t bytes)
{
    return (double)bytes / (1 << 20);
}

int dp_memory_admit(size_t bytes, dp_memory_kind kind, const char *what)
{
    dp_memory_usage now = dp_memory_usage_now();
    size_t limit = now.limit, held = now.total;
    if (!limit || (bytes <= limit && held <= limit - bytes))
        return 0;
    pthread_mutex_lock(&lock);
    refusals++;
    pthread_mutex_unlock(&lock);
    return dp_fail(DP_ENOMEM, "--max-memory-mb %g: %.2f MiB of %s for %s would bring this rank to %.2f "
                   "MiB of backend memory (it holds %.2f MiB: parameters %.2f, gradients %.2f, optimizer "
                   "state %.2f, working buffers %.2f, activations %.2f, data %.2f, collective scratch %.2f)",
                   limit_mb, mib(bytes), dp_memory_kind_name(kind), what, mib(held + bytes), mib(held),
                   mib(now.bytes[DP_MEM_PARAMETERS]), mib(now.bytes[DP_MEM_GRADIENTS]),
                   mib(now.bytes[DP_MEM_OPTIMIZER]), mib(now.bytes[DP_MEM_WORKING]),
                   mib(now.bytes[DP_MEM_ACTIVATIONS]), mib(now.bytes[DP_MEM_DATA]), mib(now.bytes[DP_MEM_COMM]));
}

static void add(dp_memory_kind kind, size_t bytes, int sign)
{
    if (sign > 0) {
        usage.bytes[kind] += bytes;
        usage.total += bytes;
    } else {
        usage.bytes[kind] -= bytes;
        usage.total -= bytes;
    }
    if (usage.bytes[kind] > usage.peak[kind])
        usage.peak[kind] = usage.bytes[kind];
    if (usage.total > usage.peak_total)
        usage.peak_total = usage.total;
}

void dp_memory_record(const void *ptr, size_t bytes, dp_memory_kind kind)
{
    if (!ptr || (unsigned)kind >= DP_MEM_KINDS)
        return;
    pthread_mutex_lock(&lock);
    if (used == capacity) {
        size_t grown_capacity = capacity ? 2 * capacity : 256;
        entry *grown = realloc(entries, grown_capacity * sizeof *grown);
        if (!grown) { /* the books lose this entry; the allocation itself stands */
            pthread_mutex_unlock(&lock);
            return;
        }
        entries = grown;
        capacity = grown_capacity;
    }
    entries[used++] = (entry){ptr, bytes, kind};
    add(kind, bytes, 1);
    pthread_mutex_unlock(&lock);
}

void dp_memory_release(const void *ptr)
{
    if (!ptr)
        return;
    pthread_mutex_lock(&lock);
    for (size_t i = used; i-- > 0;)
        if (entries[i].ptr == ptr) {
            add(entries[i].kind, entries[i].bytes, -1);
            entries[i] = entries[--used];
            break;
        }
    if (used == 0) {
        free(entries);
        entries = NULL;
        capacity = 0;
    }
    pthread_mutex_unlock(&lock);
}

static void reset_peak_locked(void)
{
    memcpy(usage.peak, usage.bytes, sizeof usage.peak);
    usage.peak_total = usage.total;
}

void dp_memory_set_limit_mb(double mb)
{
    pthread_mutex_lock(&lock);
    usage.limit = (size_t)(mb * (double)(1 << 20));
    limit_mb = mb;
    refusals = 0;
    reset_peak_locked();
    pthread_mutex_unlock(&lock);
}

long dp_memory_refusals(void)
{
    pthread_mutex_lock(&lock);
    long count = refusals;
    pthread_mutex_unlock(&lock);
    return count;
}

dp_memory_usage dp_memory_usage_now(void)
{
    pthread_mutex_lock(&lock);
    dp_memory_usage now = usage;
    pthread_mutex_unlock(&lock);
    return now;
}
