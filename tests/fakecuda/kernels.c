/* The launchers of src/backend/cuda_kernels.h on the host, for the fake-CUDA test build: each
 * queues a task that, at the next synchronisation point, checks that its pointers are device
 * memory (a kernel handed anything else faults, stickily, as on a GPU) and then runs every
 * block and thread of the kernel's launch shape through the per-thread functions the kernel
 * itself calls (kernel_grid.h), merging lanes as the GPU's shuffles and trees do (emulate.h). */
#include "tests/fakecuda/fakecuda.h"

#include "src/backend/cuda_kernels.h"
#include "tests/fakecuda/emulate.h"
#include "tests/fakecuda/gemm.h"

#include <stdlib.h>

#define QUEUE(run, args, name) fakecuda_enqueue_on(stream, run, &(args), sizeof(args), name, NULL)

typedef struct bias_act_args {
    dp_shape s;
    float *y;
    const float *bias;
    int rows, cols, relu;
} bias_act_args;

static void run_bias_act(void *raw)
{
    bias_act_args *a = raw;
    if (!fakecuda_need(a->y, (size_t)a->rows * a->cols * sizeof(float), "y") ||
        (a->bias && !fakecuda_need(a->bias, (size_t)a->cols * sizeof(float), "bias")))
        return;
    for (unsigned by = 0; by < a->s.grid_y; by++)
        for (unsigned bx = 0; bx < a->s.grid_x; bx++)
            for (unsigned ty = 0; ty < a->s.block_y; ty++)
                for (unsigned tx = 0; tx < a->s.block_x; tx++)
                    dp_bias_act_thread(a->y, a->bias, a->rows, a->cols, a->relu, dp_span_y(a->s, by, ty),
                                       dp_span_x(a->s, bx, tx));
}

cudaError_t dp_cuda_bias_act(cudaStream_t stream, float *y, const float *bias, int rows, int cols, int relu)
{
    if (rows == 0 || cols == 0)
        return cudaSuccess;
    bias_act_args a = {dp_shape_rows(rows, cols), y, bias, rows, cols, relu};
    return QUEUE(run_bias_act, a, "bias_act_kernel");
}

/* The 1-D elementwise kernels share one argument block: x (written) from y and mask. */
typedef struct flat_args {
    dp_shape s;
    float *x;
    const float *y, *mask;
    size_t n;
} flat_args;

static void run_relu_backward(void *raw)
{
    flat_args *a = raw;
    if (!fakecuda_need(a->x, a->n * sizeof(float), "dy") || !fakecuda_need(a->y, a->n * sizeof(float), "y"))
        return;
    for (unsigned b = 0; b < a->s.grid_x; b++)
        for (unsigned t = 0; t < a->s.block_x; t++)
            dp_relu_backward_thread(a->x, a->y, a->n, dp_span_x(a->s, b, t));
}

cudaError_t dp_cuda_relu_backward(cudaStream_t stream, float *dy, const float *y, size_t n)
{
    if (n == 0)
        return cudaSuccess;
    flat_args a = {.s = dp_shape_flat(n), .x = dy, .y = y, .n = n};
    return QUEUE(run_relu_backward, a, "relu_backward_kernel");
}

static void run_relu_forward(void *raw)
{
    flat_args *a = raw;
    if (!fakecuda_need(a->x, a->n * sizeof(float), "y") || !fakecuda_need(a->y, a->n * sizeof(float), "x"))
        return;
    for (unsigned b = 0; b < a->s.grid_x; b++)
        for (unsigned t = 0; t < a->s.block_x; t++)
            dp_relu_forward_thread(a->x, a->y, a->n, dp_span_x(a->s, b, t));
}

cudaError_t dp_cuda_relu_forward(cudaStream_t stream, float *y, const float *x, size_t n)
{
    if (n == 0)
        return cudaSuccess;
    flat_args a = {.s = dp_shape_flat(n), .x = y, .y = x, .n = n};
    return QUEUE(run_relu_forward, a, "relu_forward_kernel");
}

static void run_multiply(void *raw)
{
    flat_args *a = raw;
    size_t bytes = a->n * sizeof(float);
    if (!fakecuda_need(a->x, bytes, "y") || !fakecuda_need(a->y, bytes, "x") || !fakecuda_need(a->mask, bytes, "mask"))
        return;
    for (unsigned b = 0; b < a->s.grid_x; b++)
        for (unsigned t = 0; t < a->s.block_x; t++)
            dp_multiply_thread(a->x, a->y, a->mask, a->n, dp_span_x(a->s, b, t));
}

cudaError_t dp_cuda_multiply(cudaStream_t stream, float *y, const float *x, const float *mask, size_t n)
{
    if (n == 0)
        return cudaSuccess;
    flat_args a = {.s = dp_shape_flat(n), .x = y, .y = x, .mask = mask, .n = n};
    return QUEUE(run_multiply, a, "multiply_kernel");
}

typedef struct accumulate_args {
    flat_args flat;
    int add;
} accumulate_args;

static void run_accumulate(void *raw)
{
    accumulate_args *a = raw;
    size_t bytes = a->flat.n * sizeof(float);
    if (!fakecuda_need(a->flat.x, bytes, "y") || !fakecuda_need(a->flat.y, bytes, "x"))
        return;
    for (unsigned b = 0; b < a->flat.s.grid_x; b++)
        for (unsigned t = 0; t < a->flat.s.block_x; t++)
            dp_accumulate_thread(a->flat.x, a->flat.y, a->flat.n, a->add, dp_span_x(a->flat.s, b, t));
}

