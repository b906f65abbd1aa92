/* The CUDA backend: cuBLAS for the GEMMs, the kernels of cuda_kernels.cu for the rest, on the
 * GPU the node's binding plan gives this rank. A context owns everything: the device, a stream
 * of its own (non-blocking, so other streams' work, NCCL's included, orders itself with
 * events rather than by the legacy stream's implicit waits), cuBLAS's handle bound to that
 * stream, the reductions' scratch and --trace's events. Operations run in issue order on the
 * stream; upload, download and synchronize wait for it. make check runs this file against the
 * fake CUDA runtime of tests/fakecuda/. */
#include "config.h"

#include "dp/error.h"
#include "src/backend/cuda_kernels.h"
#include "src/backend/cuda_lt.h"
#include "src/backend/cuda_operands.h"
#include "src/backend/device.h"
#include "src/backend/fatal.h"

#include "src/backend/cublas_api.h"
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cuda_context {
    dp_backend be;                  /* the operations; be.state points back here */
    int rank, device, gpus;
    int check_launches;             /* CUDA_LAUNCH_BLOCKING=1: synchronise after every kernel */
    dp_cublas_api blas_api;         /* cuBLAS, opened with the backend (cublas_api.h) */
    cublasHandle_t blas;
    cublasComputeType_t compute;    /* --precision: FP32 exact, TF32 inputs, or FP32 for bf16 operands */
    cudaDataType operands;          /* A's and B's elements: CUDA_R_32F, or CUDA_R_16BF copies (bf16) */
    dp_cuda_bf16_operands bf16;     /* where the bf16 copies are made */
    dp_cuda_lt *lt;                 /* the fused GEMMs (cuda_lt.c) */
    cudaStream_t stream;            /* where every operation queues */
    dp_cuda_partial *partials;      /* DP_MAX_PARTIALS reduction results, device */
    dp_cuda_partial *host_partials; /* where they are read back, page-locked */
    cudaEvent_t timer[DP_TIMER_SLOTS]; /* --trace's timestamps, created when first needed */
    int timer_used;
    int capturing;                  /* the stream records a graph: timer marks become its own records */
    int capture_timer;              /* the first timer slot of the capture's marks */
    char description[1024];
} cuda_context;

static cuda_context *ctx_of(const dp_backend *be)
{
    return be->state;
}

static const char *visible_devices(void)
{
    const char *list = getenv("CUDA_VISIBLE_DEVICES");
    return list ? list : "(unset)";
}

/* Errors a kernel raises while it runs: sticky, and reported by whichever call comes next. */
static int kernel_fault(cudaError_t e)
{
    static const cudaError_t faults[] = {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorMisalignedAddress,
                                         cudaErrorIllegalInstruction, cudaErrorInvalidAddressSpace, cudaErrorInvalidPc,
                                         cudaErrorHardwareStackError, cudaErrorAssert, cudaErrorLaunchTimeout};
    for (size_t i = 0; i < sizeof faults / sizeof *faults; i++)
        if (e == faults[i])
            return 1;
    return 0;
}

/* 0, or the error of a failed call recorded with the call, file, line, rank and CUDA's message;
 * CUDA's last error is cleared so that the next launch check is not blamed for this one. */
static int cuda_status(const cuda_context *c, cudaError_t e, const char *call, const char *file, int line)
{
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    const char *hint = kernel_fault(e) && !c->check_launches
                           ? " (a kernel's fault, reported by the next call: it may come from any earlier kernel; "
                             "rerun with CUDA_LAUNCH_BLOCKING=1 to stop at the kernel that faulted)"
                           : "";
    return dp_fail(DP_EDEVICE, "%s failed at %s:%d on rank %d (GPU %d): %s: %s%s", call, file, line,
                   c->rank, c->device, cudaGetErrorName(e), cudaGetErrorString(e), hint);
}

/* A kernel launch's status; with CUDA_LAUNCH_BLOCKING=1 also its completion, so a fault is
 * named after the kernel that raised it. */
