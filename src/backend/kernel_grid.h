/* How the CUDA kernels split their work, written once: each kernel's launch shape and what one
 * thread (or one warp lane) of it computes, given its block and thread coordinates. The
 * kernels (cuda_kernels.cu, cuda_reductions.cu) pass blockIdx/threadIdx; the host emulation
 * (tests/fakecuda/kernels.c) loops over every block and thread of the same shape, then merges
 * lanes in the same order as the GPU's shuffles and shared-memory trees, so it computes what
 * the GPU does, bit for bit, and `make check` runs it against the CPU backend.
 *
 * Adding a kernel: its per-element arithmetic goes in kernel_math.h; its shape and per-thread
 * function here; cuda_kernels.cu (cuda_reductions.cu for a reduction to totals) gets a
 * __global__ wrapper and launcher; tests/fakecuda/kernels.c the same launcher over the host
 * loops; its rows in the backend test table (tests/test_backend_ops.c) check it through the
 * fake runtime (make check) and on a GPU. */
#ifndef DP_KERNEL_GRID_H
#define DP_KERNEL_GRID_H

#include "src/backend/kernel_math.h"

#include <stddef.h>
#include <stdint.h>

#define DP_THREADS 256          /* threads per block */
#define DP_WARP 32
#define DP_WARPS (DP_THREADS / DP_WARP)
#define DP_MAX_GRID 65536u      /* grid-stride loops cover any size beyond this many blocks */
#define DP_MAX_GRID_Y 65535u    /* CUDA's limit on gridDim.y */
#define DP_MAX_COLUMN_BLOCKS 64u
#define DP_ROW_TILE 32          /* bias_grad: row lanes summed in parallel per column */
#define DP_MAX_PARTIALS 1024    /* blocks of a reduction, each leaving one partial result */

/* One block's share of a reduction; the launcher adds them in a fixed tree (dp_add_partials_thread). */
typedef struct dp_cuda_partial {
    double sum;
    unsigned long long count;
} dp_cuda_partial;

/* A launch: grid and block extents (x, y). */
typedef struct dp_shape {
    unsigned grid_x, grid_y, block_x, block_y;
} dp_shape;

/* The indices a thread visits: first, first + step, ... */
typedef struct dp_span {
    size_t first, step;
} dp_span;

static inline DP_HD unsigned dp_blocks_for(size_t items, size_t per_block, unsigned cap)
{
    size_t blocks = (items + per_block - 1) / per_block;
    return (unsigned)(blocks < cap ? blocks : cap);
}

static inline DP_HD dp_span dp_span_x(dp_shape s, unsigned block, unsigned thread)
{
    dp_span span = {(size_t)block * s.block_x + thread, (size_t)s.grid_x * s.block_x};
    return span;
}

static inline DP_HD dp_span dp_span_y(dp_shape s, unsigned block, unsigned thread)
{
    dp_span span = {(size_t)block * s.block_y + thread, (size_t)s.grid_y * s.block_y};
    return span;
}

/* ---- launch shapes ---- */

/* Elementwise over n values: 1-D grid-stride. */
static inline dp_shape dp_shape_flat(size_t n)
{
    dp_shape s = {dp_blocks_for(n, DP_THREADS, DP_MAX_GRID), 1, DP_THREADS, 1};
    return s;
}

/* A [rows, cols] matrix walked by rows: x threads over a row's columns (the power of two
 * that covers them, up to a block), y over rows, so narrow rows (a label, 10 logits) still
 * fill the block instead of leaving most of 256 threads idle. */
static inline dp_shape dp_shape_rows(int rows, int cols)
{
    unsigned x = 1;
    while (x < (unsigned)cols && x < DP_THREADS)
        x *= 2;
    unsigned y = DP_THREADS / x;
    dp_shape s = {dp_blocks_for((size_t)cols, x, DP_MAX_COLUMN_BLOCKS),
                  dp_blocks_for((size_t)rows, y, DP_MAX_GRID_Y), x, y};
    return s;
}

/* bias_grad: blocks of (a warp of columns, DP_ROW_TILE row lanes). */
static inline dp_shape dp_shape_bias_grad(int cols)
{
    dp_shape s = {dp_blocks_for((size_t)cols, DP_WARP, DP_MAX_GRID_Y), 1, DP_WARP, DP_ROW_TILE};
    return s;
}

/* softmax cross-entropy: one warp per row, at most DP_MAX_PARTIALS blocks. */
static inline dp_shape dp_shape_softmax(int rows)
{
    dp_shape s = {dp_blocks_for((size_t)rows, DP_WARPS, DP_MAX_PARTIALS), 1, DP_THREADS, 1};
    return s;
}

