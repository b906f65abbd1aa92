/* The fake runtime's streams and events: queued work as a dependency graph. A task depends on
 * the one before it in its stream, on the legacy default stream's work when its stream is a
 * blocking one (and the legacy stream's tasks on every blocking stream's), and on an event
 * it was made to wait for. Work runs only at synchronisation points, and then adversarially:
 * of the tasks whose dependencies are done, the one issued LAST runs first, so a consumer
 * that forgot to wait for another stream's producer runs before it and reads stale data.
 * cudaEventQuery answers cudaErrorNotReady once before an event's work runs, so polling
 * loops are exercised. A capturing stream's work goes to its graph instead (graph.c); a stream
 * that waits for an event recorded in a capture joins it (a fork), and the capture's origin
 * must wait for the forked streams' work before it ends (a join). While any stream captures,
 * the calls that would wait for the device or query it fail as in the runtime's global
 * capture mode and invalidate the capture. One recursive lock serialises callers (a progress
 * thread may query). */
#define _GNU_SOURCE
#include "tests/fakecuda/fakecuda.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_DEPS = 8 };

struct CUstream_st {
    int blocking; /* synchronises with the legacy default stream */
    long last;    /* the stream's newest task, 0 for none */
    cudaGraph_t capture; /* while capturing: the graph its work is recorded into */
    int lane;            /* its lane in that graph: 0 for the stream that began the capture */
    struct CUstream_st *next;
};

struct CUevent_st {
    long task;    /* the marker task of the newest record, 0 for none */
    int captured; /* the newest record was made in a capturing stream: no time, nothing to wait for */
    long capture; /* its capture's serial, and the record's node there */
    size_t node;
    int queried;  /* cudaEventQuery already said "not ready" for this record */
    int timing;   /* created without cudaEventDisableTiming */
    int recorded; /* a record has completed: time holds when */
    double time;  /* seconds on CLOCK_MONOTONIC when the newest completed record ran */
};

typedef struct task {
    long id;
    struct CUstream_st *stream;
    fakecuda_task run;
    const char *name;
    long deps[MAX_DEPS];
    int ndeps, done, needed;
    _Alignas(16) unsigned char args[FAKECUDA_MAX_ARGS];
} task;

static struct CUstream_st legacy = {.blocking = 1};
static struct CUstream_st *streams; /* the created ones */
static task *tasks;                 /* pending, by increasing id */
static size_t ntasks, capacity;
static long next_id = 1;
static int running;
static cudaError_t sticky;
static const char *current;
static pthread_mutex_t lock;
static pthread_once_t lock_once = PTHREAD_ONCE_INIT;

static void make_lock(void)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&lock, &attr);
}

void fakecuda_lock(void)
{
    pthread_once(&lock_once, make_lock);
    pthread_mutex_lock(&lock);
}

void fakecuda_unlock(void)
{
    pthread_mutex_unlock(&lock);
}

cudaError_t fakecuda_sticky(void)
{
    return sticky;
}

const char *fakecuda_running_task(void)
{
    return current;
}

void fakecuda_fault(void)
{
    sticky = cudaErrorIllegalAddress;
}

static struct CUstream_st *resolve(cudaStream_t s)
{
    return s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread ? &legacy : s;
}

