/* The GPU backend's kernels, but for the GEMMs (cuBLAS: cuda_gemm.c) and the reductions to
 * totals (the losses, the non-finite count, the optimizer passes: cuda_reductions.cu). What
 * each thread computes is in kernel_grid.h and kernel_math.h, shared with the CPU backend and
 * with the host emulation that `make check` runs (tests/fakecuda/kernels.c); this file adds
 * only what a GPU has and a host loop has not: block and thread indices and shared-memory
 * trees. Elementwise results match the CPU backend bit for bit; column sums use a grid that
 * depends only on the problem size and fixed summation trees (no floating-point atomics), so
 * they are deterministic. */
#include "src/backend/cuda_kernels.h"
#include "src/backend/cuda_launch.cuh"

namespace {

__global__ void bias_act_kernel(dp_shape s, float *y, const float *bias, int rows, int cols, int relu)
{
    dp_bias_act_thread(y, bias, rows, cols, relu, span_y(s), span_x(s));
}

__global__ void relu_forward_kernel(dp_shape s, float *y, const float *x, size_t n)
{
    dp_relu_forward_thread(y, x, n, span_x(s));
}

__global__ void relu_backward_kernel(dp_shape s, float *dy, const float *y, size_t n)
{
    dp_relu_backward_thread(dy, y, n, span_x(s));
}

__global__ void multiply_kernel(dp_shape s, float *y, const float *x, const float *mask, size_t n)
{
    dp_multiply_thread(y, x, mask, n, span_x(s));
}

__global__ void accumulate_kernel(dp_shape s, float *y, const float *x, size_t n, int add)
{
    dp_accumulate_thread(y, x, n, add, span_x(s));
}

__global__ void to_bf16_kernel(dp_shape s, uint16_t *h, const float *x, size_t n)
{
    dp_to_bf16_thread(h, x, n, span_x(s));
}

__global__ void from_bf16_kernel(dp_shape s, float *x, const uint16_t *h, size_t n)
{
    dp_from_bf16_thread(x, h, n, span_x(s));
}

__global__ void bias_grad_kernel(dp_shape s, const float *dy, int rows, int cols, float *db, int accumulate)
{
    __shared__ float lanes[DP_ROW_TILE][DP_WARP + 1];
    for (size_t first = (size_t)blockIdx.x * DP_WARP; first < (size_t)cols; first += (size_t)s.grid_x * DP_WARP) {
        int c = (int)first + (int)threadIdx.x;
        lanes[threadIdx.y][threadIdx.x] = c < cols ? dp_bias_grad_lane(dy, rows, cols, c, threadIdx.y) : 0.0f;
        __syncthreads();
        if (threadIdx.y == 0 && c < cols)
            db[c] = dp_accumulate(db[c], dp_bias_grad_merge(&lanes[0][threadIdx.x], DP_WARP + 1), accumulate);
        __syncthreads();
    }
}

/* Shaped as bias_grad, in double, two sums per column; out is overwritten. */
__global__ void column_sums_kernel(dp_shape s, const float *a, const float *b, int rows, int cols, double *out)
{
    __shared__ double sums[DP_ROW_TILE][DP_WARP + 1], products[DP_ROW_TILE][DP_WARP + 1];
    for (size_t first = (size_t)blockIdx.x * DP_WARP; first < (size_t)cols; first += (size_t)s.grid_x * DP_WARP) {
        int c = (int)first + (int)threadIdx.x;
        double sum = 0.0, product = 0.0;
        if (c < cols)
            dp_column_sums_lane(a, b, rows, cols, c, threadIdx.y, &sum, &product);
        sums[threadIdx.y][threadIdx.x] = sum;
        products[threadIdx.y][threadIdx.x] = product;
        __syncthreads();
        if (threadIdx.y == 0 && c < cols) {
            out[c] = dp_column_sums_merge(&sums[0][threadIdx.x], DP_WARP + 1);
            out[cols + c] = dp_column_sums_merge(&products[0][threadIdx.x], DP_WARP + 1);
        }
        __syncthreads();
    }
}

__global__ void dropout_kernel(dp_shape s, float *y, const float *x, float *mask, int rows, int cols,
                               dp_dropout_key key)
{
    dp_dropout_thread(y, x, mask, rows, cols, &key, span_y(s), span_x(s));
}

__global__ void bn_normalize_kernel(dp_shape s, const float *x, float *xhat, float *y, int rows, int cols,
                                    const float *mean, const float *invstd, const float *gamma, const float *beta)
{
    dp_bn_normalize_thread(x, xhat, y, rows, cols, mean, invstd, gamma, beta, span_y(s), span_x(s));
}

__global__ void bn_backward_input_kernel(dp_shape s, const float *dy, const float *xhat, float *dx, int rows,
                                         int cols, const float *gamma, const float *invstd, const float *mean_dy,
                                         const float *mean_dy_xhat)
{
    dp_bn_backward_input_thread(dy, xhat, dx, rows, cols, gamma, invstd, mean_dy, mean_dy_xhat, span_y(s),
                                span_x(s));
}

__global__ void bn_param_grads_kernel(dp_shape s, const double *sums, int cols, float *dgamma, float *dbeta,
                                      int accumulate)
{
    dp_bn_param_grads_thread(sums, cols, dgamma, dbeta, accumulate, span_x(s));
}

__global__ void bn_update_running_kernel(dp_shape s, float *running_mean, float *running_var, const float *mean,
                                         const float *var_unbiased, int cols, float momentum)
{
    dp_bn_update_running_thread(running_mean, running_var, mean, var_unbiased, cols, momentum, span_x(s));
}

__global__ void inverse_std_kernel(dp_shape s, const float *var, float *invstd, int n, float eps)
{
    dp_inverse_std_thread(var, invstd, n, eps, span_x(s));
}

__global__ void bn_channel_sums_kernel(dp_shape s, const double *column_sums, double *channel_sums, int channels,
                                       int pixels)
{
    dp_bn_channel_sums_thread(column_sums, channel_sums, channels, pixels, span_x(s));
}

__global__ void bn_batch_stats_kernel(dp_shape s, const double *channel_sums, int channels, double n, float eps,
                                      float *mean, float *invstd, float *var_unbiased)
{
    dp_bn_batch_stats_thread(channel_sums, channels, n, eps, mean, invstd, var_unbiased, span_x(s));
}

__global__ void bn_means_kernel(dp_shape s, const double *sums, int count, double n, float *means)
{
    dp_bn_means_thread(sums, count, n, means, span_x(s));
}

__global__ void bn_spread_kernel(dp_shape s, const float *per_channel, float *columns, size_t n, int pixels)
{
    dp_bn_spread_thread(per_channel, columns, n, pixels, span_x(s));
}

__global__ void im2col_kernel(dp_shape s, const float *x, float *col, int rows, dp_window w)
{
    dp_im2col_thread(x, col, rows, &w, span_x(s));
}

__global__ void col2im_kernel(dp_shape s, const float *col, float *dx, int rows, dp_window w)
{
    dp_col2im_thread(col, dx, rows, &w, span_x(s));
}

__global__ void swap_axes_kernel(dp_shape s, const float *x, float *y, size_t outer, size_t middle, size_t inner)
{
    dp_swap_axes_thread(x, y, outer, middle, inner, span_x(s));
}

__global__ void pool_forward_kernel(dp_shape s, const float *x, float *y, int rows, dp_window w, dp_pool pool)
{
    dp_pool_forward_thread(x, y, rows, &w, pool, span_x(s));
}

__global__ void pool_backward_kernel(dp_shape s, const float *x, const float *dy, float *dx, int rows, dp_window w,
                                     dp_pool pool)
{
    dp_pool_backward_thread(x, dy, dx, rows, &w, pool, span_x(s));
}

} // namespace