cudaError_t dp_cuda_accumulate(cudaStream_t stream, float *y, const float *x, size_t n, int add)
{
    if (n == 0)
        return cudaSuccess;
    accumulate_args a = {.flat = {.s = dp_shape_flat(n), .x = y, .y = x, .n = n}, .add = add};
    return QUEUE(run_accumulate, a, "accumulate_kernel");
}

typedef struct bf16_args {
    dp_shape s;
    float *x;
    uint16_t *h;
    size_t n;
    int to_bf16;
} bf16_args;

static void run_bf16(void *raw)
{
    bf16_args *a = raw;
    if (!fakecuda_need(a->x, a->n * sizeof(float), "x") || !fakecuda_need(a->h, a->n * sizeof(uint16_t), "h"))
        return;
    for (unsigned b = 0; b < a->s.grid_x; b++)
        for (unsigned t = 0; t < a->s.block_x; t++) {
            if (a->to_bf16)
                dp_to_bf16_thread(a->h, a->x, a->n, dp_span_x(a->s, b, t));
            else
                dp_from_bf16_thread(a->x, a->h, a->n, dp_span_x(a->s, b, t));
        }
}

cudaError_t dp_cuda_to_bf16(cudaStream_t stream, uint16_t *h, const float *x, size_t n)
{
    if (n == 0)
        return cudaSuccess;
    fakecuda_count_rounding(n);
    bf16_args a = {.s = dp_shape_flat(n), .x = (float *)x, .h = h, .n = n, .to_bf16 = 1};
    return QUEUE(run_bf16, a, "to_bf16_kernel");
}

cudaError_t dp_cuda_from_bf16(cudaStream_t stream, float *x, const uint16_t *h, size_t n)
{
    if (n == 0)
        return cudaSuccess;
    bf16_args a = {.s = dp_shape_flat(n), .x = x, .h = (uint16_t *)h, .n = n, .to_bf16 = 0};
    return QUEUE(run_bf16, a, "from_bf16_kernel");
}

typedef struct bias_grad_args {
    dp_shape s;
    const float *dy;
    int rows, cols, accumulate;
    float *db;
} bias_grad_args;

static void run_bias_grad(void *raw)
{
    bias_grad_args *a = raw;
    if (!fakecuda_need(a->dy, (size_t)a->rows * a->cols * sizeof(float), "dy") ||
        !fakecuda_need(a->db, (size_t)a->cols * sizeof(float), "db"))
        return;
    float lanes[DP_ROW_TILE];
    for (unsigned bx = 0; bx < a->s.grid_x; bx++)
        for (size_t first = (size_t)bx * DP_WARP; first < (size_t)a->cols; first += (size_t)a->s.grid_x * DP_WARP)
            for (int tx = 0; tx < DP_WARP && first + tx < (size_t)a->cols; tx++) {
                int c = (int)first + tx;
                for (int lane = 0; lane < DP_ROW_TILE; lane++)
                    lanes[lane] = dp_bias_grad_lane(a->dy, a->rows, a->cols, c, lane);
                a->db[c] = dp_accumulate(a->db[c], dp_bias_grad_merge(lanes, 1), a->accumulate);
            }
}

cudaError_t dp_cuda_bias_grad(cudaStream_t stream, const float *dy, int rows, int cols, float *db, int accumulate)
{
    /* No rows still overwrites: a rank without samples contributes zeros. */
    if (cols == 0 || (rows == 0 && accumulate))
        return cudaSuccess;
    bias_grad_args a = {dp_shape_bias_grad(cols), dy, rows, cols, accumulate, db};
    return QUEUE(run_bias_grad, a, "bias_grad_kernel");
}

typedef struct column_sums_args {
    dp_shape s;
    const float *a, *b;
    int rows, cols;
    double *out;
} column_sums_args;

static void run_column_sums(void *raw)
{
    column_sums_args *a = raw;
    size_t values = (size_t)a->rows * a->cols * sizeof(float);
    if (!fakecuda_need(a->a, values, "a") || !fakecuda_need(a->b, values, "b") ||
        !fakecuda_need(a->out, 2 * (size_t)a->cols * sizeof(double), "out"))
        return;
    double sums[DP_ROW_TILE], products[DP_ROW_TILE];
    for (unsigned bx = 0; bx < a->s.grid_x; bx++)
        for (size_t first = (size_t)bx * DP_WARP; first < (size_t)a->cols; first += (size_t)a->s.grid_x * DP_WARP)
            for (int tx = 0; tx < DP_WARP && first + tx < (size_t)a->cols; tx++) {
                int c = (int)first + tx;
                for (int lane = 0; lane < DP_ROW_TILE; lane++)
                    dp_column_sums_lane(a->a, a->b, a->rows, a->cols, c, lane, &sums[lane], &products[lane]);
                a->out[c] = dp_column_sums_merge(sums, 1);
                a->out[a->cols + c] = dp_column_sums_merge(products, 1);
            }
}

cudaError_t dp_cuda_column_sums(cudaStream_t stream, const float *a, const float *b, int rows, int cols, double *out)
{
    if (cols == 0)
        return cudaSuccess;
    column_sums_args args = {dp_shape_bias_grad(cols), a, b, rows, cols, out};
    return QUEUE(run_column_sums, args, "column_sums_kernel");
}