static task *find(long id)
{
    size_t lo = 0, hi = ntasks;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (tasks[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < ntasks && tasks[lo].id == id ? &tasks[lo] : NULL;
}

static void add_dep(task *t, long id)
{
    if (id == 0 || !find(id))
        return; /* done already */
    if (t->ndeps == MAX_DEPS) {
        fakecuda_complain("%s: more than %d streams to wait for", t->name, MAX_DEPS);
        abort();
    }
    t->deps[t->ndeps++] = id;
}

static long append(struct CUstream_st *s, fakecuda_task run, const void *args, size_t size, const char *name, long waits_for)
{
    if (size > FAKECUDA_MAX_ARGS) {
        fakecuda_complain("%s: %zu bytes of arguments, more than FAKECUDA_MAX_ARGS", name, size);
        abort();
    }
    if (ntasks == capacity) {
        size_t grown = capacity ? 2 * capacity : 64;
        task *more = realloc(tasks, grown * sizeof *more);
        if (!more)
            abort();
        tasks = more;
        capacity = grown;
    }
    task *t = &tasks[ntasks++];
    memset(t, 0, offsetof(task, args));
    t->id = next_id++;
    t->stream = s;
    t->run = run;
    t->name = name;
    if (args)
        memcpy(t->args, args, size);
    add_dep(t, s->last);
    add_dep(t, waits_for);
    if (s == &legacy) {
        for (struct CUstream_st *b = streams; b; b = b->next)
            if (b->blocking)
                add_dep(t, b->last);
    } else if (s->blocking) {
        add_dep(t, legacy.last);
    }
    s->last = t->id;
    return t->id;
}

static int ready(const task *t)
{
    for (int i = 0; i < t->ndeps; i++) {
        const task *d = find(t->deps[i]);
        if (d && !d->done)
            return 0;
    }
    return 1;
}

static void mark_needed(task *t)
{
    if (t->needed)
        return;
    t->needed = 1;
    for (int i = 0; i < t->ndeps; i++) {
        task *d = find(t->deps[i]);
        if (d)
            mark_needed(d);
    }
}

/* Runs task `target` and what it depends on (target 0: everything), latest-issued first among
 * the ready ones; then forgets the finished tasks. */
static cudaError_t run_until(long target)
{
    if (running || sticky != cudaSuccess)
        return sticky;
    task *goal = target ? find(target) : NULL;
    if (target && !goal)
        return cudaSuccess;
    for (size_t i = 0; i < ntasks; i++)
        tasks[i].needed = !goal;
    if (goal)
        mark_needed(goal);
    running = 1;
    fakecuda_protect(1);
    for (;;) {
        task *next = NULL;
        for (size_t i = ntasks; i-- > 0;)
            if (tasks[i].needed && !tasks[i].done && ready(&tasks[i])) {
                next = &tasks[i];
                break;
            }
        if (!next || sticky != cudaSuccess)
            break;
        current = next->name;
        next->run(next->args);
        next->done = 1;
    }
    current = NULL;
    fakecuda_protect(0);
    running = 0;
    if (sticky != cudaSuccess)
        ntasks = 0; /* a faulted context runs nothing more */
    size_t kept = 0;
    for (size_t i = 0; i < ntasks; i++)
        if (!tasks[i].done)
            tasks[kept++] = tasks[i];
    ntasks = kept;
    return sticky;
}

static cudaError_t capture_forbids(cudaStream_t stream, const char *call);

static void nothing(void *args)
{
    (void)args;
}

static cudaError_t after_queueing(long id)
{
    const char *blocking = getenv("CUDA_LAUNCH_BLOCKING");
    return blocking && strcmp(blocking, "1") == 0 ? run_until(id) : cudaSuccess;
}

cudaError_t fakecuda_enqueue_after(cudaStream_t stream, fakecuda_task run, const void *args, size_t size,
                                   const char *name, long after, long *id)
{
    fakecuda_lock();
    cudaError_t e = sticky;
    struct CUstream_st *s = resolve(stream);
    if (id)
        *id = 0;
    if (e == cudaSuccess && s->capture) {
        e = fakecuda_record(s->capture, s->lane, 0, run, args, size, name, NULL, NULL);
    } else if (e == cudaSuccess) {
        long queued = append(s, run, args, size, name, after);
        if (id)
            *id = queued;
        e = after_queueing(queued);
    }
    fakecuda_unlock();
    return e;
}

cudaError_t fakecuda_enqueue_on(cudaStream_t stream, fakecuda_task run, const void *args, size_t size,
                                const char *name, long *id)
{
    return fakecuda_enqueue_after(stream, run, args, size, name, 0, id);
}

cudaError_t fakecuda_enqueue(fakecuda_task run, const void *args, size_t size, const char *name)
{
    return fakecuda_enqueue_on(NULL, run, args, size, name, NULL);
}

cudaError_t fakecuda_wait(long id)
{
    fakecuda_lock();
    cudaError_t e = run_until(id);
    fakecuda_unlock();
    return e;
}

cudaError_t fakecuda_synchronize(void)
{
    return fakecuda_wait(0);
}

/* ---- the runtime's stream and event calls ---- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s)
        return cudaErrorMemoryAllocation;
    s->blocking = !(flags & cudaStreamNonBlocking);
    fakecuda_lock();
    s->next = streams;
    streams = s;
    fakecuda_count_handle(1);
    fakecuda_unlock();
    *stream = s;
    return sticky;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream)
{
    return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

/* CUDA finishes a destroyed stream's pending work: here, at once. */
cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    fakecuda_lock();
    cudaError_t e = cudaErrorInvalidResourceHandle;
    for (struct CUstream_st **link = &streams; *link; link = &(*link)->next)
        if (*link == stream) {
            if ((e = capture_forbids(stream, "cudaStreamDestroy")) != cudaSuccess)
                break;
            e = run_until(stream->last);
            *link = stream->next;
            free(stream);
            fakecuda_count_handle(-1);
            break;
        }
    fakecuda_unlock();
    return e;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    fakecuda_lock();
    cudaError_t e = capture_forbids(stream, "cudaStreamSynchronize");
    if (e == cudaSuccess)
        e = run_until(resolve(stream)->last);
    fakecuda_unlock();
    return e;
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    fakecuda_lock();
    cudaError_t e = capture_forbids(stream, "cudaStreamQuery");
    if (e == cudaSuccess)
        e = sticky != cudaSuccess ? sticky : find(resolve(stream)->last) ? cudaErrorNotReady : cudaSuccess;
    fakecuda_unlock();
    return e;
}

/* The capture an event was recorded in, while it still runs (its origin stream's graph). */
static cudaGraph_t capture_of(const struct CUevent_st *event)
{
    for (struct CUstream_st *s = streams; s; s = s->next)
        if (s->capture && fakecuda_graph_serial(s->capture) == event->capture)
            return s->capture;
    return NULL;
}

/* A wait for an event recorded in a capture: a stream not capturing is forked into it on a
 * lane of its own, a capturing one gets the record as a dependency (a join); either way a
 * node that waits for the record. */
static cudaError_t wait_in_capture(struct CUstream_st *s, const struct CUevent_st *event)
{
    cudaGraph_t g = capture_of(event);
    const char *problem = !g ? "an event recorded in a capture that has ended"
                          : s == &legacy ? "the legacy default stream waits for an event recorded in a capture"
                          : s->capture && s->capture != g ? "a stream capturing one graph waits for an event of another"
                          : NULL;
    if (problem) {
        fakecuda_complain("cudaStreamWaitEvent: %s", problem);
        if (s->capture)
            fakecuda_graph_invalidate(s->capture);
        return cudaErrorStreamCaptureIsolation;
    }
    if (!s->capture) {
        s->capture = g;
        s->lane = fakecuda_graph_fork(g);
    }
    return fakecuda_record(g, s->lane, event->node + 1, nothing, NULL, 0, "cudaStreamWaitEvent", NULL, NULL);
}

/* Outside a capture, a wait for another stream's work; in one, see wait_in_capture. A wait of
 * a capturing stream for work outside the capture cannot be captured. */
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    (void)flags;
    fakecuda_lock();
    cudaError_t e = sticky;
    struct CUstream_st *s = resolve(stream);
    if (e == cudaSuccess && event->captured) {
        e = wait_in_capture(s, event);
    } else if (e == cudaSuccess && s->capture && find(event->task)) {
        fakecuda_complain("cudaStreamWaitEvent: a capturing stream waits for uncaptured work; the capture is invalidated");
        fakecuda_graph_invalidate(s->capture);
        e = cudaErrorStreamCaptureIsolation;
    } else if (e == cudaSuccess && !s->capture) {
        append(s, nothing, NULL, 0, "cudaStreamWaitEvent", event->task);
    }
    fakecuda_unlock();
    return e;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    struct CUevent_st *ev = calloc(1, sizeof *ev);
    if (!ev)
        return cudaErrorMemoryAllocation;
    ev->timing = !(flags & cudaEventDisableTiming);
    fakecuda_count_handle(1);
    *event = ev;
    return sticky;
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    free(event);
    fakecuda_count_handle(-1);
    return sticky;
}