extern "C" cudaError_t dp_cuda_bias_act(cudaStream_t stream, float *y, const float *bias, int rows, int cols, int relu)
{
    LAUNCH((size_t)rows * cols, dp_shape_rows(rows, cols), bias_act_kernel, y, bias, rows, cols, relu);
}

extern "C" cudaError_t dp_cuda_relu_forward(cudaStream_t stream, float *y, const float *x, size_t n)
{
    LAUNCH(n, dp_shape_flat(n), relu_forward_kernel, y, x, n);
}

extern "C" cudaError_t dp_cuda_relu_backward(cudaStream_t stream, float *dy, const float *y, size_t n)
{
    LAUNCH(n, dp_shape_flat(n), relu_backward_kernel, dy, y, n);
}

extern "C" cudaError_t dp_cuda_multiply(cudaStream_t stream, float *y, const float *x, const float *mask, size_t n)
{
    LAUNCH(n, dp_shape_flat(n), multiply_kernel, y, x, mask, n);
}

extern "C" cudaError_t dp_cuda_accumulate(cudaStream_t stream, float *y, const float *x, size_t n, int add)
{
    LAUNCH(n, dp_shape_flat(n), accumulate_kernel, y, x, n, add);
}

extern "C" cudaError_t dp_cuda_to_bf16(cudaStream_t stream, uint16_t *h, const float *x, size_t n)
{
    LAUNCH(n, dp_shape_flat(n), to_bf16_kernel, h, x, n);
}