/* The row-shaped BatchNorm and dropout kernels share one argument block. */
typedef struct rows_args {
    dp_shape s;
    const float *x, *xhat_in;
    float *xhat, *y, *mask;
    int rows, cols;
    const float *c0, *c1, *c2, *c3; /* per-column vectors, in the launcher's order */
    dp_dropout_key key;
} rows_args;

/* Every thread of the row shape, calling thread(a, row span, column span). */
static void each_row_thread(rows_args *a, void (*thread)(rows_args *, dp_span, dp_span))
{
    for (unsigned by = 0; by < a->s.grid_y; by++)
        for (unsigned bx = 0; bx < a->s.grid_x; bx++)
            for (unsigned ty = 0; ty < a->s.block_y; ty++)
                for (unsigned tx = 0; tx < a->s.block_x; tx++)
                    thread(a, dp_span_y(a->s, by, ty), dp_span_x(a->s, bx, tx));
}

/* The per-column vectors a kernel reads, count of them, are device memory. */
static int need_columns(const rows_args *a, int count)
{
    const float *columns[4] = {a->c0, a->c1, a->c2, a->c3};
    for (int i = 0; i < count; i++)
        if (!fakecuda_need(columns[i], (size_t)a->cols * sizeof(float), "a per-column vector"))
            return 0;
    return 1;
}

static void dropout_thread(rows_args *a, dp_span row, dp_span col)
{
    dp_dropout_thread(a->y, a->x, a->mask, a->rows, a->cols, &a->key, row, col);
}

static void run_dropout(void *raw)
{
    rows_args *a = raw;
    size_t values = (size_t)a->rows * a->cols * sizeof(float);
    if (fakecuda_need(a->x, values, "x") && fakecuda_need(a->y, values, "y") && fakecuda_need(a->mask, values, "mask") &&
        fakecuda_need(a->key.step, sizeof *a->key.step, "the step number"))
        each_row_thread(a, dropout_thread);
}

cudaError_t dp_cuda_dropout_forward(cudaStream_t stream, float *y, const float *x, float *mask, int rows, int cols,
                                    const dp_dropout_key *key)
{
    if (rows == 0 || cols == 0)
        return cudaSuccess;
    rows_args a = {.s = dp_shape_rows(rows, cols), .x = x, .y = y, .mask = mask, .rows = rows, .cols = cols,
                   .key = *key};
    return QUEUE(run_dropout, a, "dropout_kernel");
}

static void bn_normalize_thread(rows_args *a, dp_span row, dp_span col)
{
    dp_bn_normalize_thread(a->x, a->xhat, a->y, a->rows, a->cols, a->c0, a->c1, a->c2, a->c3, row, col);
}

static void run_bn_normalize(void *raw)
{
    rows_args *a = raw;
    size_t values = (size_t)a->rows * a->cols * sizeof(float);
    if (fakecuda_need(a->x, values, "x") && (!a->xhat || fakecuda_need(a->xhat, values, "xhat")) &&
        fakecuda_need(a->y, values, "y") && need_columns(a, 4))
        each_row_thread(a, bn_normalize_thread);
}

cudaError_t dp_cuda_bn_normalize(cudaStream_t stream, const float *x, float *xhat, float *y, int rows, int cols, const float *mean,
                                 const float *invstd, const float *gamma, const float *beta)
{
    if (rows == 0 || cols == 0)
        return cudaSuccess;
    rows_args a = {.s = dp_shape_rows(rows, cols), .x = x, .xhat = xhat, .y = y, .rows = rows, .cols = cols,
                   .c0 = mean, .c1 = invstd, .c2 = gamma, .c3 = beta};
    return QUEUE(run_bn_normalize, a, "bn_normalize_kernel");
}

static void bn_backward_input_thread(rows_args *a, dp_span row, dp_span col)
{
    dp_bn_backward_input_thread(a->x, a->xhat_in, a->y, a->rows, a->cols, a->c0, a->c1, a->c2, a->c3, row, col);
}

static void run_bn_backward_input(void *raw)
{
    rows_args *a = raw;
    size_t values = (size_t)a->rows * a->cols * sizeof(float);
    if (fakecuda_need(a->x, values, "dy") && fakecuda_need(a->xhat_in, values, "xhat") &&
        fakecuda_need(a->y, values, "dx") && need_columns(a, 4))
        each_row_thread(a, bn_backward_input_thread);
}

cudaError_t dp_cuda_bn_backward_input(cudaStream_t stream, const float *dy, const float *xhat, float *dx, int rows, int cols,
                                      const float *gamma, const float *invstd, const float *mean_dy,
                                      const float *mean_dy_xhat)
{
    if (rows == 0 || cols == 0)
        return cudaSuccess;
    rows_args a = {.s = dp_shape_rows(rows, cols), .x = dy, .xhat_in = xhat, .y = dx, .rows = rows, .cols = cols,
                   .c0 = gamma, .c1 = invstd, .c2 = mean_dy, .c3 = mean_dy_xhat};
    return QUEUE(run_bn_backward_input, a, "bn_backward_input_kernel");
}

/* The per-feature kernels (one thread per column) share one argument block. */
typedef struct columns_args {
    dp_shape s;
    const double *sums;
    const float *mean, *var;
    float *first, *second;
    int cols, accumulate;
    float momentum, eps;
} columns_args;

