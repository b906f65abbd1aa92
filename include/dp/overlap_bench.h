/* How much of a request's communication hides behind computation, for each way of
 * progressing it (docs/ALGORITHMS.md, "Progress"): dp_overlap_bench's measurement. A step
 * starts an all-reduce, computes a number of pieces (as a backward pass computes modules),
 * and waits; the pieces alone and the all-reduce alone are timed too, in the same run, the
 * ways taking turns so that machine noise hits them alike. */
#ifndef DP_OVERLAP_BENCH_H
#define DP_OVERLAP_BENCH_H

#include "dp/comm.h"

typedef enum dp_progress_kind {
    DP_PROGRESS_NONE,   /* nothing between pieces: the request moves at its start and its wait */
    DP_PROGRESS_TEST,   /* dp_comm_progress after every piece */
    DP_PROGRESS_THREAD  /* dp_comm_start_progress_thread while the pieces run */
} dp_progress_kind;

typedef struct dp_progress_way {
    const char *name;
    dp_progress_kind kind;
    long interval_us; /* thread: sleep between calls (0: none, it spins) */
} dp_progress_way;

enum { DP_PROGRESS_WAYS = 5 };
extern const dp_progress_way dp_progress_ways[DP_PROGRESS_WAYS];

typedef struct dp_overlap_setup {
    size_t count;                 /* floats all-reduced */
    int iterations;               /* steps measured per way; the median is kept */
    void (*compute_piece)(void *context);
    void *context;
} dp_overlap_setup;

/* Seconds, each the median over iterations of the slowest rank's time. */
typedef struct dp_overlap_result {
    double comm;                  /* the all-reduce alone (start + wait) */
    double piece;                 /* one piece alone */
    int pieces;                   /* per step: as many as take about as long as comm */
    double compute;               /* the pieces alone */
    double step[DP_PROGRESS_WAYS];/* start, pieces with that way of progressing, wait */
} dp_overlap_result;

/* Measures c's algorithm. Collective; needs MPI_THREAD_MULTIPLE for the thread ways. */
int dp_overlap_measure(dp_comm *c, const dp_overlap_setup *s, dp_overlap_result *r);

/* The part of the all-reduce the step did not pay for: (comm + compute - step) / comm,
 * 1 when it hid entirely, 0 when the step took as long as both in turn. */
double dp_overlap_hidden(const dp_overlap_result *r, int way);

/* The most that can hide: min(comm, compute) / comm (computation shorter than the all-reduce
 * can hide only its own length). */
double dp_overlap_hideable(const dp_overlap_result *r);

#endif