extern "C" cudaError_t dp_cuda_from_bf16(cudaStream_t stream, float *x, const uint16_t *h, size_t n)
{
    LAUNCH(n, dp_shape_flat(n), from_bf16_kernel, x, h, n);
}

extern "C" cudaError_t dp_cuda_bias_grad(cudaStream_t stream, const float *dy, int rows, int cols, float *db, int accumulate)
{
    /* No rows still overwrites: a rank without samples contributes zeros. */
    size_t work = rows == 0 && accumulate ? 0 : (size_t)cols;
    LAUNCH(work, dp_shape_bias_grad(cols), bias_grad_kernel, dy, rows, cols, db, accumulate);
}

extern "C" cudaError_t dp_cuda_column_sums(cudaStream_t stream, const float *a, const float *b, int rows, int cols, double *out)
{
    LAUNCH((size_t)cols, dp_shape_bias_grad(cols), column_sums_kernel, a, b, rows, cols, out);
}

extern "C" cudaError_t dp_cuda_im2col(cudaStream_t stream, const float *x, float *col, int rows, const dp_window *w)
{
    size_t n = (size_t)rows * dp_window_col(w);
    LAUNCH(n, dp_shape_flat(n), im2col_kernel, x, col, rows, *w);
}

extern "C" cudaError_t dp_cuda_col2im(cudaStream_t stream, const float *col, float *dx, int rows, const dp_window *w)
{
    size_t n = (size_t)rows * dp_window_image(w);
    LAUNCH(n, dp_shape_flat(n), col2im_kernel, col, dx, rows, *w);
}

extern "C" cudaError_t dp_cuda_swap_axes(cudaStream_t stream, const float *x, float *y, size_t outer, size_t middle,
                                          size_t inner)
{
    size_t n = outer * middle * inner;
    LAUNCH(n, dp_shape_flat(n), swap_axes_kernel, x, y, outer, middle, inner);
}

extern "C" cudaError_t dp_cuda_pool_forward(cudaStream_t stream, const float *x, float *y, int rows, const dp_window *w, dp_pool pool)
{
    size_t n = (size_t)rows * w->channels * w->out_h * w->out_w;
    LAUNCH(n, dp_shape_flat(n), pool_forward_kernel, x, y, rows, *w, pool);
}

extern "C" cudaError_t dp_cuda_pool_backward(cudaStream_t stream, const float *x, const float *dy, float *dx, int rows,
                                             const dp_window *w, dp_pool pool)
{
    size_t n = (size_t)rows * dp_window_image(w);
    LAUNCH(n, dp_shape_flat(n), pool_backward_kernel, x, dy, dx, rows, *w, pool);
}

extern "C" cudaError_t dp_cuda_dropout_forward(cudaStream_t stream, float *y, const float *x, float *mask, int rows, int cols,
                                               const dp_dropout_key *key)
{
    LAUNCH((size_t)rows * cols, dp_shape_rows(rows, cols), dropout_kernel, y, x, mask, rows, cols, *key);
}