static void run_bn_param_grads(void *raw)
{
    columns_args *a = raw;
    size_t bytes = (size_t)a->cols * sizeof(float);
    if (!fakecuda_need(a->sums, 2 * (size_t)a->cols * sizeof(double), "sums") ||
        !fakecuda_need(a->first, bytes, "dgamma") || !fakecuda_need(a->second, bytes, "dbeta"))
        return;
    for (unsigned b = 0; b < a->s.grid_x; b++)
        for (unsigned t = 0; t < a->s.block_x; t++)
            dp_bn_param_grads_thread(a->sums, a->cols, a->first, a->second, a->accumulate, dp_span_x(a->s, b, t));
}

cudaError_t dp_cuda_bn_param_grads(cudaStream_t stream, const double *sums, int cols, float *dgamma, float *dbeta, int accumulate)
{
    if (cols == 0)
        return cudaSuccess;
    columns_args a = {.s = dp_shape_flat((size_t)cols), .sums = sums, .first = dgamma, .second = dbeta,
                      .cols = cols, .accumulate = accumulate};
    return QUEUE(run_bn_param_grads, a, "bn_param_grads_kernel");
}

static void run_bn_update_running(void *raw)
{
    columns_args *a = raw;
    size_t bytes = (size_t)a->cols * sizeof(float);
    if (!fakecuda_need(a->first, bytes, "running_mean") || !fakecuda_need(a->second, bytes, "running_var") ||
        !fakecuda_need(a->mean, bytes, "mean") || !fakecuda_need(a->var, bytes, "var_unbiased"))
        return;
    for (unsigned b = 0; b < a->s.grid_x; b++)
        for (unsigned t = 0; t < a->s.block_x; t++)
            dp_bn_update_running_thread(a->first, a->second, a->mean, a->var, a->cols, a->momentum,
                                        dp_span_x(a->s, b, t));
}

cudaError_t dp_cuda_bn_update_running(cudaStream_t stream, float *running_mean, float *running_var, const float *mean,
                                      const float *var_unbiased, int cols, float momentum)
{
    if (cols == 0)
        return cudaSuccess;
    columns_args a = {.s = dp_shape_flat((size_t)cols), .mean = mean, .var = var_unbiased, .first = running_mean,
                      .second = running_var, .cols = cols, .momentum = momentum};
    return QUEUE(run_bn_update_running, a, "bn_update_running_kernel");
}

static void run_inverse_std(void *raw)
{
    columns_args *a = raw;
    size_t bytes = (size_t)a->cols * sizeof(float);
    if (!fakecuda_need(a->var, bytes, "var") || !fakecuda_need(a->first, bytes, "invstd"))
        return;
    for (unsigned b = 0; b < a->s.grid_x; b++)
        for (unsigned t = 0; t < a->s.block_x; t++)
            dp_inverse_std_thread(a->var, a->first, a->cols, a->eps, dp_span_x(a->s, b, t));
}

cudaError_t dp_cuda_inverse_std(cudaStream_t stream, const float *var, float *invstd, int n, float eps)
{
    if (n == 0)
        return cudaSuccess;
    columns_args a = {.s = dp_shape_flat((size_t)n), .var = var, .first = invstd, .cols = n, .eps = eps};
    return QUEUE(run_inverse_std, a, "inverse_std_kernel");
}

/* BatchNorm's statistics kernels: flat launches over one argument block. */
typedef struct bn_stats_args {
    dp_shape s;
    const double *sums;
    double *channel_sums;
    const float *per_channel;
    float *first, *second, *third;
    int channels, pixels, count;
    size_t n;
    double values;
    float eps;
} bn_stats_args;

/* Every thread of the flat shape, calling thread(a, span). */
static void each_flat_thread(bn_stats_args *a, void (*thread)(bn_stats_args *, dp_span))
{
    for (unsigned b = 0; b < a->s.grid_x; b++)
        for (unsigned t = 0; t < a->s.block_x; t++)
            thread(a, dp_span_x(a->s, b, t));
}

static void bn_channel_sums_thread(bn_stats_args *a, dp_span i)
{
    dp_bn_channel_sums_thread(a->sums, a->channel_sums, a->channels, a->pixels, i);
}

static void run_bn_channel_sums(void *raw)
{
    bn_stats_args *a = raw;
    size_t channel_bytes = 2 * (size_t)a->channels * sizeof(double);
    if (fakecuda_need(a->sums, channel_bytes * (size_t)a->pixels, "column sums") &&
        fakecuda_need(a->channel_sums, channel_bytes, "channel sums"))
        each_flat_thread(a, bn_channel_sums_thread);
}

cudaError_t dp_cuda_bn_channel_sums(cudaStream_t stream, const double *column_sums, double *channel_sums, int channels,
                                    int pixels)
{
    if (channels == 0)
        return cudaSuccess;
    bn_stats_args a = {.s = dp_shape_flat(2 * (size_t)channels), .sums = column_sums, .channel_sums = channel_sums,
                       .channels = channels, .pixels = pixels};
    return QUEUE(run_bn_channel_sums, a, "bn_channel_sums_kernel");
}

static void bn_batch_stats_thread(bn_stats_args *a, dp_span i)
{
    dp_bn_batch_stats_thread(a->sums, a->channels, a->values, a->eps, a->first, a->second, a->third, i);
}

static void run_bn_batch_stats(void *raw)
{
    bn_stats_args *a = raw;
    size_t bytes = (size_t)a->channels * sizeof(float);
    if (fakecuda_need(a->sums, 2 * (size_t)a->channels * sizeof(double), "channel sums") &&
        fakecuda_need(a->first, bytes, "mean") && fakecuda_need(a->second, bytes, "invstd") &&
        fakecuda_need(a->third, bytes, "var_unbiased"))
        each_flat_thread(a, bn_batch_stats_thread);
}

