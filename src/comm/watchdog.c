#include "dp/watchdog.h"

#include "dp/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ARRIVAL_TAG = 0x7a11, WATCHDOG_EXIT_CODE = 3 };
/* Other ranks give rank 0, which can name the missing ranks, time to report first. */
static const double NON_ROOT_GRACE_SECONDS = 3.0;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Lists the ranks whose arrival message for the current operation has not come. */
static void describe_missing(dp_watchdog *w, char *text, size_t size)
{
    if (!w->track_arrivals || w->rank != 0) {
        snprintf(text, size, "unknown here (rank 0 tracks arrivals%s)",
                 w->track_arrivals ? "" : "; MPI lacks MPI_THREAD_MULTIPLE");
        return;
    }
    size_t used = 0;
    text[0] = '\0';
    for (int r = 1; r < w->size; r++) {
        int arrived = 0;
        MPI_Test(&w->arrivals[r - 1], &arrived, MPI_STATUS_IGNORE);
        if (!arrived && used < size)
            used += (size_t)snprintf(text + used, size - used, "%s%d", used ? ", " : "", r);
    }
    if (!used)
        snprintf(text, size, "none (all ranks entered it; one is stuck inside)");
}

static void report_and_abort(dp_watchdog *w, double waited)
{
    char missing[512];
    describe_missing(w, missing, sizeof missing);
    fprintf(stderr, "dp_worker: rank %d: error: watchdog: step %ld: %s has not completed after %.0f s "
                    "(--timeout %.0f); ranks that have not arrived: %s\n",
            w->rank, w->step, w->operation, waited, w->timeout, missing);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, WATCHDOG_EXIT_CODE);
    _Exit(WATCHDOG_EXIT_CODE);
}

static void *watch(void *arg)
{
    dp_watchdog *w = arg;
    double limit = w->timeout + (w->rank != 0 && w->track_arrivals ? NON_ROOT_GRACE_SECONDS : 0.0);
    pthread_mutex_lock(&w->lock);
    while (!w->stopping) {
        if (w->inside && now_seconds() - w->entered_at > limit)
            report_and_abort(w, now_seconds() - w->entered_at);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 200 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&w->wake, &w->lock, &until);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static int start_arrival_receives(dp_watchdog *w)
{
    w->arrivals = dp_calloc((size_t)w->size, sizeof *w->arrivals, "watchdog requests");
    w->arrival_sequence = dp_calloc((size_t)w->size, sizeof *w->arrival_sequence, "watchdog buffers");
    if (!w->arrivals || !w->arrival_sequence)
        return DP_ENOMEM;
    for (int r = 1; r < w->size; r++)
        DP_MPI_CHECK(MPI_Recv_init(&w->arrival_sequence[r - 1], 1, MPI_LONG, r, ARRIVAL_TAG,
                                   w->comm, &w->arrivals[r - 1]));
    if (w->size > 1)
        DP_MPI_CHECK(MPI_Startall(w->size - 1, w->arrivals));
    return 0;
}

int dp_watchdog_start(dp_watchdog *w, dp_comm *c, double timeout)
{
    memset(w, 0, sizeof *w);
    w->timeout = timeout;
    if (timeout <= 0.0)
        return 0;
    w->rank = c->rank;
    w->size = c->size;
    int level = MPI_THREAD_SINGLE;
    DP_MPI_CHECK(MPI_Query_thread(&level));
    w->track_arrivals = level == MPI_THREAD_MULTIPLE;
    if (w->track_arrivals) {
        DP_MPI_CHECK(MPI_Comm_dup(c->comm, &w->comm));
        int status = w->rank == 0 ? start_arrival_receives(w) : 0;
        if (status)
            return status;
    }
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    if (pthread_create(&w->thread, NULL, watch, w) != 0)
        return dp_fail(DP_EINVAL, "cannot start the watchdog thread: %s", strerror(errno));
    return 0;
}

void dp_watchdog_set_step(dp_watchdog *w, long step)
{
    if (w->timeout <= 0.0)
        return;
    pthread_mutex_lock(&w->lock);
    w->step = step;
    pthread_mutex_unlock(&w->lock);
}

int dp_watchdog_enter(dp_watchdog *w, const char *operation)
{
    if (w->timeout <= 0.0)
        return 0;
    pthread_mutex_lock(&w->lock);
    w->operation = operation;
    w->entered_at = now_seconds();
    w->inside = 1;
    w->sequence++;
    pthread_mutex_unlock(&w->lock);
    if (w->track_arrivals && w->rank != 0)
        DP_MPI_CHECK(MPI_Isend(&w->sequence, 1, MPI_LONG, 0, ARRIVAL_TAG, w->comm, &w->announcement));
    return 0;
}

/* One poll of rank 0's arrivals for this operation, re-arming them once all have come.
 * Called under the lock: the watchdog thread tests the same requests when it fires. */
static int poll_arrivals(dp_watchdog *w, int *all_arrived)
{
    DP_MPI_CHECK(MPI_Testall(w->size - 1, w->arrivals, all_arrived, MPI_STATUSES_IGNORE));
    if (*all_arrived)
        DP_MPI_CHECK(MPI_Startall(w->size - 1, w->arrivals));
    return 0;
}

/* Rank 0 polls rather than waits, releasing the lock between polls, so the watchdog can
 * still fire if a rank never arrives (a broadcast can finish on its root early). */
static int collect_arrivals(dp_watchdog *w)
{
    if (w->rank != 0) {
        DP_MPI_CHECK(MPI_Wait(&w->announcement, MPI_STATUS_IGNORE));
        return 0;
    }
    int all_arrived = w->size == 1, status = 0;
    while (!status && !all_arrived) {
        pthread_mutex_lock(&w->lock);
        status = poll_arrivals(w, &all_arrived);
        pthread_mutex_unlock(&w->lock);
        if (!all_arrived)
            nanosleep(&(struct timespec){0, 20 * 1000}, NULL);
    }
    return status;
}

int dp_watchdog_leave(dp_watchdog *w)
{
    if (w->timeout <= 0.0)
        return 0;
    int status = w->track_arrivals ? collect_arrivals(w) : 0;
    pthread_mutex_lock(&w->lock);
    w->inside = 0;
    pthread_mutex_unlock(&w->lock);
    return status;
}

void dp_watchdog_stop(dp_watchdog *w)
{
    if (w->timeout <= 0.0)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->wake);
    for (int r = 1; w->rank == 0 && w->arrivals && r < w->size; r++) {
        MPI_Cancel(&w->arrivals[r - 1]);
        MPI_Wait(&w->arrivals[r - 1], MPI_STATUS_IGNORE);
        MPI_Request_free(&w->arrivals[r - 1]);
    }
    free(w->arrivals);
    free(w->arrival_sequence);
    if (w->track_arrivals)
        MPI_Comm_free(&w->comm);
    memset(w, 0, sizeof *w);
}
