/* The fake runtime's CUDA graphs. A capturing stream's work (kernels, cuBLAS calls, copies,
 * memsets, NCCL collectives) is recorded here with its arguments as they were at capture,
 * instead of queued (queue.c). Streams forked into the capture (a wait for an event recorded
 * in it) record on lanes of their own, and a wait for an event joins the lanes, as the
 * runtime's capture dependencies do. An instantiated graph's launch queues the recorded work
 * again, in its order: lane 0 on the launching stream, every other lane on a stream of the
 * graph's own, each wait a dependency on the task its event marked. There it runs as any
 * queued work does: only at synchronisation points, and adversarially against other streams,
 * so a missing join inside a graph shows too. A call that needs the host during a capture
 * fails and invalidates it (fakecuda_capture_forbids), so a host synchronisation inside a
 * captured step is caught; a capture that ends with a lane not joined back fails. */
#include "tests/fakecuda/fakecuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct recorded {
    fakecuda_task run;
    const char *name;
    cudaEvent_t event; /* an external event record: the launch makes it the event's newest */
    int lane;          /* 0: the stream that began the capture; others forked into it */
    size_t after;      /* 1 + the node this one also waits for (an event's record), 0: none */
    size_t size;
    _Alignas(16) unsigned char args[FAKECUDA_MAX_ARGS];
} recorded;

struct CUgraph_st {
    recorded *work;
    size_t count, capacity;
    int lanes;       /* the capturing streams so far */
    long serial;     /* which capture: events name it */
    int invalidated; /* a forbidden call during the capture */
};

struct CUgraphExec_st {
    recorded *work;
    size_t count;
    cudaStream_t *lanes; /* lanes 1, 2, ...: the streams they replay on */
    int nlanes;
    long *ids;           /* per node: its task in the launch being queued */
};

/* FAKECUDA_COUNT_LAUNCHES=1: how many launches this process made, on stderr at exit, so a test
 * can tell replayed steps from eager ones. */
static long launches;
static pid_t counting;

static void report_launches(void)
{
    if (getpid() == counting)
        fprintf(stderr, "fakecuda: %ld graph launches\n", launches);
}

cudaGraph_t fakecuda_graph_new(void)
{
    static long serials;
    cudaGraph_t g = calloc(1, sizeof *g);
    if (g) {
        fakecuda_count_handle(1);
        g->lanes = 1;
        g->serial = ++serials;
    }
    return g;
}

long fakecuda_graph_serial(cudaGraph_t g)
{
    return g->serial;
}

int fakecuda_graph_fork(cudaGraph_t g)
{
    return g->lanes++;
}

cudaError_t fakecuda_record(cudaGraph_t g, int lane, size_t after, fakecuda_task run, const void *args, size_t size,
                            const char *name, cudaEvent_t event, size_t *node)
{
    if (g->invalidated)
        return cudaErrorStreamCaptureInvalidated;
    if (size > FAKECUDA_MAX_ARGS) {
        fakecuda_complain("%s: %zu bytes of arguments, more than FAKECUDA_MAX_ARGS", name, size);
        abort();
    }
    if (g->count == g->capacity) {
        size_t grown = g->capacity ? 2 * g->capacity : 64;
        recorded *more = realloc(g->work, grown * sizeof *more);
        if (!more)
            return cudaErrorMemoryAllocation;
        g->work = more;
        g->capacity = grown;
    }
    if (node)
        *node = g->count;
    recorded *r = &g->work[g->count++];
    *r = (recorded){.run = run, .name = name, .event = event, .lane = lane, .after = after, .size = size};
    if (args)
        memcpy(r->args, args, size);
    return cudaSuccess;
}

/* A node runs after the one before it on its lane and after the node it waits for: whether
 * every lane's last node comes before lane 0's last (the runtime's rule that forked streams
 * join the origin stream before the capture ends). */
int fakecuda_graph_unjoined(cudaGraph_t g)
{
    size_t *previous = calloc(g->count + 1, sizeof *previous), *last = calloc((size_t)g->lanes, sizeof *last);
    char *reached = calloc(g->count + 1, 1);
    if (!previous || !last || !reached)
        abort();
    for (size_t i = 0; i < g->count; i++) { /* 1 + the node before i on its lane, 0: none */
        previous[i] = last[g->work[i].lane];
        last[g->work[i].lane] = i + 1;
    }
    if (last[0])
        reached[last[0] - 1] = 1;
    for (size_t i = g->count; i-- > 0;)
        if (reached[i]) {
            if (previous[i])
                reached[previous[i] - 1] = 1;
            if (g->work[i].after)
                reached[g->work[i].after - 1] = 1;
        }
    int unjoined = 0;
    for (int lane = 1; lane < g->lanes; lane++)
        unjoined += last[lane] && !reached[last[lane] - 1];
    free(previous);
    free(last);
    free(reached);
    return unjoined;
}

void fakecuda_graph_invalidate(cudaGraph_t g)
{
    g->invalidated = 1;
}

int fakecuda_graph_invalidated(cudaGraph_t g)
{
    return g->invalidated;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    if (!g)
        return cudaErrorInvalidValue;
    free(g->work);
    free(g);
    fakecuda_count_handle(-1);
    return fakecuda_sticky();
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags)
{
    *exec = NULL;
    if (!g || flags)
        return cudaErrorInvalidValue;
    cudaGraphExec_t x = calloc(1, sizeof *x);
    if (!x || !(x->work = malloc((g->count + 1) * sizeof *x->work)) || !(x->ids = calloc(g->count + 1, sizeof *x->ids)) ||
        !(x->lanes = calloc((size_t)g->lanes, sizeof *x->lanes))) {
        if (x) {
            free(x->work);
            free(x->ids);
        }
        free(x);
        return cudaErrorMemoryAllocation;
    }
    if (g->count)
        memcpy(x->work, g->work, g->count * sizeof *x->work);
    x->count = g->count;
    for (; x->nlanes < g->lanes - 1; x->nlanes++)
        if (cudaStreamCreateWithFlags(&x->lanes[x->nlanes], cudaStreamNonBlocking) != cudaSuccess)
            abort();
    fakecuda_count_handle(1);
    fakecuda_graph_execs(1);
    *exec = x;
    return fakecuda_sticky();
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t stream)
{
    if (!x)
        return cudaErrorInvalidValue;
    cudaError_t e = fakecuda_sticky();
    fakecuda_lock();
    const char *count = getenv("FAKECUDA_COUNT_LAUNCHES");
    if (!counting && count && strcmp(count, "1") == 0) {
        counting = getpid();
        atexit(report_launches);
    }
    launches++;
    for (size_t i = 0; i < x->count && e == cudaSuccess; i++) {
        const recorded *r = &x->work[i];
        cudaStream_t lane = r->lane ? x->lanes[r->lane - 1] : stream;
        e = fakecuda_enqueue_after(lane, r->run, r->args, r->size, r->name, r->after ? x->ids[r->after - 1] : 0,
                                   &x->ids[i]);
        if (e == cudaSuccess && r->event && x->ids[i])
            fakecuda_event_recorded(r->event, x->ids[i]);
    }
    fakecuda_unlock();
    return e;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x)
{
    if (!x)
        return cudaErrorInvalidValue;
    for (int i = 0; i < x->nlanes; i++)
        cudaStreamDestroy(x->lanes[i]);
    free(x->lanes);
    free(x->ids);
    free(x->work);
    free(x);
    fakecuda_count_handle(-1);
    fakecuda_graph_execs(-1);
    return fakecuda_sticky();
}
