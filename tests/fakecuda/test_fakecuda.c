/* The fake CUDA runtime holds the CUDA backend to a GPU's rules, and the backend's error paths
 * on it: device memory is unreadable from the host; copies check their direction; queued work
 * runs only at synchronisation points, ordered across streams only by events and the legacy
 * stream's implicit synchronisation; cublasGemmEx checks its arguments as cuBLAS does; a
 * kernel fault is sticky and reported by the next call with the CUDA_LAUNCH_BLOCKING hint, or
 * at the kernel itself with CUDA_LAUNCH_BLOCKING=1; a failed open returns its first error
 * instead of aborting; a capturing stream records its work into a graph that each launch replays, and
 * a call that needs the host during a capture fails and breaks it. Single process, Check's fork mode
 * (tests/fakecuda.sh runs it with FAKECUDA_DEVICES set). */
#include "dp/backend.h"
#include "dp/error.h"
#include "src/backend/cuda_kernels.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/testutil.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

START_TEST(host_reads_of_device_memory_crash)
{
    float *d = NULL;
    ck_assert_int_eq(cudaMalloc((void **)&d, 64), cudaSuccess);
    volatile float v = d[3]; /* SIGSEGV: what a real GPU's memory would do to a host read */
    (void)v;
}
END_TEST