static int launch_status(const cuda_context *c, cudaError_t e, const char *call, const char *file, int line)
{
    if (e == cudaSuccess && c->check_launches)
        e = cudaStreamSynchronize(c->stream);
    return cuda_status(c, e, call, file, line);
}

static int blas_status(const cuda_context *c, cublasStatus_t s, const char *call, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    return dp_fail(DP_EDEVICE, "%s failed at %s:%d on rank %d (GPU %d): %s", call, file, line,
                   c->rank, c->device, c->blas_api.status_string(s));
}

/* c is the context whose rank and GPU the message names. */
#define CUDA_CALL(c, call) cuda_status((c), (call), #call, __FILE__, __LINE__)
/* call goes through the loaded table; name is cuBLAS's, for the message. */
#define BLAS_CALL(c, name, call) blas_status((c), (call), name, __FILE__, __LINE__)
/* A launcher of cuda_kernels.h on c's stream. */
#define LAUNCH(c, launcher, ...) launch_status((c), launcher((c)->stream, __VA_ARGS__), #launcher, __FILE__, __LINE__)

static void *cuda_alloc(const dp_backend *be, size_t bytes, dp_memory_kind kind, const char *what)
{
    const cuda_context *c = ctx_of(be);
    if (dp_memory_admit(bytes, kind, what))
        return NULL;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaSuccess) {
        dp_memory_record(p, bytes, kind);
        return p;
    }
    (void)cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess)
        (void)cudaGetLastError();
    dp_fail(DP_ENOMEM, "cudaMalloc of %zu bytes for %s failed on rank %d (GPU %d, %zu of %zu MiB free): %s",
            bytes, what, c->rank, c->device, free_bytes >> 20, total_bytes >> 20, cudaGetErrorString(e));
    return NULL;
}

static void *cuda_alloc_host(const dp_backend *be, size_t bytes, const char *what)
{
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e == cudaSuccess)
        return p;
    (void)cudaGetLastError();
    dp_fail(DP_ENOMEM, "cudaMallocHost of %zu page-locked bytes for %s failed on rank %d: %s", bytes,
            what, ctx_of(be)->rank, cudaGetErrorString(e));
    return NULL;
}

static void cuda_free(const dp_backend *be, void *ptr)
{
    dp_memory_release(ptr);
    MUST(CUDA_CALL(ctx_of(be), cudaFree(ptr)));
}

static void cuda_free_host(const dp_backend *be, void *ptr)
{
    MUST(CUDA_CALL(ctx_of(be), cudaFreeHost(ptr)));
}

/* Copies queue behind the stream's work and return once done, so the host buffer is free. */
static void copy_and_wait(const cuda_context *c, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    if (!bytes)
        return;
    MUST(CUDA_CALL(c, cudaMemcpyAsync(dst, src, bytes, kind, c->stream)));
    MUST(CUDA_CALL(c, cudaStreamSynchronize(c->stream)));
}

static void cuda_upload(const dp_backend *be, void *dst, const void *host_src, size_t bytes)
{
    copy_and_wait(ctx_of(be), dst, host_src, bytes, cudaMemcpyHostToDevice);
}

static void cuda_upload_queued(const dp_backend *be, void *dst, const void *host_src, size_t bytes)
{
    const cuda_context *c = ctx_of(be);
    if (bytes)
        MUST(CUDA_CALL(c, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, c->stream)));
}

static void cuda_download(const dp_backend *be, void *host_dst, const void *src, size_t bytes)
{
    copy_and_wait(ctx_of(be), host_dst, src, bytes, cudaMemcpyDeviceToHost);
}

static void cuda_zero(const dp_backend *be, float *x, size_t n)
{
    const cuda_context *c = ctx_of(be);
    if (n)
        MUST(CUDA_CALL(c, cudaMemsetAsync(x, 0, n * sizeof *x, c->stream)));
}

/* A GEMM's operands as cuBLAS reads them: the caller's floats, or at bf16 their copies rounded
 * to nearest even, each spanning what its leading dimension does (6 bytes moved per element:
 * 4 read, 2 written; the GEMM then reads 2 instead of 4). */
