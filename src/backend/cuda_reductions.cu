/* The CUDA kernels that reduce over the whole problem: the losses (softmax cross-entropy, MSE),
 * the non-finite count and the optimizer passes (SGD, AdamW, which count the gradient's
 * non-finite values as they update). Each block leaves one dp_cuda_partial; the losses and the
 * optimizer passes then queue one block that adds them in a fixed tree into totals in device
 * memory, so results are bitwise the same run to run (no floating-point atomics). What each
 * thread computes is kernel_grid.h's, shared with the host emulation (tests/fakecuda/kernels.c),
 * which adds in the order of the warp butterflies and block trees here. */
#include "src/backend/cuda_kernels.h"
#include "src/backend/cuda_launch.cuh"

namespace {

constexpr unsigned ALL_LANES = 0xffffffffu;

/* Sum of v over the block in a fixed tree (the host emulation adds in the same order). */
template <typename T> __device__ T block_sum(T v)
{
    __shared__ T lanes[DP_THREADS];
    lanes[threadIdx.x] = v;
    __syncthreads();
    for (int half = DP_THREADS / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half)
            lanes[threadIdx.x] += lanes[threadIdx.x + half];
        __syncthreads();
    }
    T total = lanes[0];
    __syncthreads();
    return total;
}

/* The coefficients come from device memory, written before the pass runs (a replayed graph's step
 * takes its own), and are read once into registers. */
__global__ void sgd_step_kernel(dp_shape s, float *params, float *grads, float *velocity, size_t n,
                                const dp_sgd_coefs *coefs, dp_cuda_partial *partials)
{
    dp_sgd_coefs k = *coefs;
    unsigned long long total = block_sum(dp_sgd_thread(params, grads, velocity, n, &k, span_x(s)));
    if (threadIdx.x == 0)
        partials[blockIdx.x] = dp_cuda_partial{0.0, total};
}

__global__ void adamw_step_kernel(dp_shape s, float *params, float *grads, float *exp_avg, float *exp_avg_sq,
                                  size_t n, const dp_adamw_coefs *coefs, dp_cuda_partial *partials)
{
    dp_adamw_coefs k = *coefs;
    unsigned long long total = block_sum(dp_adamw_thread(params, grads, exp_avg, exp_avg_sq, n, &k, span_x(s)));
    if (threadIdx.x == 0)
        partials[blockIdx.x] = dp_cuda_partial{0.0, total};
}

/* One block: each thread's strided share, then the block's tree (two sums: block_sum waits
 * between uses of its shared array). */
__global__ void add_partials_kernel(const dp_cuda_partial *partials, int blocks, double *sum_into,
                                    double *count_into, double sum_divisor)
{
    double sum, count;
    dp_add_partials_thread(partials, blocks, (int)threadIdx.x, &sum, &count);
    sum = block_sum(sum);
    count = block_sum(count);
    if (threadIdx.x == 0)
        dp_add_partials_finish(sum, count, sum_into, count_into, sum_divisor);
}

/* The row's argmax under dp_argmax_beats, identical in every lane (the order is total). */
__device__ void row_argmax(const float *z, int cols, int lane, float *top, int *best)
{
    dp_argmax_lane(z, cols, lane, top, best);
    for (int offset = DP_WARP / 2; offset > 0; offset /= 2) {
        float other = __shfl_xor_sync(ALL_LANES, *top, offset);
        int other_at = __shfl_xor_sync(ALL_LANES, *best, offset);
        dp_argmax_merge(top, best, other, other_at);
    }
}

/* Butterfly sum: lane l adds lane l ^ offset's value; addition commutes, so all lanes agree. */
__device__ double warp_sum(double v)
{
    for (int offset = DP_WARP / 2; offset > 0; offset /= 2)
        v = dp_dadd(v, __shfl_xor_sync(ALL_LANES, v, offset));
    return v;
}

/* One warp per row, in double as the CPU backend: loss = log sum exp(z - max) - (z_label - max). */
__global__ void softmax_xent_kernel(dp_shape s, const float *logits, const int32_t *labels, int rows,
                                    int cols, float *dlogits, dp_cuda_partial *partials)
{
    __shared__ double warp_loss[DP_WARPS];
    __shared__ unsigned long long warp_correct[DP_WARPS];
    int lane = threadIdx.x % DP_WARP, warp = threadIdx.x / DP_WARP;
    double loss = 0.0;
    unsigned long long correct = 0;
    for (size_t r = (size_t)blockIdx.x * DP_WARPS + warp; r < (size_t)rows; r += (size_t)s.grid_x * DP_WARPS) {
        const float *z = logits + r * cols;
        int label = labels[r], best;
        float top;
        row_argmax(z, cols, lane, &top, &best);
        double sum = warp_sum(dp_xent_lane_exps(z, cols, lane, top));
        loss = dp_dadd(loss, dp_xent_loss(sum, z[label], top));
        correct += best == label;
        if (dlogits)
            dp_xent_lane_grads(z, cols, lane, top, sum, label, dlogits + r * cols);
    }
    if (lane == 0) {
        warp_loss[warp] = loss;
        warp_correct[warp] = correct;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        dp_cuda_partial p = {0.0, 0};
        for (int w = 0; w < DP_WARPS; w++) {
            p.sum = dp_dadd(p.sum, warp_loss[w]);
            p.count += warp_correct[w];
        }
        partials[blockIdx.x] = p;
    }
}