/* Block reductions over n values (MSE, non-finite count, the optimizer passes). */
static inline dp_shape dp_shape_reduce(size_t n)
{
    dp_shape s = {dp_blocks_for(n, DP_THREADS, DP_MAX_PARTIALS), 1, DP_THREADS, 1};
    return s;
}

/* ---- what one thread computes ---- */

/* bias may be NULL (a Linear without one, followed by a ReLU). */
static inline DP_HD void dp_bias_act_thread(float *y, const float *bias, int rows, int cols,
                                            int relu, dp_span row, dp_span col)
{
    for (size_t r = row.first; r < (size_t)rows; r += row.step)
        for (size_t c = col.first; c < (size_t)cols; c += col.step)
            y[r * cols + c] = bias ? dp_bias_act(y[r * cols + c], bias[c], relu) : dp_act(y[r * cols + c], relu);
}

static inline DP_HD void dp_relu_forward_thread(float *y, const float *x, size_t n, dp_span i)
{
    for (size_t k = i.first; k < n; k += i.step)
        y[k] = dp_act(x[k], 1);
}

static inline DP_HD void dp_multiply_thread(float *y, const float *x, const float *mask, size_t n, dp_span i)
{
    for (size_t k = i.first; k < n; k += i.step)
        y[k] = dp_mul(x[k], mask[k]);
}

static inline DP_HD void dp_accumulate_thread(float *y, const float *x, size_t n, int add, dp_span i)
{
    for (size_t k = i.first; k < n; k += i.step)
        y[k] = dp_accumulate(y[k], x[k], add);
}

static inline DP_HD void dp_to_bf16_thread(uint16_t *h, const float *x, size_t n, dp_span i)
{
    for (size_t k = i.first; k < n; k += i.step)
        h[k] = dp_bf16_bits(x[k]);
}

static inline DP_HD void dp_from_bf16_thread(float *x, const uint16_t *h, size_t n, dp_span i)
{
    for (size_t k = i.first; k < n; k += i.step)
        x[k] = dp_bf16_value(h[k]);
}

static inline DP_HD void dp_dropout_thread(float *y, const float *x, float *mask, int rows, int cols,
                                           const dp_dropout_key *key, dp_span row, dp_span col)
{
    for (size_t r = row.first; r < (size_t)rows; r += row.step)
        for (size_t c = col.first; c < (size_t)cols; c += col.step) {
            size_t k = r * cols + c;
            mask[k] = dp_dropout_mask(key, (uint64_t)r, (uint64_t)c);
            y[k] = dp_mul(x[k], mask[k]);
        }
}

/* xhat may be NULL (eval mode keeps none). */
static inline DP_HD void dp_bn_normalize_thread(const float *x, float *xhat, float *y, int rows, int cols,
                                                const float *mean, const float *invstd, const float *gamma,
                                                const float *beta, dp_span row, dp_span col)
{
    for (size_t r = row.first; r < (size_t)rows; r += row.step)
        for (size_t c = col.first; c < (size_t)cols; c += col.step) {
            size_t k = r * cols + c;
            float normalized = dp_bn_normalized(x[k], mean[c], invstd[c]);
            if (xhat)
                xhat[k] = normalized;
            y[k] = dp_bn_affine(normalized, gamma[c], beta[c]);
        }
}

static inline DP_HD void dp_bn_backward_input_thread(const float *dy, const float *xhat, float *dx, int rows,
                                                     int cols, const float *gamma, const float *invstd,
                                                     const float *mean_dy, const float *mean_dy_xhat,
                                                     dp_span row, dp_span col)
{
    for (size_t r = row.first; r < (size_t)rows; r += row.step)
        for (size_t c = col.first; c < (size_t)cols; c += col.step) {
            size_t k = r * cols + c;
            dx[k] = dp_bn_input_grad(dy[k], xhat[k], gamma[c], invstd[c], mean_dy[c], mean_dy_xhat[c]);
        }
}

static inline DP_HD void dp_bn_param_grads_thread(const double *sums, int cols, float *dgamma, float *dbeta,
                                                  int accumulate, dp_span i)
{
    for (size_t c = i.first; c < (size_t)cols; c += i.step) {
        dgamma[c] = dp_accumulate_sum(dgamma[c], sums[cols + c], accumulate);
        dbeta[c] = dp_accumulate_sum(dbeta[c], sums[c], accumulate);
    }
}

