/* The CPU backend: CBLAS sgemm for the linear layers, and for the rest vectorised loops
 * (cpu_loops.c, one build per instruction set, the best chosen at run time) shared among the
 * rank's threads (cpu_parallel.c). Each loop's arithmetic is kernel_math.h's, the same
 * functions the CUDA kernels call, so both backends compute every element alike
 * (tests/test_kernel_math.c, tests/test_gpu.c, tests/test_cpu_loops.c). */
#include "config.h"

#include "dp/backend.h"
#include "dp/blas.h"
#include "dp/error.h"
#include "src/backend/cpu_loops.h"
#include "src/backend/cpu_parallel.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The CPU backend's context: the loops of the best instruction set this CPU has, the BLAS
 * threads, which OpenBLAS keeps per process (so there is one CPU context per process), and the
 * colour of the next allocation. */
typedef struct cpu_state {
    const dp_cpu_loops *loops;
    int blas_threads;
    char threads_why[128];
    char description[640];
    unsigned next_colour;
} cpu_state;

static cpu_state cpu = {.blas_threads = 1, .threads_why = "--threads"};

static cpu_state *state_of(const dp_backend *be)
{
    return be->state;
}

/* Backend memory starts on a cache line (malloc's large blocks sit 16 bytes past a page, so
 * every 64-byte vector load would straddle two lines), at one of COLOURS offsets within a
 * page, taken in turn: large blocks are mapped on their own, so without it the parameters,
 * gradients and optimizer state the update streams through together would share their low 12
 * address bits, and each load after a store to another array at the same offset waits (4K
 * aliasing; the update ran 2.5x slower). The block's own address is kept just before. */
#define CPU_ALIGNMENT 64
#define COLOURS 32
#define COLOUR_BYTES 128

/* Backend memory is host memory here, counted (dp/memory.h) like a GPU's. */
static void *cpu_alloc(const dp_backend *be, size_t bytes, dp_memory_kind kind, const char *what)
{
    if (dp_memory_admit(bytes, kind, what))
        return NULL;
    size_t colour = (size_t)(state_of(be)->next_colour++ % COLOURS) * COLOUR_BYTES;
    size_t rounded = (bytes + CPU_ALIGNMENT - 1) / CPU_ALIGNMENT * CPU_ALIGNMENT;
    char *block = aligned_alloc(CPU_ALIGNMENT, CPU_ALIGNMENT + colour + rounded);
    if (!block) {
        dp_fail(DP_ENOMEM, "out of memory allocating %zu bytes for %s", bytes, what);
        return NULL;
    }
    char *p = block + CPU_ALIGNMENT + colour;
    memcpy(p - sizeof block, &block, sizeof block);
    dp_memory_record(p, bytes, kind);
    return p;
}

static void cpu_free(const dp_backend *be, void *ptr)
{
    (void)be; /* host memory and BLAS need no state */
    if (!ptr)
        return;
    dp_memory_release(ptr);
    char *block;
    memcpy(&block, (char *)ptr - sizeof block, sizeof block);
    free(block);
}

/* Host staging is plain host memory, outside the counter (as on a GPU machine). */
static void *cpu_alloc_host(const dp_backend *be, size_t bytes, const char *what)
{
    (void)be; /* host memory and BLAS need no state */
    return dp_alloc(bytes, what);
}

static void cpu_free_host(const dp_backend *be, void *ptr)
{
    (void)be; /* host memory and BLAS need no state */
    free(ptr);
}

static void cpu_copy(const dp_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be; /* host memory and BLAS need no state */
    if (bytes)
        memcpy(dst, src, bytes);
}

static void cpu_zero(const dp_backend *be, float *x, size_t n)
{
    (void)be; /* host memory and BLAS need no state */
    if (n)
        memset(x, 0, n * sizeof *x);
}

