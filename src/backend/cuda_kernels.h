/* The CUDA kernels of the GPU backend (cuda_kernels.cu; the reductions to totals in
 * cuda_reductions.cu), callable from C (cuda.c, cuda_gemm.c); in the fake-CUDA test build the
 * same launchers run on the host (tests/fakecuda/kernels.c). Each launcher queues its kernel
 * on `stream` (the backend's own) and returns the launch's status; pointers are device memory.
 * Reductions leave one dp_cuda_partial per block in `partials` (at most DP_MAX_PARTIALS,
 * kernel_grid.h); a one-block kernel then adds them in a fixed tree into totals in device
 * memory, so a result is bitwise the same run to run and stays on the GPU until the caller
 * reads it. */
#ifndef DP_CUDA_KERNELS_H
#define DP_CUDA_KERNELS_H

#include "dp/backend.h"

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "src/backend/kernel_grid.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The operations of include/dp/backend.h, same arguments and results. */
cudaError_t dp_cuda_bias_act(cudaStream_t stream, float *y, const float *bias, int rows, int cols, int relu);
cudaError_t dp_cuda_relu_forward(cudaStream_t stream, float *y, const float *x, size_t n);
cudaError_t dp_cuda_relu_backward(cudaStream_t stream, float *dy, const float *y, size_t n);
cudaError_t dp_cuda_bias_grad(cudaStream_t stream, const float *dy, int rows, int cols, float *db, int accumulate);
cudaError_t dp_cuda_dropout_forward(cudaStream_t stream, float *y, const float *x, float *mask, int rows, int cols,
                                    const dp_dropout_key *key);
cudaError_t dp_cuda_multiply(cudaStream_t stream, float *y, const float *x, const float *mask, size_t n);
cudaError_t dp_cuda_im2col(cudaStream_t stream, const float *x, float *col, int rows, const dp_window *w);
cudaError_t dp_cuda_col2im(cudaStream_t stream, const float *col, float *dx, int rows, const dp_window *w);
cudaError_t dp_cuda_swap_axes(cudaStream_t stream, const float *x, float *y, size_t outer, size_t middle, size_t inner);
cudaError_t dp_cuda_pool_forward(cudaStream_t stream, const float *x, float *y, int rows, const dp_window *w,
                                 dp_pool pool);
cudaError_t dp_cuda_pool_backward(cudaStream_t stream, const float *x, const float *dy, float *dx, int rows,
                                  const dp_window *w, dp_pool pool);
cudaError_t dp_cuda_accumulate(cudaStream_t stream, float *y, const float *x, size_t n, int add);
/* --grad-dtype bf16 with nccl (src/comm/nccl.c): n floats to bfloat16, nearest even, and back. */
cudaError_t dp_cuda_to_bf16(cudaStream_t stream, uint16_t *h, const float *x, size_t n);
cudaError_t dp_cuda_from_bf16(cudaStream_t stream, float *x, const uint16_t *h, size_t n);
cudaError_t dp_cuda_column_sums(cudaStream_t stream, const float *a, const float *b, int rows, int cols, double *out);
cudaError_t dp_cuda_bn_normalize(cudaStream_t stream, const float *x, float *xhat, float *y, int rows, int cols,
                                 const float *mean, const float *invstd, const float *gamma,
                                 const float *beta);
cudaError_t dp_cuda_bn_backward_input(cudaStream_t stream, const float *dy, const float *xhat, float *dx, int rows,
                                      int cols, const float *gamma, const float *invstd,
                                      const float *mean_dy, const float *mean_dy_xhat);
cudaError_t dp_cuda_bn_param_grads(cudaStream_t stream, const double *sums, int cols, float *dgamma, float *dbeta,
                                   int accumulate);
cudaError_t dp_cuda_bn_update_running(cudaStream_t stream, float *running_mean, float *running_var, const float *mean,
                                      const float *var_unbiased, int cols, float momentum);
cudaError_t dp_cuda_inverse_std(cudaStream_t stream, const float *var, float *invstd, int n, float eps);
cudaError_t dp_cuda_bn_channel_sums(cudaStream_t stream, const double *column_sums, double *channel_sums, int channels,
                                    int pixels);
cudaError_t dp_cuda_bn_batch_stats(cudaStream_t stream, const double *channel_sums, int channels, double n, float eps,
                                   float *mean, float *invstd, float *var_unbiased);
cudaError_t dp_cuda_bn_means(cudaStream_t stream, const double *sums, int count, double n, float *means);
cudaError_t dp_cuda_bn_spread(cudaStream_t stream, const float *per_channel, float *columns, int channels, int pixels,
                              int count);

/* The reductions leave per-block partials, then add them in a fixed tree into totals (device
 * memory), so the sums stay on the GPU: totals[0] += loss, totals[1] += correct rows. */
cudaError_t dp_cuda_softmax_xent(cudaStream_t stream, const float *logits, const int32_t *labels, int rows, int cols,
                                 float *dlogits, dp_cuda_partial *partials, double *totals);
/* totals[0] += the elements' squared differences / cols. */
cudaError_t dp_cuda_mse(cudaStream_t stream, const float *pred, const float *targets, size_t n, int cols,
                        float *dpred, dp_cuda_partial *partials, double *totals);
/* *total += the scaled squares of x (kernel_grid.h's dp_sum_squares_thread, the block tree, the partials' tree). */
cudaError_t dp_cuda_sum_squares(cudaStream_t stream, const float *x, size_t n, float scale, dp_cuda_partial *partials,
                                double *total);
/* Per block: count = NaN or infinite elements (the caller adds them). */
cudaError_t dp_cuda_count_nonfinite(cudaStream_t stream, const float *x, size_t n, dp_cuda_partial *partials,
                                    int *blocks);
/* The optimizer passes, their coefficients k in device memory; *nonfinite (device) += the scaled
 * gradient's NaN and infinite values. */
cudaError_t dp_cuda_sgd_step(cudaStream_t stream, float *params, float *grads, float *velocity, size_t n,
                             const dp_sgd_coefs *k, dp_cuda_partial *partials, double *nonfinite);
cudaError_t dp_cuda_adamw_step(cudaStream_t stream, float *params, float *grads, float *exp_avg, float *exp_avg_sq,
                               size_t n, const dp_adamw_coefs *k, dp_cuda_partial *partials,
                               double *nonfinite);

/* ---- the training data held on the device (src/train/resident.c) ---- */
/* gather_rows of include/dp/backend.h: dst row r = src row index[r], `words` 4-byte words a row. */
cudaError_t dp_cuda_gather_rows(cudaStream_t stream, void *dst, const void *src, const int32_t *index, int rows,
                                int words);

#ifdef __cplusplus
}
#endif

#endif