static inline DP_HD void dp_bn_update_running_thread(float *running_mean, float *running_var, const float *mean,
                                                     const float *var_unbiased, int cols, float momentum,
                                                     dp_span i)
{
    for (size_t c = i.first; c < (size_t)cols; c += i.step) {
        running_mean[c] = dp_running_update(running_mean[c], mean[c], momentum);
        running_var[c] = dp_running_update(running_var[c], var_unbiased[c], momentum);
    }
}

static inline DP_HD void dp_inverse_std_thread(const float *var, float *invstd, int n, float eps, dp_span i)
{
    for (size_t k = i.first; k < (size_t)n; k += i.step)
        invstd[k] = dp_inverse_std(var[k], eps);
}

/* Row s of channel ch is element k = s channels + ch; its pixels' columns start at k pixels. */
static inline DP_HD void dp_bn_channel_sums_thread(const double *column_sums, double *channel_sums, int channels,
                                                   int pixels, dp_span i)
{
    for (size_t k = i.first; k < 2 * (size_t)channels; k += i.step)
        channel_sums[k] = dp_bn_channel_sum(column_sums + k * (size_t)pixels, pixels);
}

static inline DP_HD void dp_bn_batch_stats_thread(const double *channel_sums, int channels, double n, float eps,
                                                  float *mean, float *invstd, float *var_unbiased, dp_span i)
{
    for (size_t c = i.first; c < (size_t)channels; c += i.step)
        dp_bn_batch_stats(channel_sums[c], channel_sums[channels + c], n, eps, &mean[c], &invstd[c], &var_unbiased[c]);
}

static inline DP_HD void dp_bn_means_thread(const double *sums, int count, double n, float *means, dp_span i)
{
    for (size_t k = i.first; k < (size_t)count; k += i.step)
        means[k] = dp_bn_mean(sums[k], n);
}

/* Element k of the spread rows is (row, channel) k / pixels of the per-channel rows. */
static inline DP_HD void dp_bn_spread_thread(const float *per_channel, float *columns, size_t n, int pixels, dp_span i)
{
    for (size_t k = i.first; k < n; k += i.step)
        columns[k] = per_channel[k / (size_t)pixels];
}

static inline DP_HD void dp_relu_backward_thread(float *dy, const float *y, size_t n, dp_span i)
{
    for (size_t k = i.first; k < n; k += i.step)
        dy[k] = dp_relu_grad(dy[k], y[k]);
}

/* The optimizer passes: each thread's elements updated, its non-finite gradients and updated
 * parameters counted (the block adds the counts in a tree). velocity may be NULL (SGD without momentum). */
static inline DP_HD unsigned long long dp_sgd_thread(float *params, float *grads, float *velocity, size_t n,
                                                     const dp_sgd_coefs *k, dp_span i)
{
    unsigned long long bad = 0;
    for (size_t e = i.first; e < n; e += i.step) {
        dp_sgd_element(&params[e], &grads[e], velocity ? &velocity[e] : NULL, k);
        bad += (unsigned long long)dp_update_is_bad(grads[e], params[e], k->apply);
    }
    return bad;
}

static inline DP_HD unsigned long long dp_adamw_thread(float *params, float *grads, float *exp_avg,
                                                       float *exp_avg_sq, size_t n, const dp_adamw_coefs *k,
                                                       dp_span i)
{
    unsigned long long bad = 0;
    for (size_t e = i.first; e < n; e += i.step) {
        dp_adamw_element(&params[e], &grads[e], &exp_avg[e], &exp_avg_sq[e], k);
        bad += (unsigned long long)dp_update_is_bad(grads[e], params[e], k->apply);
    }
    return bad;
}

/* A reduction's per-block partials added into device totals by one block of DP_THREADS
 * threads in a fixed order (any number of blocks up to DP_MAX_PARTIALS): thread t adds
 * partials t, t + DP_THREADS, ... in turn, the block's tree adds the threads' sums, and
 * thread 0 finishes. The order depends only on the count of partials: bitwise run to run. */
static inline DP_HD void dp_add_partials_thread(const dp_cuda_partial *partials, int blocks, int thread,
                                                double *sum, double *count)
{
    *sum = 0.0;
    *count = 0.0;
    for (int b = thread; b < blocks; b += DP_THREADS) {
        *sum = dp_dadd(*sum, partials[b].sum);
        *count = dp_dadd(*count, (double)partials[b].count);
    }
}

/* Thread 0, after the tree: *sum_into += sum / sum_divisor, *count_into += count (either may be NULL). */
static inline DP_HD void dp_add_partials_finish(double sum, double count, double *sum_into, double *count_into,
                                                double sum_divisor)
{
    if (sum_into)
        *sum_into = dp_dadd(*sum_into, dp_ddiv(sum, sum_divisor));
    if (count_into)
        *count_into = dp_dadd(*count_into, count);
}