START_TEST(copies_must_match_their_direction)
{
    float host[16] = {1, 2, 3}, *d = NULL, *pinned = NULL;
    ck_assert_int_eq(cudaMalloc((void **)&d, sizeof host), cudaSuccess);
    ck_assert_int_eq(cudaMallocHost((void **)&pinned, sizeof host), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(d, host, sizeof host, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGetLastError(), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(host, d, sizeof host, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaMemcpy(d, host, sizeof host + 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(pinned, d, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
    ck_assert_mem_eq(pinned, host, sizeof host);
    ck_assert_int_eq(cudaFree(host), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaFree(pinned), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaFreeHost(pinned), cudaSuccess);
    ck_assert_int_eq(cudaFree(d), cudaSuccess);
    ck_assert_uint_eq(fakecuda_live_device_allocations(), 0);
}
END_TEST

START_TEST(queued_work_lands_only_at_a_synchronisation_point)
{
    float *d = NULL, *pinned = NULL;
    ck_assert_int_eq(cudaMalloc((void **)&d, 4 * sizeof *d), cudaSuccess);
    ck_assert_int_eq(cudaMallocHost((void **)&pinned, 4 * sizeof *pinned), cudaSuccess);
    pinned[0] = 42.0f;
    ck_assert_int_eq(cudaMemsetAsync(d, 0, 4 * sizeof *d, 0), cudaSuccess);
    ck_assert_int_eq(cudaMemcpyAsync(pinned, d, 4 * sizeof *d, cudaMemcpyDeviceToHost, 0), cudaSuccess);
    ck_assert_float_eq(pinned[0], 42.0f); /* not yet: a missing synchronise reads stale data */
    ck_assert_int_eq(cudaStreamSynchronize(0), cudaSuccess);
    ck_assert_float_eq(pinned[0], 0.0f);
    cudaFreeHost(pinned);
    cudaFree(d);
}
END_TEST

/* Stream `producer` copies 7s into device memory, stream `consumer` copies it back to
 * page-locked memory; returns what arrived (0: the consumer ran first). */
static float copy_across_streams(unsigned flags, int wait_for_event, int legacy_consumer)
{
    float *d = NULL, *src = NULL, *dst = NULL;
    cudaStream_t producer, consumer;
    cudaEvent_t produced;
    ck_assert_int_eq(cudaMalloc((void **)&d, sizeof *d), cudaSuccess);
    ck_assert_int_eq(cudaMallocHost((void **)&src, sizeof *src), cudaSuccess);
    ck_assert_int_eq(cudaMallocHost((void **)&dst, sizeof *dst), cudaSuccess);
    ck_assert_int_eq(cudaStreamCreateWithFlags(&producer, flags), cudaSuccess);
    ck_assert_int_eq(cudaStreamCreateWithFlags(&consumer, flags), cudaSuccess);
    ck_assert_int_eq(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming), cudaSuccess);
    *src = 7.0f;
    *dst = 0.0f;
    ck_assert_int_eq(cudaMemsetAsync(d, 0, sizeof *d, 0), cudaSuccess);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    ck_assert_int_eq(cudaMemcpyAsync(d, src, sizeof *d, cudaMemcpyHostToDevice, producer), cudaSuccess);
    ck_assert_int_eq(cudaEventRecord(produced, producer), cudaSuccess);
    if (wait_for_event)
        ck_assert_int_eq(cudaStreamWaitEvent(consumer, produced, 0), cudaSuccess);
    ck_assert_int_eq(cudaMemcpyAsync(dst, d, sizeof *d, cudaMemcpyDeviceToHost, legacy_consumer ? 0 : consumer),
                     cudaSuccess);
    ck_assert_int_eq(cudaEventQuery(produced), cudaErrorNotReady); /* polled once before it runs */
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    ck_assert_int_eq(cudaEventQuery(produced), cudaSuccess);
    float arrived = *dst;
    cudaEventDestroy(produced);
    cudaStreamDestroy(producer);
    cudaStreamDestroy(consumer);
    cudaFreeHost(src);
    cudaFreeHost(dst);
    cudaFree(d);
    return arrived;
}

START_TEST(streams_order_only_what_events_and_the_legacy_stream_order)
{
    ck_assert_float_eq(copy_across_streams(cudaStreamNonBlocking, 1, 0), 7.0f);
    ck_assert_float_eq(copy_across_streams(cudaStreamNonBlocking, 0, 0), 0.0f); /* the missing wait shows */
    ck_assert_float_eq(copy_across_streams(cudaStreamDefault, 0, 1), 7.0f);     /* legacy waits for blocking streams */
    ck_assert_float_eq(copy_across_streams(cudaStreamNonBlocking, 0, 1), 0.0f); /* ...not for non-blocking ones */
}
END_TEST

static float *device_copy(const float *host, size_t n)
{
    float *d = NULL;
    ck_assert_int_eq(cudaMalloc((void **)&d, n * sizeof *d), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(d, host, n * sizeof *d, cudaMemcpyHostToDevice), cudaSuccess);
    return d;
}

/* The product itself, through the CUDA backend, is the backend test table's (tests/test_backend_ops.c). */
/* A capture records the stream's work and runs none of it; each launch runs it all again, in
 * order, external event records included (so they time the launch). */
START_TEST(a_capture_records_and_each_launch_replays)
{
    float *d = NULL, *one = NULL, *pinned = NULL, value = 1.0f, zero = 0.0f, ms = -1.0f;
    cudaStream_t s;
    cudaEvent_t begin, end;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    ck_assert_int_eq(cudaMalloc((void **)&d, sizeof *d), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&one, sizeof *one), cudaSuccess);
    ck_assert_int_eq(cudaMallocHost((void **)&pinned, sizeof *pinned), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(one, &value, sizeof value, cudaMemcpyHostToDevice), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(d, &zero, sizeof zero, cudaMemcpyHostToDevice), cudaSuccess);
    ck_assert_int_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    ck_assert_int_eq(cudaEventCreate(&begin), cudaSuccess);
    ck_assert_int_eq(cudaEventCreate(&end), cudaSuccess);
    ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    ck_assert_int_eq(cudaEventRecordWithFlags(begin, s, cudaEventRecordExternal), cudaSuccess);
    ck_assert_int_eq(dp_cuda_accumulate(s, d, one, 1, 1), cudaSuccess);
    ck_assert_int_eq(cudaEventRecordWithFlags(end, s, cudaEventRecordExternal), cudaSuccess);
    ck_assert_int_eq(cudaMemcpyAsync(pinned, d, sizeof *d, cudaMemcpyDeviceToHost, s), cudaSuccess);
    ck_assert_int_eq(cudaStreamEndCapture(s, &graph), cudaSuccess);
    *pinned = -1.0f;
    ck_assert_int_eq(cudaStreamSynchronize(s), cudaSuccess);
    ck_assert_float_eq(*pinned, -1.0f); /* recorded, not run */
    ck_assert_int_eq(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ck_assert_int_eq(cudaGraphDestroy(graph), cudaSuccess);
    ck_assert_int_eq(cudaGraphLaunch(exec, s), cudaSuccess);
    ck_assert_int_eq(cudaGraphLaunch(exec, s), cudaSuccess);
    ck_assert_int_eq(cudaEventElapsedTime(&ms, begin, end), cudaErrorNotReady);
    ck_assert_int_eq(cudaStreamSynchronize(s), cudaSuccess);
    ck_assert_float_eq(*pinned, 2.0f); /* d += 1, twice */
    ck_assert_int_eq(cudaEventElapsedTime(&ms, begin, end), cudaSuccess);
    ck_assert(ms >= 0.0f);
    ck_assert_int_eq(cudaGraphExecDestroy(exec), cudaSuccess);
    cudaEventDestroy(begin);
    cudaEventDestroy(end);
    cudaStreamDestroy(s);
    cudaFreeHost(pinned);
    cudaFree(one);
    cudaFree(d);
}
END_TEST

/* As the runtime's global capture mode: a wait for the device or an allocation during a
 * capture fails and invalidates it; a plain event record in it has no time to read. */
START_TEST(a_host_wait_during_a_capture_breaks_it)
{
    float *d = NULL, host = 0.0f;
    void *more = NULL;
    cudaStream_t s;
    cudaEvent_t marker;
    cudaGraph_t graph = NULL;
    ck_assert_int_eq(cudaMalloc((void **)&d, sizeof *d), cudaSuccess);
    ck_assert_int_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    ck_assert_int_eq(cudaEventCreate(&marker), cudaSuccess);
    ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    ck_assert_int_eq(cudaMemsetAsync(d, 0, sizeof *d, s), cudaSuccess);
    ck_assert_int_eq(cudaEventRecord(marker, s), cudaSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    ck_assert_int_eq(cudaMemcpy(&host, d, sizeof host, cudaMemcpyDeviceToHost), cudaErrorStreamCaptureUnsupported);
    ck_assert_int_eq(cudaMemcpyAsync(&host, d, sizeof host, cudaMemcpyDeviceToHost, s), cudaErrorStreamCaptureUnsupported);
    ck_assert_int_eq(cudaMalloc(&more, 4), cudaErrorStreamCaptureUnsupported);
    ck_assert_int_eq(cudaMemsetAsync(d, 0, sizeof *d, s), cudaErrorStreamCaptureInvalidated);
    ck_assert_int_eq(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
    ck_assert_ptr_null(graph);
    ck_assert_int_eq(cudaStreamSynchronize(s), cudaSuccess); /* the capture is over */
    ck_assert_int_eq(cudaEventQuery(marker), cudaErrorCapturedEvent);
    cudaEventDestroy(marker);
    cudaStreamDestroy(s);
    cudaFree(d);
}
END_TEST

/* Streams for a fork and join inside a capture: the origin s, the forked t (NCCL's, in a
 * step), the events between them. */
typedef struct forked {
    cudaStream_t s, t;
    cudaEvent_t fork, join;
} forked;

static forked fork_capture(void)
{
    forked f;
    ck_assert_int_eq(cudaStreamCreateWithFlags(&f.s, cudaStreamNonBlocking), cudaSuccess);
    ck_assert_int_eq(cudaStreamCreateWithFlags(&f.t, cudaStreamNonBlocking), cudaSuccess);
    ck_assert_int_eq(cudaEventCreateWithFlags(&f.fork, cudaEventDisableTiming), cudaSuccess);
    ck_assert_int_eq(cudaEventCreateWithFlags(&f.join, cudaEventDisableTiming), cudaSuccess);
    ck_assert_int_eq(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeGlobal), cudaSuccess);
    return f;
}

static void free_forked(forked *f)
{
    enum cudaStreamCaptureStatus capturing;
    ck_assert_int_eq(cudaStreamIsCapturing(f->t, &capturing), cudaSuccess);
    ck_assert_int_eq(capturing, cudaStreamCaptureStatusNone); /* the capture's end ended t's part too */
    cudaEventDestroy(f->fork);
    cudaEventDestroy(f->join);
    cudaStreamDestroy(f->t);
    cudaStreamDestroy(f->s);
}

/* A stream that waits for an event recorded in a capture records into it (a fork) until the
 * origin waits for its work (a join); each launch replays both in their order: t's copy after
 * s's first add, s's second add after t's copy (the scheduler runs the latest-issued ready
 * task first, so a lost dependency would show in the values). */
START_TEST(a_forked_stream_records_into_the_capture_and_replays_in_order)
{
    float zero = 0.0f, value = 1.0f, *d = NULL, *seen = NULL, *one = NULL, *pinned = NULL;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    ck_assert_int_eq(cudaMalloc((void **)&d, sizeof *d), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&seen, sizeof *seen), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&one, sizeof *one), cudaSuccess);
    ck_assert_int_eq(cudaMallocHost((void **)&pinned, 2 * sizeof *pinned), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(d, &zero, sizeof zero, cudaMemcpyHostToDevice), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(one, &value, sizeof value, cudaMemcpyHostToDevice), cudaSuccess);
    forked f = fork_capture();
    ck_assert_int_eq(dp_cuda_accumulate(f.s, d, one, 1, 1), cudaSuccess);   /* d += 1 */
    ck_assert_int_eq(cudaEventRecord(f.fork, f.s), cudaSuccess);
    ck_assert_int_eq(cudaStreamWaitEvent(f.t, f.fork, 0), cudaSuccess);
    ck_assert_int_eq(dp_cuda_accumulate(f.t, seen, d, 1, 0), cudaSuccess); /* seen = d, on t */
    ck_assert_int_eq(cudaEventRecord(f.join, f.t), cudaSuccess);
    ck_assert_int_eq(cudaStreamWaitEvent(f.s, f.join, 0), cudaSuccess);
    ck_assert_int_eq(dp_cuda_accumulate(f.s, d, one, 1, 1), cudaSuccess);   /* d += 1 */
    ck_assert_int_eq(cudaMemcpyAsync(pinned, d, sizeof *d, cudaMemcpyDeviceToHost, f.s), cudaSuccess);
    ck_assert_int_eq(cudaMemcpyAsync(pinned + 1, seen, sizeof *seen, cudaMemcpyDeviceToHost, f.s), cudaSuccess);
    ck_assert_int_eq(cudaStreamEndCapture(f.s, &graph), cudaSuccess);
    ck_assert_int_eq(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ck_assert_int_eq(cudaGraphDestroy(graph), cudaSuccess);
    ck_assert_int_eq(cudaGraphLaunch(exec, f.s), cudaSuccess);
    ck_assert_int_eq(cudaGraphLaunch(exec, f.s), cudaSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(f.s), cudaSuccess);
    ck_assert_float_eq(pinned[0], 4.0f); /* two adds per launch */
    ck_assert_float_eq(pinned[1], 3.0f); /* the second launch's copy, between its adds */
    ck_assert_int_eq(cudaGraphExecDestroy(exec), cudaSuccess);
    free_forked(&f);
    cudaFreeHost(pinned);
    cudaFree(one);
    cudaFree(seen);
    cudaFree(d);
}
END_TEST

/* A capture with t forked into it at once, a memset of d queued on t. */
static forked fork_with_work(float *d)
{
    forked f = fork_capture();
    ck_assert_int_eq(cudaEventRecord(f.fork, f.s), cudaSuccess);
    ck_assert_int_eq(cudaStreamWaitEvent(f.t, f.fork, 0), cudaSuccess);
    ck_assert_int_eq(cudaMemsetAsync(d, 0, sizeof *d, f.t), cudaSuccess);
    return f;
}

/* The runtime's rule: every stream forked into a capture joins the origin before it ends. */
START_TEST(a_capture_with_a_fork_not_joined_back_fails)
{
    float *d = NULL;
    cudaGraph_t graph = NULL;
    ck_assert_int_eq(cudaMalloc((void **)&d, sizeof *d), cudaSuccess);
    forked f = fork_with_work(d);
    ck_assert_int_eq(cudaStreamEndCapture(f.t, &graph), cudaErrorStreamCaptureUnmatched); /* not its capture */
    ck_assert_int_eq(cudaStreamEndCapture(f.s, &graph), cudaErrorStreamCaptureUnjoined);
    ck_assert_ptr_null(graph);
    free_forked(&f);
    cudaFree(d);
}
END_TEST

/* What a host that polls a collective inside a captured step does (nccl's completion event
 * queried, its stream synchronised): each fails and breaks the capture, even with the fork
 * joined back afterwards. */
START_TEST(a_query_of_forked_work_during_a_capture_breaks_it)
{
    float *d = NULL;
    cudaGraph_t graph = NULL;
    ck_assert_int_eq(cudaMalloc((void **)&d, sizeof *d), cudaSuccess);
    forked f = fork_with_work(d);
    ck_assert_int_eq(cudaEventRecord(f.join, f.t), cudaSuccess);
    ck_assert_int_eq(cudaEventQuery(f.join), cudaErrorStreamCaptureUnsupported);
    ck_assert_int_eq(cudaEventSynchronize(f.join), cudaErrorStreamCaptureUnsupported);
    ck_assert_int_eq(cudaStreamSynchronize(f.t), cudaErrorStreamCaptureUnsupported);
    ck_assert_int_eq(cudaStreamQuery(f.t), cudaErrorStreamCaptureUnsupported);
    ck_assert_int_eq(cudaStreamWaitEvent(f.s, f.join, 0), cudaErrorStreamCaptureInvalidated);
    ck_assert_int_eq(cudaStreamEndCapture(f.s, &graph), cudaErrorStreamCaptureInvalidated);
    ck_assert_ptr_null(graph);
    free_forked(&f);
    cudaFree(d);
}
END_TEST

START_TEST(gemm_checks_arguments_as_cublas_does)
{
    enum { M = 5, N = 3, K = 4 };
    float a[K * M] = {0}, b[N * K] = {0}, c[M * N] = {0};
    cublasHandle_t h;
    ck_assert_int_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    float *da = device_copy(a, K * M), *db = device_copy(b, N * K), *dc = device_copy(c, M * N);
    float alpha = 1.5f, beta = 0.5f;
    /* op(A) = A^T with A stored K x M (lda K), op(B) = B stored K x N (ldb K). */
    ck_assert_int_eq(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &alpha, da, CUDA_R_32F, K - 1, db, CUDA_R_32F,
                                  K, &beta, dc, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_INVALID_VALUE); /* lda < K */
    ck_assert_int_eq(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &alpha, da, CUDA_R_16F, K, db, CUDA_R_32F, K,
                                  &beta, dc, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    ck_assert_int_eq(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &alpha, da, CUDA_R_32F, K, db, CUDA_R_32F, K,
                                  &beta, dc, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
}
END_TEST

/* The heuristic's answer for a 64 x 64 x 64 GEMM with A and B of `operands`, C and D of `out`,
 * the epilogue and, where bias_type is not -1, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE. */
static cublasStatus_t lt_heuristic(cublasLtHandle_t h, cudaDataType operands, cudaDataType out, uint32_t epilogue,
                                   int32_t bias_type, const void *bias)
{
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulPreference_t pref;
    ck_assert_int_eq(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
                     CUBLAS_STATUS_SUCCESS);
    int64_t ld = 128;
    ck_assert_int_eq(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &bias, sizeof bias),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld),
                     CUBLAS_STATUS_SUCCESS);
    if (bias_type != -1)
        ck_assert_int_eq(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                        sizeof bias_type), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatrixLayoutCreate(&a, operands, 64, 64, 64), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatrixLayoutCreate(&b, operands, 64, 64, 64), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatrixLayoutCreate(&c, out, 64, 64, 64), CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(h, desc, a, b, c, c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatmulDescDestroy(desc);
    return s;
}

/* A bf16 D (--precision bf16's activations): bf16 operands at FP32 compute, a forward epilogue
 * or DRELU, and the bias of D's type, cuBLASLt's default (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE
 * documents no FP32 bias beside a bf16 D but for integer and fp8 kernels); the rest refused (the
 * bias gradient of BGRADB with a bf16 D as not faked). */
START_TEST(cublaslt_writes_bf16_only_as_documented)
{
    cublasLtHandle_t h;
    ck_assert_int_eq(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
    void *bias = NULL;
    ck_assert_int_eq(cudaMalloc(&bias, 64 * 64), cudaSuccess);
    ck_assert_int_eq(lt_heuristic(h, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_RELU_AUX_BIAS, -1, bias),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(lt_heuristic(h, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_BIAS, CUDA_R_16BF, bias),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(lt_heuristic(h, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_BIAS, CUDA_R_32F, bias),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    ck_assert_int_eq(lt_heuristic(h, CUDA_R_16BF, CUDA_R_32F, CUBLASLT_EPILOGUE_BIAS, CUDA_R_16BF, bias),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    ck_assert_int_eq(lt_heuristic(h, CUDA_R_32F, CUDA_R_16BF, CUBLASLT_EPILOGUE_BIAS, -1, bias),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    ck_assert_int_eq(lt_heuristic(h, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_DRELU, -1, bias),
                     CUBLAS_STATUS_SUCCESS);
    ck_assert_int_eq(lt_heuristic(h, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_BGRADB, -1, bias),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    ck_assert_int_eq(cudaFree(bias), cudaSuccess);
    ck_assert_int_eq(cublasLtDestroy(h), CUBLAS_STATUS_SUCCESS);
}
END_TEST

static jmp_buf after_failure;

static void return_to_test(void)
{
    longjmp(after_failure, 1);
}

/* Runs op through the CUDA backend and returns the fatal error's message ("" if none). */
static const char *fault_message(const dp_backend *be, float *host_pointer)
{
    static char message[1024];
    float *d = be->alloc(be, 64 * sizeof(float), DP_MEM_OTHER, "a test buffer");
    ck_assert_ptr_nonnull(d);
    dp_backend_set_fatal_handler(return_to_test);
    message[0] = 0;
    if (setjmp(after_failure) == 0) {
        be->relu_forward(be, host_pointer, host_pointer, 64); /* a kernel handed host memory */
        be->download(be, host_pointer, d, 64 * sizeof(float));
    } else {
        snprintf(message, sizeof message, "%s", dp_last_error());
    }
    dp_backend_set_fatal_handler(NULL);
    return message;
}

static const dp_backend *open_cuda(void)
{
    dp_backend_request request = {.device = DP_DEVICE_CUDA, .local_size = 1};
    const dp_backend *be = NULL;
    ck_assert_msg(dp_backend_open(&request, &be) == 0, "%s", dp_last_error());
    return be;
}

/* A context whose GPU faulted cannot be released (the fault is sticky, as on a GPU): it stays
 * open, held here (volatile: a store never read back would be optimised away) until the test's
 * process ends. */
static const dp_backend *volatile faulted;

START_TEST(a_kernel_fault_is_reported_by_the_next_call_with_the_hint)
{
    float host[64] = {0};
    const char *message = fault_message(faulted = open_cuda(), host);
    ck_assert_msg(strstr(message, "cudaMemcpy") && strstr(message, "cudaErrorIllegalAddress") &&
                      strstr(message, "CUDA_LAUNCH_BLOCKING=1"), "%s", message);
}
END_TEST

START_TEST(with_launch_blocking_the_fault_names_the_kernel)
{
    setenv("CUDA_LAUNCH_BLOCKING", "1", 1);
    float host[64] = {0};
    const char *message = fault_message(faulted = open_cuda(), host);
    ck_assert_msg(strstr(message, "dp_cuda_relu_forward") && strstr(message, "cudaErrorIllegalAddress") &&
                      !strstr(message, "rerun with"), "%s", message);
}
END_TEST

START_TEST(a_failed_open_returns_its_first_error)
{
    setenv("FAKECUDA_MEMORY", "1000", 1); /* too small for the reduction partials */
    dp_backend_request request = {.device = DP_DEVICE_CUDA, .local_size = 1};
    const dp_backend *be = NULL;
    ck_assert_int_eq(dp_backend_open(&request, &be), DP_EDEVICE);
    ck_assert_msg(strstr(dp_last_error(), "cudaMalloc") && strstr(dp_last_error(), "out of memory"), "%s",
                  dp_last_error());
    ck_assert_uint_eq(fakecuda_live_device_allocations(), 0);
    unsetenv("FAKECUDA_MEMORY");
    be = open_cuda();
    ck_assert_ptr_null(be->alloc(be, (size_t)1 << 50, DP_MEM_OTHER, "an impossible buffer"));
    ck_assert_msg(strstr(dp_last_error(), "an impossible buffer") && strstr(dp_last_error(), "MiB free"), "%s",
                  dp_last_error());
    dp_backend_close(be);
    ck_assert_uint_eq(fakecuda_live_device_allocations(), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fakecuda");
    TCase *tc = tcase_create("runtime");
    tcase_add_test_raise_signal(tc, host_reads_of_device_memory_crash, SIGSEGV);
    tcase_add_test(tc, copies_must_match_their_direction);
    tcase_add_test(tc, queued_work_lands_only_at_a_synchronisation_point);
    tcase_add_test(tc, streams_order_only_what_events_and_the_legacy_stream_order);
    tcase_add_test(tc, gemm_checks_arguments_as_cublas_does);
    tcase_add_test(tc, cublaslt_writes_bf16_only_as_documented);
    tcase_add_test(tc, a_capture_records_and_each_launch_replays);
    tcase_add_test(tc, a_host_wait_during_a_capture_breaks_it);
    tcase_add_test(tc, a_forked_stream_records_into_the_capture_and_replays_in_order);
    tcase_add_test(tc, a_capture_with_a_fork_not_joined_back_fails);
    tcase_add_test(tc, a_query_of_forked_work_during_a_capture_breaks_it);
    suite_add_tcase(s, tc);
    TCase *backend = tcase_create("backend errors");
    tcase_add_test(backend, a_kernel_fault_is_reported_by_the_next_call_with_the_hint);
    tcase_add_test(backend, with_launch_blocking_the_fault_names_the_kernel);
    tcase_add_test(backend, a_failed_open_returns_its_first_error);
    suite_add_tcase(s, backend);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
