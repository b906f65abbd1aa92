/* The CUDA backend: cuBLAS for the GEMMs (cuda_gemm.c), the kernels of cuda_kernels.cu for
 * the rest, on the GPU the node's binding plan gives this rank. A context owns everything: the
 * device, a stream of its own (non-blocking, so other streams' work, NCCL's included, orders
 * itself with events rather than by the legacy stream's implicit waits), cuBLAS's handle bound
 * to that stream, the reductions' scratch and --trace's events. Operations run in issue order
 * on the stream; upload, download and synchronize wait for it. This file is the operations
 * and their table; the context's lifetime is cuda_context.c's. make check runs them against
 * the fake CUDA runtime of tests/fakecuda/. */
#include "config.h"

#include "src/backend/cuda_context.h"
#include "src/backend/cuda_gemm.h"

#include "dp/error.h"
#include "src/backend/cuda_exact_kernels.h"
#include "src/backend/fatal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void cuda_bn_channel_sums(const dp_backend *be, const double *column_sums, double *channel_sums, int channels,
                                 int pixels)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_bn_channel_sums, column_sums, channel_sums, channels, pixels));
}

static void cuda_bn_batch_stats(const dp_backend *be, const double *channel_sums, int channels, double n, float eps,
                                float *mean, float *invstd, float *var_unbiased)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_bn_batch_stats, channel_sums, channels, n, eps, mean, invstd, var_unbiased));
}

static void cuda_bn_means(const dp_backend *be, const double *sums, int count, double n, float *means)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_bn_means, sums, count, n, means));
}

static void cuda_bn_spread(const dp_backend *be, const float *per_channel, float *columns, int channels, int pixels,
                           int count)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_bn_spread, per_channel, columns, channels, pixels, count));
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

static void cuda_sum_squares(const dp_backend *be, const float *x, size_t n, float scale, double *total)
{
    const cuda_context *c = ctx_of(be);
    MUST(LAUNCH(c, dp_cuda_sum_squares, x, n, scale, c->partials, total));
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
 * copies for bf16 tensor cores, FP32 accumulation and outputs, a forward GEMM's output in bf16
 * where cuBLASLt writes it: gemm_rounded_bf16). */
static int cuda_supports(const dp_backend *be, const char *op, dp_dtype dtype, char *why, size_t size)
{
    if (strncmp(op, "gemm_fused/", 11) == 0)
        return dp_cuda_lt_supports(ctx_of(be)->lt, op, why, size);
    if (strcmp(op, "capture") == 0 && ctx_of(be)->check_launches) {
        snprintf(why, size, "CUDA_LAUNCH_BLOCKING=1 synchronises after every kernel, which a CUDA graph capture cannot hold");
        return 0;
    }
    if (strcmp(op, "gemm_rounded_bf16") == 0 && dtype == DP_DTYPE_BF16)
        return dp_cuda_lt_writes_bf16(ctx_of(be)->lt, why, size);
    if (strcmp(op, "gemm_rounded") == 0) {
        if (dtype == DP_DTYPE_BF16 && ctx_of(be)->operands == CUDA_R_16BF)
            return 1;
        snprintf(why, size, "the GEMMs read %s operands (--precision bf16 reads bf16 copies)",
                 ctx_of(be)->operands == CUDA_R_16BF ? "bf16" : "float32");
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

/* ---- --exact's accumulator on the GPU (src/strategy/exact.c) ---- */

static void cuda_exact_add(const dp_backend *be, double *acc, const float *values, size_t n, int first)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_exact_add, acc, values, n, first));
}

static void cuda_exact_to_floats(const dp_backend *be, const double *acc, const float *last, size_t n, float *out)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_exact_to_floats, acc, last, n, out));
}

static void cuda_exact_to_digits(const dp_backend *be, const double *acc, const float *last, size_t n, int digit_bits,
                                 int first, int digits, int64_t *out, uint64_t *largest)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_exact_to_digits, acc, last, n, digit_bits, first, digits, out, largest));
}

static void cuda_exact_from_digits(const dp_backend *be, const int64_t *digits, size_t n, int digit_bits, int count,
                                   float *out)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_exact_from_digits, digits, n, digit_bits, count, out));
}

const dp_backend dp_cuda_operations = {
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
    .gemm = dp_cuda_gemm,
    .gemm_fused = dp_cuda_gemm_fused,
    .round_operand = dp_cuda_round_operand,
    .gemm_rounded = dp_cuda_gemm_rounded,
    .gemm_rounded_bf16 = dp_cuda_gemm_rounded_bf16,
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
    .bn_channel_sums = cuda_bn_channel_sums,
    .bn_batch_stats = cuda_bn_batch_stats,
    .bn_means = cuda_bn_means,
    .bn_spread = cuda_bn_spread,
    .softmax_xent = cuda_softmax_xent,
    .mse = cuda_mse,
    .count_nonfinite = cuda_count_nonfinite,
    .sum_squares = cuda_sum_squares,
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
    .exact_add = cuda_exact_add,
    .exact_to_floats = cuda_exact_to_floats,
    .exact_to_digits = cuda_exact_to_digits,
    .exact_from_digits = cuda_exact_from_digits,
};