/* ---- sliding windows: one thread per output element (dp_shape_flat), decoded from its index ---- */

static inline DP_HD size_t dp_window_taps(const dp_window *w)
{
    return (size_t)w->channels * w->kernel_h * w->kernel_w;
}

/* The elements of a sample: its image (dp_window_image), its windows (dp_window_positions), its
 * columns of col (dp_window_col). */
static inline DP_HD size_t dp_window_image(const dp_window *w)
{
    return (size_t)w->channels * w->height * w->width;
}

static inline DP_HD size_t dp_window_positions(const dp_window *w)
{
    return (size_t)w->out_h * w->out_w;
}

static inline DP_HD size_t dp_window_col(const dp_window *w)
{
    return dp_window_positions(w) * dp_window_taps(w);
}

/* col element k: tap, then sample and window (col [taps, rows positions]). */
static inline DP_HD void dp_im2col_thread(const float *x, float *col, int rows, const dp_window *w, dp_span i)
{
    size_t positions = dp_window_positions(w), ld = (size_t)rows * positions;
    size_t n = ld * dp_window_taps(w), square = (size_t)w->kernel_h * w->kernel_w;
    for (size_t k = i.first; k < n; k += i.step) {
        size_t tap = k / ld, sample = k % ld / positions, p = k % positions, ij = tap % square;
        col[k] = dp_im2col_value(x + sample * dp_window_image(w), w, (int)(p / w->out_w), (int)(p % w->out_w),
                                 (int)(tap / square), (int)(ij / w->kernel_w), (int)(ij % w->kernel_w));
    }
}

/* dx element k: sample, channel, pixel. */
static inline DP_HD void dp_col2im_thread(const float *col, float *dx, int rows, const dp_window *w, dp_span i)
{
    size_t image = dp_window_image(w), plane = (size_t)w->height * w->width, n = (size_t)rows * image;
    size_t positions = dp_window_positions(w);
    for (size_t k = i.first; k < n; k += i.step) {
        size_t sample = k / image, at = k % image, q = at % plane;
        dx[k] = dp_col2im_value(col + sample * positions, (size_t)rows * positions, w, (int)(at / plane),
                                (int)(q / w->width), (int)(q % w->width));
    }
}

/* y element k of y [middle, outer, inner] from x [outer, middle, inner]. */
static inline DP_HD void dp_swap_axes_thread(const float *x, float *y, size_t outer, size_t middle, size_t inner,
                                             dp_span i)
{
    size_t n = outer * middle * inner;
    for (size_t k = i.first; k < n; k += i.step) {
        size_t q = k % inner, o = k / inner % outer, m = k / inner / outer;
        y[k] = x[(o * middle + m) * inner + q];
    }
}

/* y element k: plane (sample, channel), window. */
static inline DP_HD void dp_pool_forward_thread(const float *x, float *y, int rows, const dp_window *w,
                                                dp_pool pool, dp_span i)
{
    size_t out = (size_t)w->out_h * w->out_w, n = (size_t)rows * w->channels * out;
    for (size_t k = i.first; k < n; k += i.step) {
        size_t p = k % out;
        y[k] = dp_pool_value(x + k / out * w->height * w->width, w, (int)(p / w->out_w), (int)(p % w->out_w), pool);
    }
}

/* dx element k: plane (sample, channel), pixel. */
static inline DP_HD void dp_pool_backward_thread(const float *x, const float *dy, float *dx, int rows,
                                                 const dp_window *w, dp_pool pool, dp_span i)
{
    size_t plane = (size_t)w->height * w->width, out = (size_t)w->out_h * w->out_w;
    size_t n = (size_t)rows * w->channels * plane;
    for (size_t k = i.first; k < n; k += i.step) {
        size_t at = k / plane, q = k % plane;
        dx[k] = dp_pool_grad_value(x + at * plane, dy + at * out, w, (int)(q / w->width), (int)(q % w->width), pool);
    }
}

/* The thread's sum of squared differences (the block adds them in a tree); writes dpred. */
static inline DP_HD double dp_mse_thread(const float *pred, const float *targets, size_t n,
                                         int cols, float *dpred, dp_span i)
{
    double squares = 0.0;
    for (size_t k = i.first; k < n; k += i.step) {
        float diff = dp_mse_diff(pred[k], targets[k]);
        squares = dp_dadd(squares, dp_mse_square(diff));
        if (dpred)
            dpred[k] = dp_mse_grad(diff, cols);
    }
    return squares;
}