static void gemm_operands(cuda_context *c, int trans_a, int trans_b, int m, int n, int k, const float *a, int lda,
                          const float *b, int ldb, const void **a_out, const void **b_out)
{
    *a_out = a;
    *b_out = b;
    if (c->operands == CUDA_R_32F)
        return;
    size_t a_span = dp_gemm_operand_span(trans_a ? k : m, trans_a ? m : k, lda);
    size_t b_span = dp_gemm_operand_span(trans_b ? n : k, trans_b ? k : n, ldb);
    uint16_t *a16 = NULL, *b16 = NULL;
    MUST(dp_cuda_bf16_operands_place(&c->bf16, c->capturing, a_span, b_span, &a16, &b16));
    MUST(LAUNCH(c, dp_cuda_to_bf16, a16, a, a_span));
    MUST(LAUNCH(c, dp_cuda_to_bf16, b16, b, b_span));
    *a_out = a16;
    *b_out = b16;
}

static void cuda_gemm(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                      int lda, const float *b, int ldb, float beta, float *out, int ldc)
{
    cuda_context *c = ctx_of(be);
    if (m == 0 || n == 0)
        return;
    const void *a_in, *b_in;
    gemm_operands(c, trans_a, trans_b, m, n, k, a, lda, b, ldb, &a_in, &b_in);
    /* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS reads each
     * row-major matrix as its transpose, so swapping the operands (flags unchanged) needs no copy. */
    MUST(BLAS_CALL(c, "cublasGemmEx",
                   c->blas_api.gemm_ex(c->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                       n, m, k, &alpha, b_in, c->operands, ldb, a_in, c->operands, lda, &beta, out,
                                       CUDA_R_32F, ldc, c->compute, CUBLAS_GEMM_DEFAULT)));
    if (c->check_launches)
        MUST(launch_status(c, cudaSuccess, "cublasGemmEx's kernels", __FILE__, __LINE__));
}

static void cuda_gemm_fused(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                            const float *a, int lda, const float *b, int ldb, float beta, float *out, int ldc,
                            const dp_gemm_epilogue *epilogue)
{
    cuda_context *c = ctx_of(be);
    const void *a_in = a, *b_in = b;
    if (m > 0 && n > 0 && k > 0)
        gemm_operands(c, trans_a, trans_b, m, n, k, a, lda, b, ldb, &a_in, &b_in);
    MUST(dp_cuda_lt_matmul(c->lt, trans_a, trans_b, m, n, k, alpha, a_in, lda, b_in, ldb, beta, out, ldc, epilogue));
    if (c->check_launches)
        MUST(launch_status(c, cudaSuccess, "cublasLtMatmul's kernels", __FILE__, __LINE__));
}

static void cuda_bias_act_forward(const dp_backend *be, float *y, const float *bias, int rows, int cols, int relu)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_bias_act, y, bias, rows, cols, relu));
}

static void cuda_relu_forward(const dp_backend *be, float *y, const float *x, size_t n)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_relu_forward, y, x, n));
}

static void cuda_relu_backward(const dp_backend *be, float *dy, const float *y, size_t n)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_relu_backward, dy, y, n));
}

static void cuda_bias_grad(const dp_backend *be, const float *dy, int rows, int cols, float *db, int accumulate)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_bias_grad, dy, rows, cols, db, accumulate));
}

static void cuda_dropout_forward(const dp_backend *be, float *y, const float *x, float *mask, int rows, int cols,
                                 const dp_dropout_key *key)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_dropout_forward, y, x, mask, rows, cols, key));
}

static void cuda_multiply(const dp_backend *be, float *y, const float *x, const float *mask, size_t n)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_multiply, y, x, mask, n));
}

static void cuda_accumulate(const dp_backend *be, float *y, const float *x, size_t n, int add)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_accumulate, y, x, n, add));
}

static void cuda_column_sums(const dp_backend *be, const float *a, const float *b, int rows, int cols, double *out)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_column_sums, a, b, rows, cols, out));
}