/* A record's task: the time the "device" reached it. */
static void stamp(void *args)
{
    struct CUevent_st *event;
    memcpy(&event, args, sizeof event);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    event->time = (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
    event->recorded = 1;
}

/* In a capture, a plain record only marks a node of the capture (no time), which a wait for
 * the event then depends on; an external one becomes the graph's own record, made anew by
 * every launch (fakecuda_event_recorded). */
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
    fakecuda_lock();
    cudaError_t e = sticky;
    struct CUstream_st *s = resolve(stream);
    if (e == cudaSuccess && s->capture && (flags & cudaEventRecordExternal)) {
        e = fakecuda_record(s->capture, s->lane, 0, stamp, &event, sizeof event, "cudaEventRecord", event, NULL);
    } else if (e == cudaSuccess && s->capture) {
        e = fakecuda_record(s->capture, s->lane, 0, nothing, NULL, 0, "cudaEventRecord", NULL, &event->node);
        event->captured = e == cudaSuccess;
        event->capture = fakecuda_graph_serial(s->capture);
    } else if (e == cudaSuccess) {
        fakecuda_event_recorded(event, append(s, stamp, &event, sizeof event, "cudaEventRecord", 0));
    }
    fakecuda_unlock();
    return e;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    return cudaEventRecordWithFlags(event, stream, cudaEventRecordDefault);
}

void fakecuda_event_recorded(cudaEvent_t event, long task)
{
    event->task = task;
    event->queried = 0;
    event->captured = 0;
}

/* A query while any stream captures fails and breaks the capture (global mode); after it, an
 * event last recorded in a capture has no state to query. */
