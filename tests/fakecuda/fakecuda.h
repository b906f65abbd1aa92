/* The fake CUDA runtime's inside, shared by its parts (runtime.c, cublas.c, kernels.c,
 * nccl.c). The fake replaces libcudart, libcublas and libnccl in test programs, so the CUDA
 * backend's host logic and its kernels' arithmetic run on a machine without a GPU, and run
 * strictly: device memory is mapped PROT_NONE except while queued work runs, so any host
 * access to it (a missing download, a non-CUDA-aware MPI handed a device pointer) crashes;
 * kernels, cuBLAS calls and asynchronous copies run only at synchronisation points, in
 * issue order, so a missing synchronise reads stale data; every copy's direction is checked
 * against the pointers' kinds. Streams and events (queue.c) order work as a dependency graph
 * that runs the latest-issued ready task first, so a missing cudaStreamWaitEvent shows.
 *
 * The environment plays the machine: FAKECUDA_DEVICES=A,B,... are the GPUs this process
 * sees (names become their UUIDs; unset: none, as without a GPU), FAKECUDA_MEMORY=BYTES their
 * memory (default 80 GiB), FAKECUDA_CHECK_LEAKS=1 fails the process (exit 3) when device or
 * page-locked memory or a cuBLAS handle is left at exit, CUDA_LAUNCH_BLOCKING=1 runs work as
 * soon as it is queued, FAKECUDA_COUNT_LAUNCHES=1 reports the graph launches at exit,
 * FAKECUDA_COUNT_GEMMS=1 the GEMM calls by operand type (cublas.c). */
#ifndef DP_FAKECUDA_H
#define DP_FAKECUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>

typedef void (*fakecuda_task)(void *args);

/* Largest argument block a queued task may carry. */
#define FAKECUDA_MAX_ARGS 160

/* Queues `run` with a copy of args (size bytes) on the legacy default stream (enqueue) or on
 * `stream` (enqueue_on, which also gives the task's id); `name` names it in fault reports.
 * Return the sticky error, if any, else cudaSuccess. */
cudaError_t fakecuda_enqueue(fakecuda_task run, const void *args, size_t size, const char *name);
cudaError_t fakecuda_enqueue_on(cudaStream_t stream, fakecuda_task run, const void *args, size_t size,
                                const char *name, long *id);
/* enqueue_on, the task also waiting for task `after` (0: none): a graph's join replayed. */
cudaError_t fakecuda_enqueue_after(cudaStream_t stream, fakecuda_task run, const void *args, size_t size,
                                   const char *name, long after, long *id);

/* Stream capture (graph.c, queue.c): while a stream captures, its work is recorded into the
 * graph (fakecuda_record, on the stream's lane, after node `after` - 1 too where after is not 0,
 * giving its node; cudaErrorStreamCaptureInvalidated once the capture broke) instead of
 * queued. A stream that waits for an event recorded in a capture is forked into it on a new
 * lane (fakecuda_graph_fork); fakecuda_graph_unjoined counts the lanes whose work lane 0 does
 * not wait for at the end. The serial tells captures apart for the events recorded in them.
 * capture_forbids is the check of a call that needs the host: while any stream
 * captures (stream NULL), or while `stream` does, it complains, invalidates every capture and
 * returns cudaErrorStreamCaptureUnsupported, as the runtime's global capture mode does. */
cudaGraph_t fakecuda_graph_new(void);
long fakecuda_graph_serial(cudaGraph_t graph);
int fakecuda_graph_fork(cudaGraph_t graph);
int fakecuda_graph_unjoined(cudaGraph_t graph);
cudaError_t fakecuda_record(cudaGraph_t graph, int lane, size_t after, fakecuda_task run, const void *args, size_t size,
                            const char *name, cudaEvent_t event, size_t *node);
/* An external event record in a graph (event not NULL above) is re-made by each launch: the
 * event's newest record becomes the launched task. */
void fakecuda_event_recorded(cudaEvent_t event, long task);
void fakecuda_graph_invalidate(cudaGraph_t graph);
int fakecuda_graph_invalidated(cudaGraph_t graph);
cudaError_t fakecuda_capture_forbids(cudaStream_t stream, const char *call);

/* Synchronisation points: run task `id` and the work it depends on (wait), or everything
 * queued (synchronize); return the sticky error or cudaSuccess. */
cudaError_t fakecuda_wait(long id);
cudaError_t fakecuda_synchronize(void);

/* Inside a task: 1 when [ptr, ptr + bytes) lies in one device allocation; otherwise records
 * the fault (cudaErrorIllegalAddress, sticky as on a GPU), reports `what` and returns 0. */
int fakecuda_need(const void *ptr, size_t bytes, const char *what);

/* 1 when [ptr, ptr + bytes) lies in one device allocation (bytes 0: ptr inside one). */
int fakecuda_is_device(const void *ptr, size_t bytes);

/* Between the parts: device memory readable (while tasks run) or not; the sticky error, set by
 * fakecuda_fault; the running task's name; one recursive lock for every caller's thread. */
void fakecuda_protect(int readable);
cudaError_t fakecuda_sticky(void);
void fakecuda_fault(void);
const char *fakecuda_running_task(void);
void fakecuda_lock(void);
void fakecuda_unlock(void);

/* Visible devices (FAKECUDA_DEVICES, read anew each call) and the current one. */
int fakecuda_device_count(void);
int fakecuda_current_device(void);

/* Graphs instantiated and not yet destroyed (graph.c counts them). While any is, cudaFree keeps
 * the freed addresses unused (runtime.c), so a replay of captured work on freed memory faults
 * instead of finding a newer allocation there; the last one destroyed releases them. */
void fakecuda_graph_execs(int delta);

/* For the leak check and the fake's own tests: live device allocations; handles (cuBLAS,
 * streams, events) made and freed. */
size_t fakecuda_live_device_allocations(void);
void fakecuda_count_handle(int delta);

/* Reports an API misuse on stderr (the real runtime returns the code silently). */
void fakecuda_complain(const char *format, ...) __attribute__((format(printf, 1, 2)));

#endif