static void cuda_bn_normalize(const dp_backend *be, const float *x, float *xhat, float *y, int rows, int cols,
                              const float *mean, const float *invstd, const float *gamma, const float *beta)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_bn_normalize, x, xhat, y, rows, cols, mean, invstd, gamma, beta));
}

static void cuda_bn_backward_input(const dp_backend *be, const float *dy, const float *xhat, float *dx, int rows,
                                   int cols, const float *gamma, const float *invstd, const float *mean_dy,
                                   const float *mean_dy_xhat)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_bn_backward_input, dy, xhat, dx, rows, cols, gamma, invstd, mean_dy, mean_dy_xhat));
}

static void cuda_bn_param_grads(const dp_backend *be, const double *sums, int cols, float *dgamma, float *dbeta,
                                int accumulate)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_bn_param_grads, sums, cols, dgamma, dbeta, accumulate));
}

static void cuda_bn_update_running(const dp_backend *be, float *running_mean, float *running_var, const float *mean,
                                   const float *var_unbiased, int cols, float momentum)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_bn_update_running, running_mean, running_var, mean, var_unbiased, cols, momentum));
}

static void cuda_inverse_std(const dp_backend *be, const float *var, float *invstd, int n, float eps)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_inverse_std, var, invstd, n, eps));
}

static void cuda_softmax_xent(const dp_backend *be, const float *logits, const int32_t *labels, int rows, int cols,
                              float *dlogits, double *totals)
{
    const cuda_context *c = ctx_of(be);
    MUST(LAUNCH(c, dp_cuda_softmax_xent, logits, labels, rows, cols, dlogits, c->partials, totals));
}

static void cuda_mse(const dp_backend *be, const float *pred, const float *targets, int rows, int cols, float *dpred,
                     double *totals)
{
    const cuda_context *c = ctx_of(be);
    MUST(LAUNCH(c, dp_cuda_mse, pred, targets, (size_t)rows * cols, cols, dpred, c->partials, totals));
}

/* The per-block counts come to the host (this waits for the kernel) and are added there. */
static size_t cuda_count_nonfinite(const dp_backend *be, const float *x, size_t n)
{
    const cuda_context *c = ctx_of(be);
    int blocks = 0;
    MUST(LAUNCH(c, dp_cuda_count_nonfinite, x, n, c->partials, &blocks));
    copy_and_wait(c, c->host_partials, c->partials, (size_t)blocks * sizeof *c->partials, cudaMemcpyDeviceToHost);
    size_t bad = 0;
    for (int i = 0; i < blocks; i++)
        bad += (size_t)c->host_partials[i].count;
    return bad;
}

static void cuda_sgd_step(const dp_backend *be, float *params, float *grads, float *velocity, size_t n,
                          const dp_sgd_coefs *k, double *nonfinite)
{
    const cuda_context *c = ctx_of(be);
    MUST(LAUNCH(c, dp_cuda_sgd_step, params, grads, velocity, n, k, c->partials, nonfinite));
}

static void cuda_adamw_step(const dp_backend *be, float *params, float *grads, float *exp_avg, float *exp_avg_sq,
                            size_t n, const dp_adamw_coefs *k, double *nonfinite)
{
    const cuda_context *c = ctx_of(be);
    MUST(LAUNCH(c, dp_cuda_adamw_step, params, grads, exp_avg, exp_avg_sq, n, k, c->partials, nonfinite));
}

static void cuda_synchronize(const dp_backend *be)
{
    const cuda_context *c = ctx_of(be);
    MUST(CUDA_CALL(c, cudaStreamSynchronize(c->stream)));
}

/* A captured graph and the timer slots whose events its launches record anew. */
typedef struct cuda_graph {
    cudaGraphExec_t exec;
    int timer_from, timer_to;
} cuda_graph;

/* Global capture mode: a call anywhere that would wait for the device during the capture fails
 * and invalidates it, so a host synchronisation inside a captured step cannot pass unnoticed. */