static inline DP_HD double dp_sum_squares_thread(const float *x, size_t n, float scale, dp_span i)
{
    double squares = 0.0;
    for (size_t k = i.first; k < n; k += i.step)
        squares = dp_dadd(squares, dp_scaled_square(x[k], scale));
    return squares;
}

static inline DP_HD unsigned long long dp_count_nonfinite_thread(const float *x, size_t n, dp_span i)
{
    unsigned long long bad = 0;
    for (size_t k = i.first; k < n; k += i.step)
        bad += (unsigned long long)dp_is_nonfinite(x[k]);
    return bad;
}

/* bias_grad: row lane `lane` sums rows lane, lane + DP_ROW_TILE, ... of column c. */
static inline DP_HD float dp_bias_grad_lane(const float *dy, int rows, int cols, int c, int lane)
{
    float sum = 0.0f;
    for (int r = lane; r < rows; r += DP_ROW_TILE)
        sum = dp_add(sum, dy[(size_t)r * cols + c]);
    return sum;
}

/* ...then the lanes are added in order (lanes[k * stride] is lane k's sum). */
static inline DP_HD float dp_bias_grad_merge(const float *lanes, int stride)
{
    float total = 0.0f;
    for (int lane = 0; lane < DP_ROW_TILE; lane++)
        total = dp_add(total, lanes[lane * stride]);
    return total;
}

/* column_sums, shaped as bias_grad: row lane `lane` sums a and a * b over rows lane,
 * lane + DP_ROW_TILE, ... of column c, in double... */
static inline DP_HD void dp_column_sums_lane(const float *a, const float *b, int rows, int cols, int c, int lane,
                                             double *sum, double *product)
{
    *sum = 0.0;
    *product = 0.0;
    for (int r = lane; r < rows; r += DP_ROW_TILE) {
        size_t k = (size_t)r * cols + c;
        *sum = dp_dadd(*sum, (double)a[k]);
        *product = dp_dadd(*product, dp_dmul((double)a[k], (double)b[k]));
    }
}

/* ...and the lanes added in order (lanes[k * stride] is lane k's). */
static inline DP_HD double dp_column_sums_merge(const double *lanes, int stride)
{
    double total = 0.0;
    for (int lane = 0; lane < DP_ROW_TILE; lane++)
        total = dp_dadd(total, lanes[lane * stride]);
    return total;
}

/* softmax, one warp per row. Lane `lane` scans columns lane, lane + DP_WARP, ...; a lane
 * without columns holds (-inf, cols), which every real column beats. */
static inline DP_HD void dp_argmax_lane(const float *z, int cols, int lane, float *best, int *at)
{
    *best = -INFINITY;
    *at = cols;
    for (int c = lane; c < cols; c += DP_WARP)
        if (dp_argmax_beats(z[c], c, *best, *at)) {
            *best = z[c];
            *at = c;
        }
}

/* One butterfly step: keep the other lane's candidate when it comes first. */
static inline DP_HD void dp_argmax_merge(float *best, int *at, float other, int other_at)
{
    if (dp_argmax_beats(other, other_at, *best, *at)) {
        *best = other;
        *at = other_at;
    }
}

static inline DP_HD double dp_xent_lane_exps(const float *z, int cols, int lane, float top)
{
    double sum = 0.0;
    for (int c = lane; c < cols; c += DP_WARP)
        sum = dp_dadd(sum, dp_xent_exp(z[c], top));
    return sum;
}

static inline DP_HD void dp_xent_lane_grads(const float *z, int cols, int lane, float top,
                                            double exp_sum, int label, float *dz)
{
    for (int c = lane; c < cols; c += DP_WARP)
        dz[c] = dp_xent_grad(z[c], top, exp_sum, c == label);
}

/* ---- the training data held on the device: gather_rows ---- */

/* Row r of dst = row index[r] of src, `words` 4-byte words a row (offsets in 64 bits: a
 * dataset may pass 2^31 words); launched on dp_shape_rows(rows, words). */
static inline DP_HD void dp_gather_rows_thread(uint32_t *dst, const uint32_t *src, const int32_t *index, int rows,
                                               int words, dp_span row, dp_span col)
{
    for (size_t r = row.first; r < (size_t)rows; r += row.step) {
        const uint32_t *from = src + (size_t)index[r] * (size_t)words;
        for (size_t c = col.first; c < (size_t)words; c += col.step)
            dst[r * (size_t)words + c] = from[c];
    }
}

#endif