static void cpu_gemm(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                     const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    (void)be; /* host memory and BLAS need no state */
    if (m == 0 || n == 0)
        return;
    /* An empty sum (a rank without rows) leaves beta C, which BLAS need not handle. */
    if (k == 0) {
        for (int r = 0; r < m; r++)
            for (int col = 0; col < n; col++)
                c[(size_t)r * ldc + col] = beta == 0.0f ? 0.0f : beta * c[(size_t)r * ldc + col];
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* The loops of the best instruction set this CPU has, each operation split over the rank's
 * threads in parts of at least a grain. A grain is 256 Ki values (1 MiB of floats): on the
 * 2-core machine of bench/RESULTS.md a ReLU pass over 256 x 1024 takes 25 us on one thread and
 * no less on two, as waking a thread costs about as much; AdamW over 1.86 M values takes half
 * the time on two. */
static const dp_cpu_loops *loops(const dp_backend *be)
{
    return state_of(be)->loops;
}

#define GRAIN_ELEMENTS ((size_t)1 << 18)

static size_t grain_of(size_t per_unit)
{
    return per_unit >= GRAIN_ELEMENTS ? 1 : GRAIN_ELEMENTS / (per_unit ? per_unit : 1);
}

static void over_rows(dp_loop_fn fn, const dp_loop_args *a, int rows)
{
    dp_cpu_parallel(fn, a, (size_t)rows, grain_of(a->cols));
}

static void over_columns(dp_loop_fn fn, const dp_loop_args *a, int cols)
{
    dp_cpu_parallel(fn, a, (size_t)cols, grain_of(a->rows));
}

static size_t over_elements(dp_loop_fn fn, const dp_loop_args *a, size_t n)
{
    return dp_cpu_parallel(fn, a, n, GRAIN_ELEMENTS);
}

static void cpu_bias_act_forward(const dp_backend *be, float *y, const float *bias, int rows, int cols, int relu)
{
    over_rows(loops(be)->bias_act_forward, &(dp_loop_args){.y = y, .bias = bias, .cols = (size_t)cols, .relu = relu},
              rows);
}

static void cpu_relu_forward(const dp_backend *be, float *y, const float *x, size_t n)
{
    over_elements(loops(be)->relu_forward, &(dp_loop_args){.y = y, .x = x}, n);
}

static void cpu_relu_backward(const dp_backend *be, float *dy, const float *y, size_t n)
{
    over_elements(loops(be)->relu_backward, &(dp_loop_args){.y = dy, .other = y}, n);
}

static void cpu_bias_grad(const dp_backend *be, const float *dy, int rows, int cols, float *db, int accumulate)
{
    dp_loop_args a = {.x = dy, .rows = (size_t)rows, .cols = (size_t)cols, .y = db, .accumulate = accumulate};
    over_columns(loops(be)->bias_grad, &a, cols);
}

static void cpu_dropout_forward(const dp_backend *be, float *y, const float *x, float *mask, int rows, int cols,
                                const dp_dropout_key *key)
{
    dp_loop_args a = {.y = y, .x = x, .mask = mask, .cols = (size_t)cols, .dropout = key};
    over_rows(loops(be)->dropout_forward, &a, rows);
}

static void cpu_multiply(const dp_backend *be, float *y, const float *x, const float *mask, size_t n)
{
    over_elements(loops(be)->multiply, &(dp_loop_args){.y = y, .x = x, .other = mask}, n);
}

static void cpu_accumulate(const dp_backend *be, float *y, const float *x, size_t n, int add)
{
    over_elements(loops(be)->accumulate, &(dp_loop_args){.y = y, .x = x, .accumulate = add}, n);
}

static void cpu_column_sums(const dp_backend *be, const float *a, const float *b, int rows, int cols, double *out)
{
    dp_loop_args args = {.x = a, .other = b, .rows = (size_t)rows, .cols = (size_t)cols, .sums = out};
    over_columns(loops(be)->column_sums, &args, cols);
}

static void cpu_bn_normalize(const dp_backend *be, const float *x, float *xhat, float *y, int rows, int cols,
                             const float *mean, const float *invstd, const float *gamma,
                             const float *beta)
{
    dp_loop_args a = {.x = x, .xhat = xhat, .y = y, .cols = (size_t)cols, .mean = mean, .invstd = invstd,
                      .gamma = gamma, .beta = beta};
    over_rows(loops(be)->bn_normalize, &a, rows);
}

static void cpu_bn_backward_input(const dp_backend *be, const float *dy, const float *xhat, float *dx, int rows, int cols,
                                  const float *gamma, const float *invstd, const float *mean_dy,
                                  const float *mean_dy_xhat)
{
    dp_loop_args a = {.x = dy, .other = xhat, .y = dx, .cols = (size_t)cols, .gamma = gamma, .invstd = invstd,
                      .mean_dy = mean_dy, .mean_dy_xhat = mean_dy_xhat};
    over_rows(loops(be)->bn_backward_input, &a, rows);
}

/* The per-feature passes are a few thousand values: one thread. */
static void cpu_bn_param_grads(const dp_backend *be, const double *sums, int cols, float *dgamma, float *dbeta,
                               int accumulate)
{
    dp_loop_args a = {.sums = (double *)sums, .cols = (size_t)cols, .dgamma = dgamma, .dbeta = dbeta,
                      .accumulate = accumulate};
    loops(be)->bn_param_grads(&a, 0, (size_t)cols);
}

static void cpu_bn_update_running(const dp_backend *be, float *running_mean, float *running_var, const float *mean,
                                  const float *var_unbiased, int cols, float momentum)
{
    dp_loop_args a = {.running_mean = running_mean, .running_var = running_var, .mean = mean,
                      .var = var_unbiased, .momentum = momentum};
    loops(be)->bn_update_running(&a, 0, (size_t)cols);
}

static void cpu_inverse_std(const dp_backend *be, const float *var, float *invstd, int n, float eps)
{
    loops(be)->inverse_std(&(dp_loop_args){.var = var, .y = invstd, .eps = eps}, 0, (size_t)n);
}

static void cpu_bn_channel_sums(const dp_backend *be, const double *column_sums, double *channel_sums, int channels,
                                int pixels)
{
    dp_loop_args a = {.in_sums = column_sums, .sums = channel_sums, .pixels = (size_t)pixels};
    loops(be)->bn_channel_sums(&a, 0, 2 * (size_t)channels);
}

static void cpu_bn_batch_stats(const dp_backend *be, const double *channel_sums, int channels, double n, float eps,
                               float *mean, float *invstd, float *var_unbiased)
{
    dp_loop_args a = {.in_sums = channel_sums, .cols = (size_t)channels, .values = n, .eps = eps, .batch_mean = mean,
                      .batch_invstd = invstd, .batch_var = var_unbiased};
    loops(be)->bn_batch_stats(&a, 0, (size_t)channels);
}

static void cpu_bn_means(const dp_backend *be, const double *sums, int count, double n, float *means)
{
    loops(be)->bn_means(&(dp_loop_args){.in_sums = sums, .values = n, .y = means}, 0, (size_t)count);
}

static void cpu_bn_spread(const dp_backend *be, const float *per_channel, float *columns, int channels, int pixels,
                          int count)
{
    dp_loop_args a = {.x = per_channel, .y = columns, .pixels = (size_t)pixels};
    loops(be)->bn_spread(&a, 0, (size_t)count * channels * pixels);
}

/* The losses add their totals in element order: one thread. */
static void cpu_softmax_xent(const dp_backend *be, const float *logits, const int32_t *labels, int rows, int cols,
                             float *dlogits, double *totals)
{
    dp_loop_args a = {.x = logits, .labels = labels, .cols = (size_t)cols, .y = dlogits, .sums = totals};
    loops(be)->softmax_xent(&a, 0, (size_t)rows);
}

static void cpu_mse(const dp_backend *be, const float *pred, const float *targets, int rows, int cols,
                    float *dpred, double *totals)
{
    dp_loop_args a = {.x = pred, .other = targets, .cols = (size_t)cols, .y = dpred, .sums = totals};
    loops(be)->mse(&a, 0, (size_t)rows);
}

/* The lanes of sum_squares: 64 doubles, one vector register's worth per AVX-512 lane group. */
#define SQUARE_LANES 64

static void cpu_sum_squares(const dp_backend *be, const float *x, size_t n, float scale, double *total)
{
    double lanes[SQUARE_LANES];
    dp_loop_args a = {.x = x, .rows = n, .cols = SQUARE_LANES, .sums = lanes, .scale = scale};
    dp_cpu_parallel(loops(be)->sum_squares, &a, SQUARE_LANES, grain_of(n / SQUARE_LANES));
    double sum = 0.0;
    for (int c = 0; c < SQUARE_LANES; c++)
        sum += lanes[c];
    *total += sum;
}

static size_t cpu_count_nonfinite(const dp_backend *be, const float *x, size_t n)
{
    return over_elements(loops(be)->count_nonfinite, &(dp_loop_args){.x = x}, n);
}

static void cpu_sgd_step(const dp_backend *be, float *params, float *grads, float *velocity, size_t n,
                         const dp_sgd_coefs *k, double *nonfinite)
{
    dp_loop_args a = {.params = params, .grads = grads, .state1 = velocity, .sgd = k};
    *nonfinite += (double)over_elements(loops(be)->sgd_step, &a, n);
}

static void cpu_adamw_step(const dp_backend *be, float *params, float *grads, float *exp_avg, float *exp_avg_sq,
                           size_t n, const dp_adamw_coefs *k, double *nonfinite)
{
    dp_loop_args a = {.params = params, .grads = grads, .state1 = exp_avg, .state2 = exp_avg_sq, .adamw = k};
    *nonfinite += (double)over_elements(loops(be)->adamw_step, &a, n);
}

/* The sliding-window operations split by samples, each a few thousand values or more. */
static void over_samples(dp_loop_fn fn, const dp_loop_args *a, int rows, size_t per_sample)
{
    dp_cpu_parallel(fn, a, (size_t)rows, grain_of(per_sample));
}

static size_t window_outputs(const dp_window *w)
{
    return (size_t)w->channels * w->out_h * w->out_w;
}

static void cpu_im2col(const dp_backend *be, const float *x, float *col, int rows, const dp_window *w)
{
    size_t per_sample = (size_t)w->out_h * w->out_w * w->channels * w->kernel_h * w->kernel_w;
    dp_loop_args a = {.x = x, .y = col, .rows = (size_t)rows, .window = w};
    over_samples(loops(be)->im2col, &a, rows, per_sample);
}

static void cpu_col2im(const dp_backend *be, const float *col, float *dx, int rows, const dp_window *w)
{
    size_t per_sample = (size_t)w->out_h * w->out_w * w->channels * w->kernel_h * w->kernel_w;
    dp_loop_args a = {.x = col, .y = dx, .rows = (size_t)rows, .window = w};
    over_samples(loops(be)->col2im, &a, rows, per_sample);
}

static void cpu_swap_axes(const dp_backend *be, const float *x, float *y, size_t outer, size_t middle, size_t inner)
{
    dp_loop_args a = {.x = x, .y = y, .rows = outer, .cols = middle, .inner = inner};
    dp_cpu_parallel(loops(be)->swap_axes, &a, middle, grain_of(outer * inner));
}

static void cpu_pool_forward(const dp_backend *be, const float *x, float *y, int rows, const dp_window *w, dp_pool pool)
{
    dp_loop_args a = {.x = x, .y = y, .window = w, .pool = pool};
    over_samples(loops(be)->pool_forward, &a, rows, window_outputs(w) * w->kernel_h * w->kernel_w);
}

static void cpu_pool_backward(const dp_backend *be, const float *x, const float *dy, float *dx, int rows, const dp_window *w,
                              dp_pool pool)
{
    dp_loop_args a = {.x = x, .other = dy, .y = dx, .window = w, .pool = pool};
    over_samples(loops(be)->pool_backward, &a, rows, window_outputs(w) * w->kernel_h * w->kernel_w);
}

/* 4-byte words copied whole: floats and int32 labels alike. */
static void cpu_gather_rows(const dp_backend *be, void *dst, const void *src, const int32_t *index, int rows, int words)
{
    dp_loop_args a = {.y = dst, .x = src, .index = index, .cols = (size_t)words};
    over_rows(loops(be)->gather_rows, &a, rows);
}

/* Every operation has finished when it returns. */
static void cpu_synchronize(const dp_backend *be)
{
    (void)be; /* host memory and BLAS need no state */
}

static const char *cpu_describe(const dp_backend *be)
{
    cpu_state *c = state_of(be);
    char blas[384];
    dp_blas_describe(blas, sizeof blas);
    const char *asked = getenv(DP_CPU_LOOPS_VARIABLE);
    char loops[96] = "";
    if (asked)
        snprintf(loops, sizeof loops, " (%s=%.16s%s)", DP_CPU_LOOPS_VARIABLE, asked,
                 strcmp(asked, c->loops->isa) == 0 ? "" : ": not a build this CPU runs");
    snprintf(c->description, sizeof c->description, "cpu (%d BLAS thread%s per rank, shared by the %s loops%s: %s; %s)",
             c->blas_threads, c->blas_threads == 1 ? "" : "s", c->loops->isa, loops, c->threads_why, blas);
    return c->description;
}

/* Every operation computes in float32 (GEMMs through CBLAS's sgemm). No gemm_fused: sgemm has
 * no epilogue, and a bias or ReLU pass after it is what the unfused model runs already. */
static int cpu_supports(const dp_backend *be, const char *op, dp_dtype dtype, char *why, size_t size)
{
    (void)be;
    if (strncmp(op, "gemm_fused", 10) == 0) {
        snprintf(why, size, "the CPU backend runs a GEMM's bias and ReLU as passes of their own");
        return 0;
    }
    if (dtype == DP_DTYPE_F32)
        return 1;
    snprintf(why, size, "the CPU backend computes %s in float32 only (use --device cuda for %s)", op,
             dp_dtype_name(dtype));
    return 0;
}

static const dp_backend cpu_backend = {
    .name = "cpu",
    .host_memory = 1,
    .state = &cpu,
    .supports = cpu_supports,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .alloc_host = cpu_alloc_host,
    .free_host = cpu_free_host,
    .upload = cpu_copy,
    .upload_queued = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .gemm = cpu_gemm,
    .bias_act_forward = cpu_bias_act_forward,
    .relu_forward = cpu_relu_forward,
    .relu_backward = cpu_relu_backward,
    .bias_grad = cpu_bias_grad,
    .dropout_forward = cpu_dropout_forward,
    .multiply = cpu_multiply,
    .accumulate = cpu_accumulate,
    .im2col = cpu_im2col,
    .col2im = cpu_col2im,
    .swap_axes = cpu_swap_axes,
    .pool_forward = cpu_pool_forward,
    .pool_backward = cpu_pool_backward,
    .column_sums = cpu_column_sums,
    .bn_normalize = cpu_bn_normalize,
    .bn_backward_input = cpu_bn_backward_input,
    .bn_param_grads = cpu_bn_param_grads,
    .bn_update_running = cpu_bn_update_running,
    .inverse_std = cpu_inverse_std,
    .bn_channel_sums = cpu_bn_channel_sums,
    .bn_batch_stats = cpu_bn_batch_stats,
    .bn_means = cpu_bn_means,
    .bn_spread = cpu_bn_spread,
    .softmax_xent = cpu_softmax_xent,
    .mse = cpu_mse,
    .count_nonfinite = cpu_count_nonfinite,
    .sum_squares = cpu_sum_squares,
    .sgd_step = cpu_sgd_step,
    .adamw_step = cpu_adamw_step,
    .synchronize = cpu_synchronize,
    .describe = cpu_describe,
    .gather_rows = cpu_gather_rows,
};

const dp_backend *dp_backend_cpu(void)
{
    if (!cpu.loops)
        cpu.loops = dp_cpu_loops_best();
    return &cpu_backend;
}

void dp_backend_arithmetic(const dp_backend *be, char *text, size_t size)
{
    if (be == &cpu_backend)
        snprintf(text, size, "cpu with %d BLAS thread%s", cpu.blas_threads, cpu.blas_threads == 1 ? "" : "s");
    else
        snprintf(text, size, "%s", be->name);
}

void dp_backend_cpu_use_loops(const dp_cpu_loops *chosen)
{
    cpu.loops = chosen ? chosen : dp_cpu_loops_best();
}

void dp_backend_cpu_set_threads(int threads, const char *why)
{
    cpu.blas_threads = threads;
    snprintf(cpu.threads_why, sizeof cpu.threads_why, "%s", why ? why : "--threads");
    dp_cpu_parallel_set_threads(threads);
    dp_blas_set_threads(threads);
}