static int cuda_capture_begin(const dp_backend *be)
{
    cuda_context *c = ctx_of(be);
    TRY(CUDA_CALL(c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeGlobal)));
    c->capturing = 1;
    c->capture_timer = c->timer_used;
    return 0;
}

static void *cuda_capture_end(const dp_backend *be)
{
    cuda_context *c = ctx_of(be);
    cudaGraph_t graph = NULL;
    c->capturing = 0;
    if (CUDA_CALL(c, cudaStreamEndCapture(c->stream, &graph)))
        return NULL;
    cuda_graph *g = calloc(1, sizeof *g);
    int status = g ? CUDA_CALL(c, cudaGraphInstantiate(&g->exec, graph, 0))
                   : dp_fail(DP_ENOMEM, "rank %d: no host memory for a CUDA graph", c->rank);
    int destroyed = CUDA_CALL(c, cudaGraphDestroy(graph));
    if (!status && destroyed) {
        (void)cudaGraphExecDestroy(g->exec);
        status = destroyed;
    }
    if (status) {
        free(g);
        return NULL;
    }
    /* The capture's marks are the launches' to make: their slots are taken again by each. */
    *g = (cuda_graph){.exec = g->exec, .timer_from = c->capture_timer, .timer_to = c->timer_used};
    c->timer_used = c->capture_timer;
    return g;
}

/* The launch records the capture's timer slots again: they must be the ones now next. */
static void cuda_graph_launch(const dp_backend *be, void *graph)
{
    cuda_context *c = ctx_of(be);
    const cuda_graph *g = graph;
    if (c->timer_used != g->timer_from) {
        dp_fail(DP_EINVAL, "rank %d: a CUDA graph launched with timer slot %d next, captured with slot %d", c->rank,
                c->timer_used, g->timer_from);
        dp_backend_fatal();
    }
    MUST(CUDA_CALL(c, cudaGraphLaunch(g->exec, c->stream)));
    c->timer_used = g->timer_to;
}

static void cuda_graph_free(const dp_backend *be, void *graph)
{
    cuda_graph *g = graph;
    MUST(CUDA_CALL(ctx_of(be), cudaGraphExecDestroy(g->exec)));
    free(g);
}

static void cuda_im2col(const dp_backend *be, const float *x, float *col, int rows, const dp_window *w)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_im2col, x, col, rows, w));
}

static void cuda_col2im(const dp_backend *be, const float *col, float *dx, int rows, const dp_window *w)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_col2im, col, dx, rows, w));
}

static void cuda_swap_axes(const dp_backend *be, const float *x, float *y, size_t outer, size_t middle, size_t inner)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_swap_axes, x, y, outer, middle, inner));
}

static void cuda_pool_forward(const dp_backend *be, const float *x, float *y, int rows, const dp_window *w,
                              dp_pool pool)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_pool_forward, x, y, rows, w, pool));
}

static void cuda_pool_backward(const dp_backend *be, const float *x, const float *dy, float *dx, int rows,
                               const dp_window *w, dp_pool pool)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_pool_backward, x, dy, dx, rows, w, pool));
}

static const char *cuda_describe(const dp_backend *be)
{
    return ctx_of(be)->description;
}

/* Every operation computes in float32; GEMMs also take bf16 (their operands rounded into bf16
 * copies for bf16 tensor cores, FP32 accumulation and outputs). */
static int cuda_supports(const dp_backend *be, const char *op, dp_dtype dtype, char *why, size_t size)
{
    if (strncmp(op, "gemm_fused/", 11) == 0)
        return dp_cuda_lt_supports(ctx_of(be)->lt, op, why, size);
    if (strcmp(op, "capture") == 0 && ctx_of(be)->check_launches) {
        snprintf(why, size, "CUDA_LAUNCH_BLOCKING=1 synchronises after every kernel, which a CUDA graph capture cannot hold");
        return 0;
    }
    if (dtype == DP_DTYPE_F32 || (dtype == DP_DTYPE_BF16 && strcmp(op, "gemm") == 0))
        return 1;
    snprintf(why, size, "this build's CUDA %s computes in float32 only (bf16: gemm alone)", op);
    return 0;
}

