#include "dp/watchdog.h"

#include "dp/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ARRIVAL_TAG = 0x7a11, WATCHDOG_EXIT_CODE = 3 };
/* Each reporter in turn (rank 0, rank 1, then the others) waits this much longer, so the
 * first one alive that can name the missing ranks is the one printed. */
static const double REPORT_GRACE_SECONDS = 3.0;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int is_tracker(const dp_watchdog *w, int rank)
{
    return w->track_arrivals && rank < DP_WATCHDOG_TRACKERS;
}

/* Seconds an operation may take on this rank before it reports. */
static double report_after(const dp_watchdog *w)
{
    if (!w->track_arrivals)
        return w->timeout;
    int turn = w->rank < DP_WATCHDOG_TRACKERS ? w->rank : DP_WATCHDOG_TRACKERS;
    return w->timeout + turn * REPORT_GRACE_SECONDS;
}

/* Trackers, under the lock: every announcement received so far, recorded per rank. */
static int drain_announcements(dp_watchdog *w)
{
    for (int r = 0; r < w->size; r++) {
        if (r == w->rank)
            continue;
        for (int arrived = 1; arrived;) {
            DP_MPI_CHECK(MPI_Test(&w->arrivals[r], &arrived, MPI_STATUS_IGNORE));
            if (arrived) {
                w->started[r] = w->arrival_message[r];
                DP_MPI_CHECK(MPI_Start(&w->arrivals[r]));
            }
        }
    }
    return 0;
}

/* Lists the ranks that have not announced operation `sequence`. */
static void describe_missing(dp_watchdog *w, long sequence, char *text, size_t size)
{
    if (!is_tracker(w, w->rank)) {
        snprintf(text, size, "unknown here (%s)",
                 w->track_arrivals ? "ranks 0 and 1 track arrivals" : "MPI lacks MPI_THREAD_MULTIPLE");
        return;
    }
    if (drain_announcements(w)) {
        snprintf(text, size, "unknown (reading the announcements failed: %s)", dp_last_error());
        return;
    }
    size_t used = 0;
    text[0] = '\0';
    for (int r = 0; r < w->size; r++)
        if (r != w->rank && w->started[r] < sequence && used < size)
            used += (size_t)snprintf(text + used, size - used, "%s%d", used ? ", " : "", r);
    if (!used)
        snprintf(text, size, "none (all ranks started it; one is stuck inside)");
}

static void report_and_abort(dp_watchdog *w, const dp_watch *oldest, double waited)
{
    char missing[512];
    describe_missing(w, oldest->sequence, missing, sizeof missing);
    fprintf(stderr, "dp_worker: rank %d: error: watchdog: step %ld: %s has not completed after %.1f s "
                    "(--timeout %g); ranks that have not arrived: %s\n",
            w->rank, w->step, oldest->what, waited, w->timeout, missing);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, WATCHDOG_EXIT_CODE);
    _Exit(WATCHDOG_EXIT_CODE);
}

static void *watch_thread(void *arg)
{
    dp_watchdog *w = arg;
    double limit = report_after(w);
    pthread_mutex_lock(&w->lock);
    while (!w->stopping) {
        /* Operations start in order, so the oldest outstanding one is the first to overrun. */
        if (w->oldest && now_seconds() - w->oldest->started_at > limit)
            report_and_abort(w, w->oldest, now_seconds() - w->oldest->started_at);
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
    w->arrival_message = dp_calloc((size_t)w->size, sizeof *w->arrival_message, "watchdog buffers");
    w->started = dp_calloc((size_t)w->size, sizeof *w->started, "watchdog arrivals");
    if (!w->arrivals || !w->arrival_message || !w->started)
        return DP_ENOMEM;
    for (int r = 0; r < w->size; r++) {
        w->arrivals[r] = MPI_REQUEST_NULL;
        if (r != w->rank) {
            DP_MPI_CHECK(MPI_Recv_init(&w->arrival_message[r], 1, MPI_LONG, r, ARRIVAL_TAG, w->comm,
                                       &w->arrivals[r]));
            DP_MPI_CHECK(MPI_Start(&w->arrivals[r]));
        }
    }
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
        int status = is_tracker(w, w->rank) ? start_arrival_receives(w) : 0;
        if (status)
            return status;
    }
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    if (pthread_create(&w->thread, NULL, watch_thread, w) != 0)
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

/* Tells each tracker (but itself) that this rank has started entry's operation. */
static int announce(dp_watchdog *w, dp_watch *entry)
{
    for (int t = 0; t < DP_WATCHDOG_TRACKERS; t++) {
        entry->announcements[t] = MPI_REQUEST_NULL;
        if (w->track_arrivals && t < w->size && t != w->rank)
            DP_MPI_CHECK(MPI_Isend(&entry->sequence, 1, MPI_LONG, t, ARRIVAL_TAG, w->comm,
                                   &entry->announcements[t]));
    }
    return 0;
}

int dp_watchdog_watch(dp_watchdog *w, dp_watch *entry)
{
    if (w->timeout <= 0.0)
        return 0;
    pthread_mutex_lock(&w->lock);
    entry->sequence = ++w->sequence;
    entry->started_at = now_seconds();
    entry->next = NULL;
    entry->prev = w->newest;
    if (w->newest)
        w->newest->next = entry;
    else
        w->oldest = entry;
    w->newest = entry;
    /* Reading the announcements as they come keeps MPI's queue of them short. */
    int status = is_tracker(w, w->rank) ? drain_announcements(w) : 0;
    pthread_mutex_unlock(&w->lock);
    return status ? status : announce(w, entry);
}

int dp_watchdog_unwatch(dp_watchdog *w, dp_watch *entry)
{
    if (w->timeout <= 0.0)
        return 0;
    /* Eight bytes go eagerly: the sends completed when they were posted. */
    DP_MPI_CHECK(MPI_Waitall(DP_WATCHDOG_TRACKERS, entry->announcements, MPI_STATUSES_IGNORE));
    pthread_mutex_lock(&w->lock);
    if (entry->prev)
        entry->prev->next = entry->next;
    else
        w->oldest = entry->next;
    if (entry->next)
        entry->next->prev = entry->prev;
    else
        w->newest = entry->prev;
    int status = is_tracker(w, w->rank) ? drain_announcements(w) : 0;
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
    for (int r = 0; w->arrivals && r < w->size; r++)
        if (w->arrivals[r] != MPI_REQUEST_NULL) {
            MPI_Cancel(&w->arrivals[r]);
            MPI_Wait(&w->arrivals[r], MPI_STATUS_IGNORE);
            MPI_Request_free(&w->arrivals[r]);
        }
    free(w->arrivals);
    free(w->arrival_message);
    free(w->started);
    if (w->track_arrivals)
        MPI_Comm_free(&w->comm);
    memset(w, 0, sizeof *w);
}
