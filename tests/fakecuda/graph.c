/* The fake runtime's CUDA graphs. A capturing stream's work (kernels, cuBLAS calls, copies,
 * memsets, NCCL collectives) is recorded here with its arguments as they were at capture,
 * instead of queued (queue.c); an instantiated graph's launch queues the recorded work again,
 * in its order, on the launching stream, where it runs as any queued work does: only at
 * synchronisation points, and adversarially against other streams. A call that needs the host
 * during a capture fails and invalidates it (fakecuda_capture_forbids), so a host
 * synchronisation inside a captured step is caught. */
#include "tests/fakecuda/fakecuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct recorded {
    fakecuda_task run;
    const char *name;
    cudaEvent_t event; /* an external event record: the launch makes it the event's newest */
    size_t size;
    _Alignas(16) unsigned char args[FAKECUDA_MAX_ARGS];
} recorded;

struct CUgraph_st {
    recorded *work;
    size_t count, capacity;
    int invalidated; /* a forbidden call during the capture */
};

struct CUgraphExec_st {
    recorded *work;
    size_t count;
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
    cudaGraph_t g = calloc(1, sizeof *g);
    if (g)
        fakecuda_count_handle(1);
    return g;
}

cudaError_t fakecuda_record(cudaGraph_t g, fakecuda_task run, const void *args, size_t size, const char *name,
                            cudaEvent_t event)
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
    recorded *r = &g->work[g->count++];
    *r = (recorded){.run = run, .name = name, .event = event, .size = size};
    if (args)
        memcpy(r->args, args, size);
    return cudaSuccess;
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
    if (!x || (g->count && !(x->work = malloc(g->count * sizeof *x->work)))) {
        free(x);
        return cudaErrorMemoryAllocation;
    }
    if (g->count)
        memcpy(x->work, g->work, g->count * sizeof *x->work);
    x->count = g->count;
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
        long id = 0;
        e = fakecuda_enqueue_on(stream, r->run, r->args, r->size, r->name, &id);
        if (e == cudaSuccess && r->event && id)
            fakecuda_event_recorded(r->event, id);
    }
    fakecuda_unlock();
    return e;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x)
{
    if (!x)
        return cudaErrorInvalidValue;
    free(x->work);
    free(x);
    fakecuda_count_handle(-1);
    fakecuda_graph_execs(-1);
    return fakecuda_sticky();
}
