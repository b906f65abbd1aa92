/* The watchdog: a thread that ends the job when a collective has not completed within a
 * timeout, naming the step, the operation and (on rank 0) the ranks that never arrived.
 * A hung collective cannot return an error, so this is the one place the library itself
 * calls MPI_Abort. */
#ifndef DP_WATCHDOG_H
#define DP_WATCHDOG_H

#include "dp/comm.h"

#include <pthread.h>

typedef struct dp_watchdog {
    double timeout;            /* seconds; 0: disabled, every call is a no-op */
    int rank, size;
    MPI_Comm comm;             /* private duplicate carrying the arrival messages */
    int track_arrivals;        /* MPI_THREAD_MULTIPLE: rank 0 learns who has not arrived */
    MPI_Request *arrivals;     /* rank 0: one persistent receive per other rank */
    long *arrival_sequence;    /* their buffers */
    MPI_Request announcement;  /* other ranks: this operation's arrival message */
    long sequence;             /* guarded operations entered so far */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int inside, stopping;
    long step;
    const char *operation;
    double entered_at;
} dp_watchdog;

int dp_watchdog_start(dp_watchdog *w, dp_comm *c, double timeout);

/* The training step reported when an operation times out. */
void dp_watchdog_set_step(dp_watchdog *w, long step);

/* Brackets one collective that every rank enters in the same order. */
int dp_watchdog_enter(dp_watchdog *w, const char *operation);
int dp_watchdog_leave(dp_watchdog *w);

void dp_watchdog_stop(dp_watchdog *w);

#endif
