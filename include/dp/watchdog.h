/* The watchdog: a thread that ends the job when an outstanding collective has not completed
 * within a timeout, naming the step, the operation (with its label: "the all-reduce of
 * bucket 3") and the ranks that never started it. It watches every request from its start
 * to its completion, however many are in flight, and every blocking collective of dp_comm.
 * A hung collective cannot return an error, so this is the one place the library itself
 * calls MPI_Abort.
 *
 * Who names the missing ranks: every rank announces each operation it starts, by an 8-byte
 * message, to the trackers, ranks 0 and 1. Rank 0 reports first; rank 1 reports a grace
 * period later, so a stalled rank 0 is named too; the other ranks, which cannot name anyone,
 * report last. Needs MPI_THREAD_MULTIPLE (the thread reads the announcements); without it
 * every rank reports at the timeout and says the ranks are unknown. */
#ifndef DP_WATCHDOG_H
#define DP_WATCHDOG_H

#include "dp/comm.h"

#include <pthread.h>

enum {
    DP_WATCH_TEXT = 160,       /* bytes of an operation's description */
    DP_WATCHDOG_TRACKERS = 2   /* ranks 0 and 1 learn who has started what */
};

/* One watched operation. The caller owns the memory (a request slot, a stack frame) and
 * fills `what` before dp_watchdog_watch; the rest is the watchdog's. */
typedef struct dp_watch {
    char what[DP_WATCH_TEXT];  /* "the all-reduce of bucket 3 (ring, 24.0 MiB)" */
    struct dp_watch *prev, *next;
    long sequence;             /* the same on every rank: operations are started in one order */
    double started_at;
    MPI_Request announcements[DP_WATCHDOG_TRACKERS];
} dp_watch;

typedef struct dp_watchdog {
    double timeout;            /* seconds; 0: disabled, every call is a no-op */
    int rank, size;
    MPI_Comm comm;             /* private duplicate carrying the announcements */
    int track_arrivals;        /* MPI_THREAD_MULTIPLE: the trackers learn who has not started */
    MPI_Request *arrivals;     /* trackers: one persistent receive per other rank */
    long *arrival_message;     /* their buffers */
    long *started;             /* trackers: the newest operation each rank has announced */
    long sequence;             /* operations watched so far */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int stopping;
    long step;
    dp_watch *oldest, *newest; /* outstanding operations, in the order they started */
} dp_watchdog;

int dp_watchdog_start(dp_watchdog *w, dp_comm *c, double timeout);

/* The training step reported when an operation times out. */
void dp_watchdog_set_step(dp_watchdog *w, long step);

/* Watches entry from now until dp_watchdog_unwatch; every rank watches the same operations
 * in the same order. */
int dp_watchdog_watch(dp_watchdog *w, dp_watch *entry);
int dp_watchdog_unwatch(dp_watchdog *w, dp_watch *entry);

void dp_watchdog_stop(dp_watchdog *w);

#endif