static int cuda_timer_mark(const dp_backend *be)
{
    cuda_context *c = ctx_of(be);
    if (c->timer_used == DP_TIMER_SLOTS)
        return -1;
    cudaEvent_t *event = &c->timer[c->timer_used];
    if (!*event)
        MUST(CUDA_CALL(c, cudaEventCreate(event)));
    /* In a capture, an external record: each launch records the event again, with its time. */
    MUST(CUDA_CALL(c, cudaEventRecordWithFlags(*event, c->stream, c->capturing ? cudaEventRecordExternal
                                                                                : cudaEventRecordDefault)));
    return c->timer_used++;
}

static double cuda_timer_seconds(const dp_backend *be, int from, int to)
{
    const cuda_context *c = ctx_of(be);
    float ms = 0.0f;
    MUST(CUDA_CALL(c, cudaEventElapsedTime(&ms, c->timer[from], c->timer[to])));
    return 1e-3 * (double)ms;
}

static void cuda_timer_reset(const dp_backend *be)
{
    ctx_of(be)->timer_used = 0;
}

/* ---- the training data held on the GPU (src/train/resident.c) ---- */

static void cuda_gather_rows(const dp_backend *be, void *dst, const void *src, const int32_t *index, int rows, int words)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_gather_rows, dst, src, index, rows, words));
}

static void cuda_memory_info(const dp_backend *be, size_t *free_bytes, size_t *total_bytes)
{
    MUST(CUDA_CALL(ctx_of(be), cudaMemGetInfo(free_bytes, total_bytes)));
}

static const dp_backend cuda_operations = {
    .name = "cuda",
    .host_memory = 0,
    .supports = cuda_supports,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .alloc_host = cuda_alloc_host,
    .free_host = cuda_free_host,
    .upload = cuda_upload,
    .upload_queued = cuda_upload_queued,
    .download = cuda_download,
    .zero = cuda_zero,
    .gemm = cuda_gemm,
    .gemm_fused = cuda_gemm_fused,
    .bias_act_forward = cuda_bias_act_forward,
    .relu_forward = cuda_relu_forward,
    .relu_backward = cuda_relu_backward,
    .bias_grad = cuda_bias_grad,
    .dropout_forward = cuda_dropout_forward,
    .multiply = cuda_multiply,
    .accumulate = cuda_accumulate,
    .column_sums = cuda_column_sums,
    .bn_normalize = cuda_bn_normalize,
    .bn_backward_input = cuda_bn_backward_input,
    .bn_param_grads = cuda_bn_param_grads,
    .bn_update_running = cuda_bn_update_running,
    .inverse_std = cuda_inverse_std,
    .softmax_xent = cuda_softmax_xent,
    .mse = cuda_mse,
    .count_nonfinite = cuda_count_nonfinite,
    .sgd_step = cuda_sgd_step,
    .adamw_step = cuda_adamw_step,
    .im2col = cuda_im2col,
    .col2im = cuda_col2im,
    .swap_axes = cuda_swap_axes,
    .pool_forward = cuda_pool_forward,
    .pool_backward = cuda_pool_backward,
    .synchronize = cuda_synchronize,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .graph_launch = cuda_graph_launch,
    .graph_free = cuda_graph_free,
    .describe = cuda_describe,
    .timer_mark = cuda_timer_mark,
    .timer_seconds = cuda_timer_seconds,
    .timer_reset = cuda_timer_reset,
    .gather_rows = cuda_gather_rows,
    .memory_info = cuda_memory_info,
};

static int cuda_gpu_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess)
        return count;
    (void)cudaGetLastError();
    return 0;
}

static int cuda_gpu_ids(dp_gpu_id *ids, int max)
{
    int count = cuda_gpu_count(), found = 0;
    struct cudaDeviceProp prop;
    for (; found < count && found < max; found++) {
        if (cudaGetDeviceProperties(&prop, found) != cudaSuccess) {
            (void)cudaGetLastError();
            break;
        }
        memcpy(ids[found].uuid, prop.uuid.bytes, sizeof ids[found].uuid);
    }
    return found;
}