cudaError_t dp_cuda_bn_batch_stats(cudaStream_t stream, const double *channel_sums, int channels, double n, float eps,
                                   float *mean, float *invstd, float *var_unbiased)
{
    if (channels == 0)
        return cudaSuccess;
    bn_stats_args a = {.s = dp_shape_flat((size_t)channels), .sums = channel_sums, .channels = channels, .values = n,
                       .eps = eps, .first = mean, .second = invstd, .third = var_unbiased};
    return QUEUE(run_bn_batch_stats, a, "bn_batch_stats_kernel");
}

static void bn_means_thread(bn_stats_args *a, dp_span i)
{
    dp_bn_means_thread(a->sums, a->count, a->values, a->first, i);
}

static void run_bn_means(void *raw)
{
    bn_stats_args *a = raw;
    if (fakecuda_need(a->sums, (size_t)a->count * sizeof(double), "sums") &&
        fakecuda_need(a->first, (size_t)a->count * sizeof(float), "means"))
        each_flat_thread(a, bn_means_thread);
}

cudaError_t dp_cuda_bn_means(cudaStream_t stream, const double *sums, int count, double n, float *means)
{
    if (count == 0)
        return cudaSuccess;
    bn_stats_args a = {.s = dp_shape_flat((size_t)count), .sums = sums, .count = count, .values = n, .first = means};
    return QUEUE(run_bn_means, a, "bn_means_kernel");
}

static void bn_spread_thread(bn_stats_args *a, dp_span i)
{
    dp_bn_spread_thread(a->per_channel, a->first, a->n, a->pixels, i);
}

static void run_bn_spread(void *raw)
{
    bn_stats_args *a = raw;
    if (fakecuda_need(a->per_channel, a->n / (size_t)a->pixels * sizeof(float), "per-channel values") &&
        fakecuda_need(a->first, a->n * sizeof(float), "columns"))
        each_flat_thread(a, bn_spread_thread);
}

cudaError_t dp_cuda_bn_spread(cudaStream_t stream, const float *per_channel, float *columns, int channels, int pixels,
                              int count)
{
    size_t n = (size_t)count * channels * pixels;
    if (n == 0)
        return cudaSuccess;
    bn_stats_args a = {.s = dp_shape_flat(n), .per_channel = per_channel, .first = columns, .n = n, .pixels = pixels};
    return QUEUE(run_bn_spread, a, "bn_spread_kernel");
}

/* The sliding-window kernels: one flat launch each, over one argument block. */
typedef struct window_args {
    dp_shape s;
    dp_window w;
    dp_pool pool;
    const float *x, *dy;
    float *y;
    int rows;
    size_t in_bytes, out_bytes;
} window_args;

/* Runs thread(args, span) for every block and thread, once the operands are device memory. */
static void run_window(window_args *a, void (*thread)(const window_args *a, dp_span i))
{
    if (!fakecuda_need(a->x, a->in_bytes, "x") || !fakecuda_need(a->y, a->out_bytes, "y") ||
        (a->dy && !fakecuda_need(a->dy, (size_t)a->rows * a->w.channels * a->w.out_h * a->w.out_w * sizeof(float),
                                 "dy")))
        return;
    for (unsigned b = 0; b < a->s.grid_x; b++)
        for (unsigned t = 0; t < a->s.block_x; t++)
            thread(a, dp_span_x(a->s, b, t));
}

static void im2col_thread(const window_args *a, dp_span i)
{
    dp_im2col_thread(a->x, a->y, a->rows, &a->w, i);
}

static void col2im_thread(const window_args *a, dp_span i)
{
    dp_col2im_thread(a->x, a->y, a->rows, &a->w, i);
}

static void pool_forward_thread(const window_args *a, dp_span i)
{
    dp_pool_forward_thread(a->x, a->y, a->rows, &a->w, a->pool, i);
}

static void pool_backward_thread(const window_args *a, dp_span i)
{
    dp_pool_backward_thread(a->x, a->dy, a->y, a->rows, &a->w, a->pool, i);
}

static void run_im2col(void *raw)
{
    run_window(raw, im2col_thread);
}

static void run_col2im(void *raw)
{
    run_window(raw, col2im_thread);
}

static void run_pool_forward(void *raw)
{
    run_window(raw, pool_forward_thread);
}

static void run_pool_backward(void *raw)
{
    run_window(raw, pool_backward_thread);
}

static size_t floats(size_t n)
{
    return n * sizeof(float);
}

cudaError_t dp_cuda_im2col(cudaStream_t stream, const float *x, float *col, int rows, const dp_window *w)
{
    size_t n = (size_t)rows * dp_window_col(w);
    if (n == 0)
        return cudaSuccess;
    window_args a = {.s = dp_shape_flat(n), .w = *w, .x = x, .y = col, .rows = rows,
                     .in_bytes = floats((size_t)rows * dp_window_image(w)), .out_bytes = floats(n)};
    return QUEUE(run_im2col, a, "im2col_kernel");
}

cudaError_t dp_cuda_col2im(cudaStream_t stream, const float *col, float *dx, int rows, const dp_window *w)
{
    size_t n = (size_t)rows * dp_window_image(w);
    if (n == 0)
        return cudaSuccess;
    window_args a = {.s = dp_shape_flat(n), .w = *w, .x = col, .y = dx, .rows = rows,
                     .in_bytes = floats((size_t)rows * dp_window_col(w)), .out_bytes = floats(n)};
    return QUEUE(run_col2im, a, "col2im_kernel");
}