extern "C" cudaError_t dp_cuda_bn_normalize(cudaStream_t stream, const float *x, float *xhat, float *y, int rows, int cols,
                                            const float *mean, const float *invstd, const float *gamma,
                                            const float *beta)
{
    LAUNCH((size_t)rows * cols, dp_shape_rows(rows, cols), bn_normalize_kernel, x, xhat, y, rows, cols, mean, invstd,
           gamma, beta);
}

extern "C" cudaError_t dp_cuda_bn_backward_input(cudaStream_t stream, const float *dy, const float *xhat, float *dx, int rows, int cols,
                                                 const float *gamma, const float *invstd, const float *mean_dy,
                                                 const float *mean_dy_xhat)
{
    LAUNCH((size_t)rows * cols, dp_shape_rows(rows, cols), bn_backward_input_kernel, dy, xhat, dx, rows, cols, gamma,
           invstd, mean_dy, mean_dy_xhat);
}

extern "C" cudaError_t dp_cuda_bn_param_grads(cudaStream_t stream, const double *sums, int cols, float *dgamma, float *dbeta,
                                              int accumulate)
{
    LAUNCH((size_t)cols, dp_shape_flat((size_t)cols), bn_param_grads_kernel, sums, cols, dgamma, dbeta, accumulate);
}

extern "C" cudaError_t dp_cuda_bn_update_running(cudaStream_t stream, float *running_mean, float *running_var, const float *mean,
                                                 const float *var_unbiased, int cols, float momentum)
{
    LAUNCH((size_t)cols, dp_shape_flat((size_t)cols), bn_update_running_kernel, running_mean, running_var, mean,
           var_unbiased, cols, momentum);
}

extern "C" cudaError_t dp_cuda_inverse_std(cudaStream_t stream, const float *var, float *invstd, int n, float eps)
{
    LAUNCH((size_t)n, dp_shape_flat((size_t)n), inverse_std_kernel, var, invstd, n, eps);
}

extern "C" cudaError_t dp_cuda_bn_channel_sums(cudaStream_t stream, const double *column_sums, double *channel_sums,
                                               int channels, int pixels)
{
    size_t n = 2 * (size_t)channels;
    LAUNCH(n, dp_shape_flat(n), bn_channel_sums_kernel, column_sums, channel_sums, channels, pixels);
}

extern "C" cudaError_t dp_cuda_bn_batch_stats(cudaStream_t stream, const double *channel_sums, int channels, double n,
                                              float eps, float *mean, float *invstd, float *var_unbiased)
{
    LAUNCH((size_t)channels, dp_shape_flat((size_t)channels), bn_batch_stats_kernel, channel_sums, channels, n, eps,
           mean, invstd, var_unbiased);
}

extern "C" cudaError_t dp_cuda_bn_means(cudaStream_t stream, const double *sums, int count, double n, float *means)
{
    LAUNCH((size_t)count, dp_shape_flat((size_t)count), bn_means_kernel, sums, count, n, means);
}

extern "C" cudaError_t dp_cuda_bn_spread(cudaStream_t stream, const float *per_channel, float *columns, int channels,
                                         int pixels, int count)
{
    size_t n = (size_t)count * channels * pixels;
    LAUNCH(n, dp_shape_flat(n), bn_spread_kernel, per_channel, columns, n, pixels);
}

/* ---- the training data held on the device (src/train/resident.c) ---- */

namespace {

__global__ void gather_rows_kernel(dp_shape s, uint32_t *dst, const uint32_t *src, const int32_t *index, int rows,
                                   int words)
{
    dp_gather_rows_thread(dst, src, index, rows, words, span_y(s), span_x(s));
}

} // namespace

extern "C" cudaError_t dp_cuda_gather_rows(cudaStream_t stream, void *dst, const void *src, const int32_t *index,
                                           int rows, int words)
{
    LAUNCH((size_t)rows * words, dp_shape_rows(rows, words), gather_rows_kernel, (uint32_t *)dst,
           (const uint32_t *)src, index, rows, words);
}