cudaError_t cudaEventQuery(cudaEvent_t event)
{
    fakecuda_lock();
    cudaError_t e = capture_forbids(NULL, "cudaEventQuery");
    if (e == cudaSuccess)
        e = event->captured ? cudaErrorCapturedEvent : sticky;
    if (e == cudaSuccess && find(event->task)) {
        if (!event->queried) {
            event->queried = 1;
            e = cudaErrorNotReady;
        } else {
            e = run_until(event->task);
        }
    }
    fakecuda_unlock();
    return e;
}

/* As CUDA: both events timing ones, recorded, and their newest records completed. */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    fakecuda_lock();
    cudaError_t e = start->captured || end->captured ? cudaErrorCapturedEvent : sticky;
    if (e == cudaSuccess && (!start->timing || !end->timing))
        e = cudaErrorInvalidResourceHandle;
    else if (e == cudaSuccess && (find(start->task) || find(end->task)))
        e = cudaErrorNotReady;
    else if (e == cudaSuccess && (!start->recorded || !end->recorded))
        e = cudaErrorInvalidResourceHandle;
    else if (e == cudaSuccess)
        *ms = (float)(1e3 * (end->time - start->time));
    fakecuda_unlock();
    return e;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    cudaError_t e = fakecuda_capture_forbids(NULL, "cudaEventSynchronize");
    return e != cudaSuccess ? e : event->captured ? cudaErrorCapturedEvent : fakecuda_wait(event->task);
}

/* ---- stream capture (the graphs themselves: graph.c) ---- */

static int any_capture(void)
{
    for (struct CUstream_st *s = streams; s; s = s->next)
        if (s->capture)
            return 1;
    return 0;
}

/* Global capture mode, the runtime's default: while any stream captures, a call that would make
 * the host wait for the device (or allocate) fails and invalidates every capture. */
static cudaError_t capture_forbids(cudaStream_t stream, const char *call)
{
    struct CUstream_st *s = stream ? resolve(stream) : NULL;
    if (s ? !(s->capture || (s == &legacy && any_capture())) : !any_capture())
        return cudaSuccess;
    fakecuda_complain("%s while a stream captures a graph: cudaErrorStreamCaptureUnsupported; the capture is invalidated", call);
    for (struct CUstream_st *c = streams; c; c = c->next)
        if (c->capture)
            fakecuda_graph_invalidate(c->capture);
    return cudaErrorStreamCaptureUnsupported;
}

cudaError_t fakecuda_capture_forbids(cudaStream_t stream, const char *call)
{
    fakecuda_lock();
    cudaError_t e = capture_forbids(stream, call);
    fakecuda_unlock();
    return e;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    if (mode != cudaStreamCaptureModeGlobal) {
        fakecuda_complain("cudaStreamBeginCapture: only cudaStreamCaptureModeGlobal is faked");
        return cudaErrorNotSupported;
    }
    fakecuda_lock();
    struct CUstream_st *s = resolve(stream);
    cudaError_t e = sticky;
    if (e == cudaSuccess && (s == &legacy || s->capture))
        e = s == &legacy ? cudaErrorStreamCaptureUnsupported : cudaErrorIllegalState;
    if (e == cudaSuccess && !(s->capture = fakecuda_graph_new()))
        e = cudaErrorMemoryAllocation;
    s->lane = 0;
    fakecuda_unlock();
    return e;
}

/* The recorded graph, or NULL and cudaErrorStreamCaptureInvalidated when a forbidden call broke
 * it, cudaErrorStreamCaptureUnjoined when a stream forked into it was not joined back. Every
 * stream of the capture stops capturing; only the one that began it may end it. */
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph)
{
    fakecuda_lock();
    struct CUstream_st *s = resolve(stream);
    cudaGraph_t g = s->capture;
    cudaError_t e = !g ? cudaErrorIllegalState : s->lane ? cudaErrorStreamCaptureUnmatched : sticky;
    *graph = NULL;
    if (g && !s->lane) {
        int unjoined = fakecuda_graph_invalidated(g) ? 0 : fakecuda_graph_unjoined(g);
        if (unjoined)
            fakecuda_complain("cudaStreamEndCapture: %d stream(s) forked into the capture not joined back: "
                              "cudaErrorStreamCaptureUnjoined", unjoined);
        for (struct CUstream_st *other = streams; other; other = other->next)
            if (other->capture == g)
                other->capture = NULL;
        if (fakecuda_graph_invalidated(g) || unjoined) {
            cudaGraphDestroy(g);
            e = unjoined ? cudaErrorStreamCaptureUnjoined : cudaErrorStreamCaptureInvalidated;
        } else {
            *graph = g;
        }
    }
    fakecuda_unlock();
    return e;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status)
{
    fakecuda_lock();
    cudaGraph_t g = resolve(stream)->capture;
    *status = !g ? cudaStreamCaptureStatusNone
            : fakecuda_graph_invalidated(g) ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    fakecuda_unlock();
    return sticky;
}