/* swap_axes: x [outer, middle, inner] -> y [middle, outer, inner]. */
typedef struct swap_args {
    dp_shape s;
    const float *x;
    float *y;
    size_t outer, middle, inner;
} swap_args;

static void run_swap_axes(void *raw)
{
    swap_args *a = raw;
    size_t bytes = floats(a->outer * a->middle * a->inner);
    if (!fakecuda_need(a->x, bytes, "x") || !fakecuda_need(a->y, bytes, "y"))
        return;
    for (unsigned b = 0; b < a->s.grid_x; b++)
        for (unsigned t = 0; t < a->s.block_x; t++)
            dp_swap_axes_thread(a->x, a->y, a->outer, a->middle, a->inner, dp_span_x(a->s, b, t));
}

cudaError_t dp_cuda_swap_axes(cudaStream_t stream, const float *x, float *y, size_t outer, size_t middle, size_t inner)
{
    size_t n = outer * middle * inner;
    if (n == 0)
        return cudaSuccess;
    swap_args a = {.s = dp_shape_flat(n), .x = x, .y = y, .outer = outer, .middle = middle, .inner = inner};
    return QUEUE(run_swap_axes, a, "swap_axes_kernel");
}

cudaError_t dp_cuda_pool_forward(cudaStream_t stream, const float *x, float *y, int rows, const dp_window *w, dp_pool pool)
{
    size_t n = (size_t)rows * w->channels * w->out_h * w->out_w;
    if (n == 0)
        return cudaSuccess;
    window_args a = {.s = dp_shape_flat(n), .w = *w, .pool = pool, .x = x, .y = y, .rows = rows,
                     .in_bytes = floats((size_t)rows * dp_window_image(w)), .out_bytes = floats(n)};
    return QUEUE(run_pool_forward, a, "pool_forward_kernel");
}

cudaError_t dp_cuda_pool_backward(cudaStream_t stream, const float *x, const float *dy, float *dx, int rows, const dp_window *w,
                                  dp_pool pool)
{
    size_t n = (size_t)rows * dp_window_image(w);
    if (n == 0)
        return cudaSuccess;
    window_args a = {.s = dp_shape_flat(n), .w = *w, .pool = pool, .x = x, .dy = dy, .y = dx, .rows = rows,
                     .in_bytes = floats(n), .out_bytes = floats(n)};
    return QUEUE(run_pool_backward, a, "pool_backward_kernel");
}

typedef struct reduce_args {
    dp_shape s;
    const float *x, *targets;
    const int32_t *labels;
    size_t n;
    int rows, cols;
    float scale; /* sum_squares */
    float *grad;
    dp_cuda_partial *partials;
} reduce_args;

/* The one-block kernel that adds a reduction's partials into device totals: each thread's
 * share, then the block's tree, as cuda_reductions.cu. */
typedef struct partials_args {
    const dp_cuda_partial *partials;
    int blocks;
    double *sum_into, *count_into, sum_divisor;
} partials_args;

static void run_add_partials(void *raw)
{
    partials_args *a = raw;
    if (!fakecuda_need(a->partials, (size_t)a->blocks * sizeof(dp_cuda_partial), "partials") ||
        (a->sum_into && !fakecuda_need(a->sum_into, sizeof(double), "the sum's total")) ||
        (a->count_into && !fakecuda_need(a->count_into, sizeof(double), "the count's total")))
        return;
    double sums[DP_THREADS], counts[DP_THREADS];
    for (int t = 0; t < DP_THREADS; t++)
        dp_add_partials_thread(a->partials, a->blocks, t, &sums[t], &counts[t]);
    dp_add_partials_finish(dp_emulate_block_sum(sums), dp_emulate_block_sum(counts), a->sum_into, a->count_into,
                           a->sum_divisor);
}

/* Queues a reduction's kernel, then the add of its partials (as the CUDA launchers do). */
static cudaError_t queue_reduction(cudaStream_t stream, void (*run)(void *), reduce_args *a, const char *name, double *sum_into,
                                   double *count_into, double sum_divisor)
{
    cudaError_t e = fakecuda_enqueue_on(stream, run, a, sizeof *a, name, NULL);
    partials_args p = {a->partials, (int)a->s.grid_x, sum_into, count_into, sum_divisor};
    return e != cudaSuccess ? e : QUEUE(run_add_partials, p, "add_partials_kernel");
}

/* One warp's row: the kernel's steps, lane by lane; returns the row's loss (lane 0's). */
static double softmax_row(const float *z, int cols, int label, float *dz, unsigned long long *correct)
{
    float top;
    int best;
    if (!dp_emulate_warp_argmax(z, cols, &top, &best)) {
        fakecuda_complain("softmax_xent_kernel: the warp's lanes disagree on the argmax");
        abort();
    }
    double sums[DP_WARP];
    for (int lane = 0; lane < DP_WARP; lane++)
        sums[lane] = dp_xent_lane_exps(z, cols, lane, top);
    dp_emulate_warp_sum(sums);
    if (dz)
        for (int lane = 0; lane < DP_WARP; lane++)
            dp_xent_lane_grads(z, cols, lane, top, sums[lane], label, dz);
    *correct += best == label;
    return dp_xent_loss(sums[0], z[label], top);
}