__global__ void mse_kernel(dp_shape s, const float *pred, const float *targets, size_t n, int cols,
                           float *dpred, dp_cuda_partial *partials)
{
    double total = block_sum(dp_mse_thread(pred, targets, n, cols, dpred, span_x(s)));
    if (threadIdx.x == 0)
        partials[blockIdx.x] = dp_cuda_partial{total, 0};
}

__global__ void sum_squares_kernel(dp_shape s, const float *x, size_t n, float scale, dp_cuda_partial *partials)
{
    double total = block_sum(dp_sum_squares_thread(x, n, scale, span_x(s)));
    if (threadIdx.x == 0)
        partials[blockIdx.x] = dp_cuda_partial{total, 0};
}

__global__ void count_nonfinite_kernel(dp_shape s, const float *x, size_t n, dp_cuda_partial *partials)
{
    unsigned long long total = block_sum(dp_count_nonfinite_thread(x, n, span_x(s)));
    if (threadIdx.x == 0)
        partials[blockIdx.x] = dp_cuda_partial{0.0, total};
}

} // namespace

/* Queues the one-block kernel that adds a reduction's partials into device totals. */
static cudaError_t add_partials(cudaStream_t stream, dp_shape s, const dp_cuda_partial *partials, double *sum_into, double *count_into,
                                double sum_divisor)
{
    cudaError_t e = launched();
    if (e != cudaSuccess)
        return e;
    add_partials_kernel<<<1, DP_THREADS, 0, stream>>>(partials, (int)s.grid_x, sum_into, count_into, sum_divisor);
    return launched();
}

extern "C" cudaError_t dp_cuda_softmax_xent(cudaStream_t stream, const float *logits, const int32_t *labels, int rows, int cols,
                                            float *dlogits, dp_cuda_partial *partials, double *totals)
{
    dp_shape s = dp_shape_softmax(rows);
    if (rows == 0)
        return cudaSuccess;
    softmax_xent_kernel<<<grid_of(s), block_of(s), 0, stream>>>(s, logits, labels, rows, cols, dlogits, partials);
    return add_partials(stream, s, partials, &totals[0], &totals[1], 1.0);
}

extern "C" cudaError_t dp_cuda_mse(cudaStream_t stream, const float *pred, const float *targets, size_t n, int cols, float *dpred,
                                   dp_cuda_partial *partials, double *totals)
{
    dp_shape s = dp_shape_reduce(n);
    if (n == 0)
        return cudaSuccess;
    mse_kernel<<<grid_of(s), block_of(s), 0, stream>>>(s, pred, targets, n, cols, dpred, partials);
    return add_partials(stream, s, partials, &totals[0], NULL, (double)cols);
}

extern "C" cudaError_t dp_cuda_sum_squares(cudaStream_t stream, const float *x, size_t n, float scale,
                                            dp_cuda_partial *partials, double *total)
{
    dp_shape s = dp_shape_reduce(n);
    if (n == 0)
        return cudaSuccess;
    sum_squares_kernel<<<grid_of(s), block_of(s), 0, stream>>>(s, x, n, scale, partials);
    return add_partials(stream, s, partials, total, NULL, 1.0);
}

extern "C" cudaError_t dp_cuda_count_nonfinite(cudaStream_t stream, const float *x, size_t n, dp_cuda_partial *partials, int *blocks)
{
    dp_shape s = dp_shape_reduce(n);
    *blocks = (int)s.grid_x;
    if (n == 0)
        return cudaSuccess;
    count_nonfinite_kernel<<<grid_of(s), block_of(s), 0, stream>>>(s, x, n, partials);
    return launched();
}

extern "C" cudaError_t dp_cuda_sgd_step(cudaStream_t stream, float *params, float *grads, float *velocity, size_t n,
                                        const dp_sgd_coefs *k, dp_cuda_partial *partials, double *nonfinite)
{
    dp_shape s = dp_shape_reduce(n);
    if (n == 0)
        return cudaSuccess;
    sgd_step_kernel<<<grid_of(s), block_of(s), 0, stream>>>(s, params, grads, velocity, n, k, partials);
    return add_partials(stream, s, partials, NULL, nonfinite, 1.0);
}

extern "C" cudaError_t dp_cuda_adamw_step(cudaStream_t stream, float *params, float *grads, float *exp_avg, float *exp_avg_sq, size_t n,
                                          const dp_adamw_coefs *k, dp_cuda_partial *partials, double *nonfinite)
{
    dp_shape s = dp_shape_reduce(n);
    if (n == 0)
        return cudaSuccess;
    adamw_step_kernel<<<grid_of(s), block_of(s), 0, stream>>>(s, params, grads, exp_avg, exp_avg_sq, n, k, partials);
    return add_partials(stream, s, partials, NULL, nonfinite, 1.0);
}