static int bind_device(cuda_context *c, const dp_backend_request *request)
{
    cudaError_t e = cudaGetDeviceCount(&c->gpus);
    if (e != cudaSuccess || c->gpus == 0) {
        (void)cudaGetLastError();
        return dp_fail(DP_EDEVICE, "--device cuda: rank %d sees no CUDA GPU (cudaGetDeviceCount: %s; CUDA_VISIBLE_DEVICES=%s)",
                       request->rank, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", visible_devices());
    }
    const dp_gpu_binding *plan = request->binding;
    if (plan && !plan->own_gpu && !request->share_gpu)
        return dp_fail(DP_EINVAL, "--device cuda: %s (rank %d sees %d GPU%s; CUDA_VISIBLE_DEVICES=%s): start one rank per GPU, "
                       "or add --share-gpu to let ranks take turns on a GPU",
                       plan->text, request->rank, c->gpus, c->gpus == 1 ? "" : "s", visible_devices());
    if (!plan && request->local_size > c->gpus && !request->share_gpu)
        return dp_fail(DP_EINVAL, "--device cuda: %d ranks on rank %d's node but %d GPU%s visible (CUDA_VISIBLE_DEVICES=%s): "
                       "start one rank per GPU, or add --share-gpu to let ranks take turns on a GPU",
                       request->local_size, request->rank, c->gpus, c->gpus == 1 ? "" : "s", visible_devices());
    c->device = plan ? plan->gpu : request->local_rank % c->gpus;
    TRY(CUDA_CALL(c, cudaSetDevice(c->device)));
    return 0;
}

/* --precision's cuBLAS compute type, the GEMMs' operand type and the banner's words. bf16 needs
 * bf16 operands in memory: FP32 operands at CUBLAS_COMPUTE_32F_FAST_16BF ran at TF32's speed on
 * an H200. A/B CUDA_R_16BF, C CUDA_R_32F at CUBLAS_COMPUTE_32F is a combination cublasGemmEx and
 * cublasLtMatmul list; the same inputs, rounded alike, with FP32 accumulation as FAST_16BF. */
static const struct {
    cublasComputeType_t compute;
    cudaDataType operands;
    const char *words;
} precisions[] = {
    [DP_PRECISION_FP32] = {CUBLAS_COMPUTE_32F, CUDA_R_32F, "exact FP32"},
    [DP_PRECISION_TF32] = {CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, "TF32 tensor-core"},
    [DP_PRECISION_BF16] = {CUBLAS_COMPUTE_32F, CUDA_R_16BF,
                           "bf16 tensor-core (bf16 operands, FP32 accumulation and outputs)"},
};

static int describe_device(cuda_context *c, const dp_backend_request *request)
{
    struct cudaDeviceProp prop;
    char fused[256];
    TRY(CUDA_CALL(c, cudaGetDeviceProperties(&prop, c->device)));
    dp_cuda_lt_describe(c->lt, fused, sizeof fused);
    const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
    snprintf(c->description, sizeof c->description,
             "cuda: GPU %d of %d visible (GPU-%02x%02x%02x%02x, PCI %04x:%02x:%02x.0), %.96s (sm_%d%d, %zu GiB), %s GEMMs, %s%s%s",
             c->device, c->gpus, u[0], u[1], u[2], u[3], (unsigned)prop.pciDomainID, (unsigned)prop.pciBusID,
             (unsigned)prop.pciDeviceID, prop.name, prop.major, prop.minor, (size_t)(prop.totalGlobalMem >> 30),
             precisions[request->precision].words, fused, request->binding ? "; " : "",
             request->binding ? request->binding->text : "");
    return 0;
}

static int create_resources(cuda_context *c, const dp_backend_request *request)
{
    char why[512];
    if (dp_cublas_load(&c->blas_api, why, sizeof why))
        return dp_fail(DP_EINVAL, "rank %d: --device cuda: cuBLAS: %s", request->rank, why);
    TRY(CUDA_CALL(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)));
    TRY(BLAS_CALL(c, "cublasCreate", c->blas_api.create(&c->blas)));
    TRY(BLAS_CALL(c, "cublasSetStream", c->blas_api.set_stream(c->blas, c->stream)));
    TRY(CUDA_CALL(c, cudaMalloc((void **)&c->partials, DP_MAX_PARTIALS * sizeof *c->partials)));
    TRY(CUDA_CALL(c, cudaMallocHost((void **)&c->host_partials, DP_MAX_PARTIALS * sizeof *c->host_partials)));
    c->compute = precisions[request->precision].compute;
    c->operands = precisions[request->precision].operands;
    c->bf16 = (dp_cuda_bf16_operands){.be = &c->be, .rank = request->rank};
    dp_cuda_lt_setup lt = {.be = &c->be, .stream = c->stream, .compute = c->compute, .operands = c->operands,
                           .unfused = request->unfused, .rank = request->rank, .device = c->device};
    TRY(dp_cuda_lt_open(&lt, &c->lt));
    return describe_device(c, request);
}