static void run_softmax_xent(void *raw)
{
    reduce_args *a = raw;
    size_t values = (size_t)a->rows * a->cols * sizeof(float);
    if (!fakecuda_need(a->x, values, "logits") || !fakecuda_need(a->labels, (size_t)a->rows * 4, "labels") ||
        (a->grad && !fakecuda_need(a->grad, values, "dlogits")) ||
        !fakecuda_need(a->partials, a->s.grid_x * sizeof(dp_cuda_partial), "partials"))
        return;
    for (unsigned b = 0; b < a->s.grid_x; b++) {
        dp_cuda_partial p = {0.0, 0};
        for (int warp = 0; warp < DP_WARPS; warp++) {
            double loss = 0.0;
            unsigned long long correct = 0;
            for (size_t r = (size_t)b * DP_WARPS + warp; r < (size_t)a->rows; r += (size_t)a->s.grid_x * DP_WARPS)
                loss = dp_dadd(loss, softmax_row(a->x + r * a->cols, a->cols, a->labels[r],
                                                 a->grad ? a->grad + r * a->cols : NULL, &correct));
            p.sum = dp_dadd(p.sum, loss);
            p.count += correct;
        }
        a->partials[b] = p;
    }
}

cudaError_t dp_cuda_softmax_xent(cudaStream_t stream, const float *logits, const int32_t *labels, int rows, int cols, float *dlogits,
                                 dp_cuda_partial *partials, double *totals)
{
    reduce_args a = {.s = dp_shape_softmax(rows), .x = logits, .labels = labels, .rows = rows, .cols = cols,
                     .grad = dlogits, .partials = partials};
    return rows == 0 ? cudaSuccess
                     : queue_reduction(stream, run_softmax_xent, &a, "softmax_xent_kernel", &totals[0], &totals[1], 1.0);
}

static void run_mse(void *raw)
{
    reduce_args *a = raw;
    size_t bytes = a->n * sizeof(float);
    if (!fakecuda_need(a->x, bytes, "pred") || !fakecuda_need(a->targets, bytes, "targets") ||
        (a->grad && !fakecuda_need(a->grad, bytes, "dpred")) ||
        !fakecuda_need(a->partials, a->s.grid_x * sizeof(dp_cuda_partial), "partials"))
        return;
    double lanes[DP_THREADS];
    for (unsigned b = 0; b < a->s.grid_x; b++) {
        for (unsigned t = 0; t < DP_THREADS; t++)
            lanes[t] = dp_mse_thread(a->x, a->targets, a->n, a->cols, a->grad, dp_span_x(a->s, b, t));
        a->partials[b] = (dp_cuda_partial){dp_emulate_block_sum(lanes), 0};
    }
}

cudaError_t dp_cuda_mse(cudaStream_t stream, const float *pred, const float *targets, size_t n, int cols, float *dpred,
                        dp_cuda_partial *partials, double *totals)
{
    reduce_args a = {.s = dp_shape_reduce(n), .x = pred, .targets = targets, .n = n, .cols = cols, .grad = dpred,
                     .partials = partials};
    return n == 0 ? cudaSuccess : queue_reduction(stream, run_mse, &a, "mse_kernel", &totals[0], NULL, (double)cols);
}

static void run_sum_squares(void *raw)
{
    reduce_args *a = raw;
    if (!fakecuda_need(a->x, a->n * sizeof(float), "x") ||
        !fakecuda_need(a->partials, a->s.grid_x * sizeof(dp_cuda_partial), "partials"))
        return;
    double lanes[DP_THREADS];
    for (unsigned b = 0; b < a->s.grid_x; b++) {
        for (unsigned t = 0; t < DP_THREADS; t++)
            lanes[t] = dp_sum_squares_thread(a->x, a->n, a->scale, dp_span_x(a->s, b, t));
        a->partials[b] = (dp_cuda_partial){dp_emulate_block_sum(lanes), 0};
    }
}

cudaError_t dp_cuda_sum_squares(cudaStream_t stream, const float *x, size_t n, float scale, dp_cuda_partial *partials,
                                double *total)
{
    reduce_args a = {.s = dp_shape_reduce(n), .x = x, .n = n, .scale = scale, .partials = partials};
    return n == 0 ? cudaSuccess : queue_reduction(stream, run_sum_squares, &a, "sum_squares_kernel", total, NULL, 1.0);
}

static void run_count_nonfinite(void *raw)
{
    reduce_args *a = raw;
    if (!fakecuda_need(a->x, a->n * sizeof(float), "x") ||
        !fakecuda_need(a->partials, a->s.grid_x * sizeof(dp_cuda_partial), "partials"))
        return;
    for (unsigned b = 0; b < a->s.grid_x; b++) {
        unsigned long long bad = 0;
        for (unsigned t = 0; t < DP_THREADS; t++)
            bad += dp_count_nonfinite_thread(a->x, a->n, dp_span_x(a->s, b, t));
        a->partials[b] = (dp_cuda_partial){0.0, bad};
    }
}

cudaError_t dp_cuda_count_nonfinite(cudaStream_t stream, const float *x, size_t n, dp_cuda_partial *partials, int *blocks)
{
    reduce_args a = {.s = dp_shape_reduce(n), .x = x, .n = n, .partials = partials};
    *blocks = (int)a.s.grid_x;
    return n == 0 ? cudaSuccess : QUEUE(run_count_nonfinite, a, "count_nonfinite_kernel");
}

