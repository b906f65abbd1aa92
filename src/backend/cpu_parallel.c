/* The CPU backend's loops on the rank's cores: the caller and threads - 1 workers of our own,
 * each taking one contiguous part of an operation. Workers sleep on a condition variable
 * between operations (they never spin, so they take no time from OpenBLAS's threads, which
 * run on the same cores between the loops), and an operation smaller than two grains runs on
 * the caller alone, where waking a worker would cost more than it saves. Parts are fixed by
 * (n, grain, threads) alone and every loop computes each element or column as the whole loop
 * would, so the split never changes a bit. */
#include "config.h"

#include "src/backend/cpu_parallel.h"

#include <pthread.h>

/* Part boundaries fall on multiples of this many rows, columns or elements: 64-byte lines of
 * floats are never written by two threads. */
#define PART_ALIGN 16

static struct {
    pthread_mutex_t lock;
    pthread_cond_t start, finished;
    int threads; /* the rank's threads, the caller included */
    int workers; /* workers started (up to threads - 1; fewer where one failed to start) */
    int busy;    /* an operation is running: another caller's runs on that caller alone */
    unsigned long generation; /* operations started: a worker runs each one once */
    dp_loop_fn fn;
    const dp_loop_args *args;
    size_t n;
    int parts, pending;
    size_t counts[DP_CPU_MAX_THREADS];
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .start = PTHREAD_COND_INITIALIZER,
          .finished = PTHREAD_COND_INITIALIZER, .threads = 1};

/* Where part `part` of `parts` begins (n at the end), on a multiple of PART_ALIGN. */
static size_t boundary(size_t n, int part, int parts)
{
    if (part >= parts)
        return n;
    size_t p = (size_t)part, at = n / (size_t)parts * p + n % (size_t)parts * p / (size_t)parts;
    return at - at % PART_ALIGN;
}

static void *worker(void *arg)
{
    int self = (int)(size_t)arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        while (pool.generation == seen)
            pthread_cond_wait(&pool.start, &pool.lock);
        seen = pool.generation;
        if (self >= pool.parts)
            continue;
        dp_loop_fn fn = pool.fn;
        const dp_loop_args *args = pool.args;
        size_t begin = boundary(pool.n, self, pool.parts), end = boundary(pool.n, self + 1, pool.parts);
        pthread_mutex_unlock(&pool.lock);
        size_t count = fn(args, begin, end);
        pthread_mutex_lock(&pool.lock);
        pool.counts[self] = count;
        if (--pool.pending == 0)
            pthread_cond_signal(&pool.finished);
    }
    return NULL;
}

/* Starts the workers the first time an operation can use them. */
static void start_workers(void)
{
    while (pool.workers < pool.threads - 1) {
        pthread_t id;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int failed = pthread_create(&id, &attr, worker, (void *)(size_t)(pool.workers + 1));
        pthread_attr_destroy(&attr);
        if (failed) {
            pool.threads = pool.workers + 1; /* fewer parts, the same results */
            return;
        }
        pool.workers++;
    }
}

void dp_cpu_parallel_set_threads(int threads)
{
    pthread_mutex_lock(&pool.lock);
    /* Workers beyond a lowered count stay asleep: parts go to the first threads - 1 only. */
    pool.threads = threads < 1 ? 1 : threads > DP_CPU_MAX_THREADS ? DP_CPU_MAX_THREADS : threads;
    pthread_mutex_unlock(&pool.lock);
}

size_t dp_cpu_parallel(dp_loop_fn fn, const dp_loop_args *args, size_t n, size_t grain)
{
    size_t most = grain ? n / grain : n;
    int parts = most < (size_t)pool.threads ? (int)most : pool.threads;
    if (parts <= 1)
        return fn(args, 0, n);
    pthread_mutex_lock(&pool.lock);
    if (pool.busy) {
        pthread_mutex_unlock(&pool.lock);
        return fn(args, 0, n);
    }
    start_workers();
    parts = parts < pool.threads ? parts : pool.threads; /* a worker failed to start */
    pool.busy = 1;
    pool.fn = fn;
    pool.args = args;
    pool.n = n;
    pool.parts = parts;
    pool.pending = parts - 1;
    pool.generation++;
    pthread_cond_broadcast(&pool.start);
    pthread_mutex_unlock(&pool.lock);
    size_t count = fn(args, 0, boundary(n, 1, parts));
    pthread_mutex_lock(&pool.lock);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.finished, &pool.lock);
    for (int p = 1; p < parts; p++)
        count += pool.counts[p];
    pool.busy = 0;
    pthread_mutex_unlock(&pool.lock);
    return count;
}
