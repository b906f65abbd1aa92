/* The progress thread: dp_comm_progress every interval while the caller computes, for
 * computation that cannot be cut into pieces with dp_comm_progress between them (one long
 * GEMM; a host waiting on a GPU). It takes the pool's lock for each call, as the caller's
 * calls do, so they take turns; between calls it sleeps, leaving the core to computation
 * (measured in docs/ALGORITHMS.md, "Progress": a thread that never sleeps slows the step). */
#include "src/comm/request.h"

#include "dp/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct dp_progress_thread {
    dp_comm *comm;
    pthread_t id;
    struct timespec pause;
    int stop;
};

static void *progress_loop(void *arg)
{
    struct dp_progress_thread *t = arg;
    struct dp_request_pool *pool = t->comm->pool;
    for (;;) {
        pthread_mutex_lock(&pool->lock);
        int stop = t->stop;
        /* The first failure stays with the pool, where the caller's next call reports it. */
        if (!stop && !pool->thread_status && (pool->thread_status = dp_request_progress_locked(t->comm)))
            snprintf(pool->thread_error, sizeof pool->thread_error, "%s", dp_last_error());
        pthread_mutex_unlock(&pool->lock);
        if (stop)
            return NULL;
        if (t->pause.tv_nsec)
            nanosleep(&t->pause, NULL);
    }
}

int dp_comm_start_progress_thread(dp_comm *c, long interval_us)
{
    int level = MPI_THREAD_SINGLE;
    DP_MPI_CHECK(MPI_Query_thread(&level));
    if (level != MPI_THREAD_MULTIPLE)
        return dp_fail(DP_EINVAL, "a progress thread needs MPI_THREAD_MULTIPLE (MPI_Init_thread), which this "
                       "MPI process does not have: progress with dp_comm_progress instead");
    if (interval_us < 0 || interval_us >= 1000000)
        return dp_fail(DP_EINVAL, "progress thread interval %ld us: must be 0 to 999999", interval_us);
    if (c->progress_thread)
        return dp_fail(DP_EINVAL, "a progress thread is already running on this communicator");
    struct dp_progress_thread *t = dp_calloc(1, sizeof *t, "the progress thread");
    if (!t)
        return DP_ENOMEM;
    t->comm = c;
    t->pause.tv_nsec = interval_us * 1000;
    int e = pthread_create(&t->id, NULL, progress_loop, t);
    if (e) {
        free(t);
        return dp_fail(DP_EINVAL, "cannot start the progress thread: %s", strerror(e));
    }
    pthread_mutex_lock(&c->pool->lock);
    c->progress_thread = t;
    pthread_mutex_unlock(&c->pool->lock);
    return 0;
}

void dp_comm_stop_progress_thread(dp_comm *c)
{
    struct dp_progress_thread *t = c->progress_thread;
    if (!t)
        return;
    pthread_mutex_lock(&c->pool->lock);
    t->stop = 1;
    c->progress_thread = NULL;
    c->pool->thread_status = 0; /* its failure goes with it */
    pthread_mutex_unlock(&c->pool->lock);
    pthread_join(t->id, NULL);
    free(t);
}