/* The optimizer passes: elementwise updates whose per-block non-finite counts are added into
 * a device total. */
typedef struct step_args {
    dp_shape s;
    size_t n;
    dp_cuda_partial *partials;
    float *params, *grads, *s1, *s2;
    const void *k;                 /* the pass's coefficients, device memory read when it runs */
} step_args;

static int need_step(const step_args *a, int states, size_t coefs)
{
    if (!fakecuda_need(a->k, coefs, "coefficients"))
        return 0;
    size_t bytes = a->n * sizeof(float);
    float *state[2] = {a->s1, a->s2};
    for (int i = 0; i < states; i++)
        if (!fakecuda_need(state[i], bytes, "optimizer state"))
            return 0;
    return fakecuda_need(a->params, bytes, "params") && fakecuda_need(a->grads, bytes, "grads") &&
           fakecuda_need(a->partials, a->s.grid_x * sizeof(dp_cuda_partial), "partials");
}

static void run_sgd_step(void *raw)
{
    step_args *a = raw;
    if (!need_step(a, a->s1 != NULL, sizeof(dp_sgd_coefs)))
        return;
    for (unsigned b = 0; b < a->s.grid_x; b++) {
        unsigned long long bad = 0;
        for (unsigned t = 0; t < DP_THREADS; t++)
            bad += dp_sgd_thread(a->params, a->grads, a->s1, a->n, a->k, dp_span_x(a->s, b, t));
        a->partials[b] = (dp_cuda_partial){0.0, bad};
    }
}

static void run_adamw_step(void *raw)
{
    step_args *a = raw;
    if (!need_step(a, 2, sizeof(dp_adamw_coefs)))
        return;
    for (unsigned b = 0; b < a->s.grid_x; b++) {
        unsigned long long bad = 0;
        for (unsigned t = 0; t < DP_THREADS; t++)
            bad += dp_adamw_thread(a->params, a->grads, a->s1, a->s2, a->n, a->k, dp_span_x(a->s, b, t));
        a->partials[b] = (dp_cuda_partial){0.0, bad};
    }
}

/* Queues a pass, then the add of its non-finite counts into *nonfinite. */
static cudaError_t queue_step(cudaStream_t stream, void (*run)(void *), step_args *a, const char *name, double *nonfinite)
{
    cudaError_t e = fakecuda_enqueue_on(stream, run, a, sizeof *a, name, NULL);
    partials_args p = {a->partials, (int)a->s.grid_x, NULL, nonfinite, 1.0};
    return e != cudaSuccess ? e : QUEUE(run_add_partials, p, "add_partials_kernel");
}

cudaError_t dp_cuda_sgd_step(cudaStream_t stream, float *params, float *grads, float *velocity, size_t n, const dp_sgd_coefs *k,
                             dp_cuda_partial *partials, double *nonfinite)
{
    step_args a = {.s = dp_shape_reduce(n), .n = n, .partials = partials, .params = params, .grads = grads,
                   .s1 = velocity, .k = k};
    return n == 0 ? cudaSuccess : queue_step(stream, run_sgd_step, &a, "sgd_step_kernel", nonfinite);
}

cudaError_t dp_cuda_adamw_step(cudaStream_t stream, float *params, float *grads, float *exp_avg, float *exp_avg_sq, size_t n,
                               const dp_adamw_coefs *k, dp_cuda_partial *partials, double *nonfinite)
{
    step_args a = {.s = dp_shape_reduce(n), .n = n, .partials = partials, .params = params, .grads = grads,
                   .s1 = exp_avg, .s2 = exp_avg_sq, .k = k};
    return n == 0 ? cudaSuccess : queue_step(stream, run_adamw_step, &a, "adamw_step_kernel", nonfinite);
}

/* ---- the training data held on the device (src/train/resident.c) ---- */

typedef struct gather_args {
    dp_shape s;
    uint32_t *dst;
    const uint32_t *src;
    const int32_t *index;
    int rows, words;
} gather_args;

/* Each row read must lie in device memory: an index past the held dataset faults as on a GPU. */
static void run_gather_rows(void *raw)
{
    gather_args *a = raw;
    size_t row_bytes = (size_t)a->words * sizeof *a->dst;
    if (!fakecuda_need(a->dst, (size_t)a->rows * row_bytes, "dst") ||
        !fakecuda_need(a->index, (size_t)a->rows * sizeof *a->index, "index"))
        return;
    for (int r = 0; r < a->rows; r++)
        if (!fakecuda_need(a->src + (size_t)a->index[r] * (size_t)a->words, row_bytes, "a source row"))
            return;
    for (unsigned by = 0; by < a->s.grid_y; by++)
        for (unsigned bx = 0; bx < a->s.grid_x; bx++)
            for (unsigned ty = 0; ty < a->s.block_y; ty++)
                for (unsigned tx = 0; tx < a->s.block_x; tx++)
                    dp_gather_rows_thread(a->dst, a->src, a->index, a->rows, a->words, dp_span_y(a->s, by, ty),
                                          dp_span_x(a->s, bx, tx));
}

cudaError_t dp_cuda_gather_rows(cudaStream_t stream, void *dst, const void *src, const int32_t *index, int rows,
                                int words)
{
    if (rows == 0 || words == 0)
        return cudaSuccess;
    gather_args a = {dp_shape_rows(rows, words), dst, src, index, rows, words};
    return QUEUE(run_gather_rows, a, "gather_rows_kernel");
}