/* Releases what create_resources made and the context. With `report`, the first failure is
 * recorded and returned; without (after a failed open), failures are ignored so that the error
 * that made the open fail is the one the caller reports. */
static int release_context(cuda_context *c, int report)
{
    int status = dp_cuda_lt_close(c->lt, report);
    int freed_copies = dp_cuda_bf16_operands_release(&c->bf16, report);
    if (!status)
        status = freed_copies;
    if (c->blas) {
        cublasStatus_t s = c->blas_api.destroy(c->blas);
        if (report && !status)
            status = blas_status(c, s, "cublasDestroy", __FILE__, __LINE__);
    }
    cudaError_t freed[2] = {c->partials ? cudaFree(c->partials) : cudaSuccess,
                            c->host_partials ? cudaFreeHost(c->host_partials) : cudaSuccess};
    if (report && !status)
        status = cuda_status(c, freed[0], "cudaFree(partials)", __FILE__, __LINE__);
    if (report && !status)
        status = cuda_status(c, freed[1], "cudaFreeHost(host_partials)", __FILE__, __LINE__);
    for (int i = 0; i < DP_TIMER_SLOTS && c->timer[i]; i++) {
        cudaError_t e = cudaEventDestroy(c->timer[i]);
        if (report && !status)
            status = cuda_status(c, e, "cudaEventDestroy(timer)", __FILE__, __LINE__);
    }
    if (c->stream) {
        cudaError_t e = cudaStreamDestroy(c->stream);
        if (report && !status)
            status = cuda_status(c, e, "cudaStreamDestroy", __FILE__, __LINE__);
    }
    (void)cudaGetLastError();
    free(c);
    return status;
}

static int cuda_open(const dp_backend_request *request, const dp_backend **out)
{
    if (request->precision > DP_PRECISION_BF16)
        return dp_fail(DP_EINVAL, "rank %d: --device cuda: GEMMs take --precision fp32, tf32 or bf16", request->rank);
    cuda_context *c = calloc(1, sizeof *c);
    if (!c)
        return dp_fail(DP_ENOMEM, "rank %d: --device cuda: no host memory for the CUDA backend's context", request->rank);
    c->be = cuda_operations;
    c->be.state = c;
    c->rank = request->rank;
    c->device = -1;
    const char *blocking = getenv("CUDA_LAUNCH_BLOCKING");
    c->check_launches = blocking && strcmp(blocking, "1") == 0;
    int status = bind_device(c, request);
    if (!status)
        status = create_resources(c, request);
    if (status) {
        (void)release_context(c, 0);
        return status;
    }
    c->be.stream = c->stream;
    *out = &c->be;
    return 0;
}

static void cuda_close(const dp_backend *be)
{
    if (release_context(ctx_of(be), 1))
        dp_backend_fatal();
}

const dp_device_backend dp_cuda_device = {
    .gpu_count = cuda_gpu_count,
    .gpu_ids = cuda_gpu_ids,
    .open = cuda_open,
    .close = cuda_close,
};
