/* The timeline (--trace FILE): spans of every rank's work -- each module's forward and
 * backward (on a GPU also as the device ran them), each collective from start to completion,
 * the optimizer, the batch gather -- as Chrome trace event JSON, one process per rank, that
 * Perfetto and chrome://tracing open. Spans are kept in memory sized before the first step
 * (the step loop allocates nothing) and rank 0 gathers and writes them all at the end,
 * atomically. */
#ifndef DP_TRAIN_TRACE_H
#define DP_TRAIN_TRACE_H

#include "dp/comm.h"

#include <stddef.h>

/* Lanes of a rank's process in the timeline: the host's compute and communication, and the
 * device's module passes as its events timed them (GPU backends). */
typedef enum dp_trace_lane { DP_LANE_COMPUTE, DP_LANE_COMM, DP_LANE_DEVICE, DP_LANES } dp_trace_lane;

#define DP_TRACE_NAME_MAX 48

typedef struct dp_trace_span {
    char name[DP_TRACE_NAME_MAX];
    const char *category;  /* "forward", "backward", "collective", ... (static text) */
    dp_trace_lane lane;
    double begin, end;     /* MPI_Wtime */
} dp_trace_span;

typedef struct dp_trace {
    dp_trace_span *spans;
    size_t count, capacity, dropped;
    double origin;         /* MPI_Wtime right after a barrier: the ranks' common zero */
    int rank;
} dp_trace;

/* Room for capacity spans; collective over comm (the barrier that aligns the clocks). */
int dp_trace_open(dp_trace *trace, dp_comm *comm, size_t capacity);
void dp_trace_close(dp_trace *trace);

/* Records a span (no-op when trace is NULL or not open; counted as dropped when full). */
void dp_trace_add(dp_trace *trace, const char *name, const char *category, dp_trace_lane lane, double begin,
                  double end);

/* Rank 0 writes every rank's spans to path (collective). */
int dp_trace_write(dp_trace *trace, dp_comm *comm, const char *path);

#endif
