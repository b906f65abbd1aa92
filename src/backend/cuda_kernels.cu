/* The GPU backend's kernels: everything but the GEMMs (cuBLAS). Elementwise results match the
 * CPU backend bit for bit: products it rounds on their own use __fmul_rn, which nvcc never
 * fuses into an FMA. Reductions use a grid that depends only on the problem size and fixed
 * summation trees (no floating-point atomics), so they are deterministic. */
#include "src/backend/cuda_kernels.h"

#include <math.h>

namespace {

constexpr int THREADS = 256;               /* threads per block of the 1-D and row kernels */
constexpr int WARP = 32;
constexpr int WARPS = THREADS / WARP;
constexpr unsigned ALL_LANES = 0xffffffffu;
constexpr unsigned MAX_GRID = 1u << 16;    /* grid-stride loops cover any size beyond this */
constexpr int ROW_TILE = 32;               /* bias_grad: rows summed in parallel per column */

unsigned blocks_for(size_t items, size_t per_block, unsigned cap)
{
    size_t blocks = (items + per_block - 1) / per_block;
    return (unsigned)(blocks < cap ? blocks : cap);
}

/* Grid of (column blocks, row blocks) for kernels that walk a [rows, cols] matrix by rows. */
dim3 row_grid(int rows, int cols)
{
    return dim3(blocks_for((size_t)cols, THREADS, 64), blocks_for((size_t)rows, 1, 65535));
}

__device__ size_t first_index()
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ size_t grid_stride()
{
    return (size_t)gridDim.x * blockDim.x;
}

/* Sum of v over the block, in a fixed tree; every thread gets the result. */
template <typename T> __device__ T block_sum(T v)
{
    __shared__ T lanes[THREADS];
    lanes[threadIdx.x] = v;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half)
            lanes[threadIdx.x] += lanes[threadIdx.x + half];
        __syncthreads();
    }
    T total = lanes[0];
    __syncthreads();
    return total;
}

__global__ void bias_act_kernel(float *y, const float *bias, int rows, int cols, int relu)
{
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        float *row = y + (size_t)r * cols;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
            float v = row[c] + bias[c];
            row[c] = relu && v < 0.0f ? 0.0f : v;
        }
    }
}

__global__ void relu_backward_kernel(float *dy, const float *y, size_t n)
{
    for (size_t i = first_index(); i < n; i += grid_stride())
        if (y[i] <= 0.0f)
            dy[i] = 0.0f;
}

/* Block (x: 32 columns, y: ROW_TILE row lanes); each lane sums every ROW_TILE-th row of its
 * column, then the lanes are added in order. */
__global__ void bias_grad_kernel(const float *dy, int rows, int cols, float *db)
{
    __shared__ float lanes[ROW_TILE][WARP + 1];
    for (int first = blockIdx.x * WARP; first < cols; first += gridDim.x * WARP) {
        int c = first + threadIdx.x;
        float sum = 0.0f;
        if (c < cols)
            for (int r = threadIdx.y; r < rows; r += ROW_TILE)
                sum += dy[(size_t)r * cols + c];
        lanes[threadIdx.y][threadIdx.x] = sum;
        __syncthreads();
        if (threadIdx.y == 0 && c < cols) {
            float total = 0.0f;
            for (int lane = 0; lane < ROW_TILE; lane++)
                total += lanes[lane][threadIdx.x];
            db[c] += total;
        }
        __syncthreads();
    }
}

__global__ void scale_kernel(float *x, size_t n, float alpha)
{
    for (size_t i = first_index(); i < n; i += grid_stride())
        x[i] = __fmul_rn(x[i], alpha);
}

__global__ void sgd_kernel(float *params, const float *grads, float *velocity, size_t n,
                           float lr, float momentum, float weight_decay)
{
    for (size_t i = first_index(); i < n; i += grid_stride()) {
        float d = __fadd_rn(grads[i], __fmul_rn(weight_decay, params[i]));
        if (momentum != 0.0f) {
            velocity[i] = __fadd_rn(__fmul_rn(momentum, velocity[i]), d);
            d = velocity[i];
        }
        params[i] = __fsub_rn(params[i], __fmul_rn(lr, d));
    }
}

/* 4-byte words, so one kernel moves float features and int32 labels alike. */
__global__ void gather_rows_kernel(uint32_t *dst, const uint32_t *src, const size_t *index,
                                   int rows, int width)
{
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        const uint32_t *from = src + index[r] * (size_t)width;
        uint32_t *to = dst + (size_t)r * width;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < width; c += gridDim.x * blockDim.x)
            to[c] = from[c];
    }
}

/* The first column holding the row's largest value (the CPU backend's argmax), in every lane. */
__device__ void row_argmax(const float *z, int cols, int lane, float *best_value, int *best)
{
    float v = lane < cols ? z[lane] : -INFINITY;
    int at = lane < cols ? lane : cols;
    for (int c = lane + WARP; c < cols; c += WARP)
        if (z[c] > v) {
            v = z[c];
            at = c;
        }
    for (int offset = WARP / 2; offset > 0; offset /= 2) {
        float other = __shfl_xor_sync(ALL_LANES, v, offset);
        int other_at = __shfl_xor_sync(ALL_LANES, at, offset);
        if (other > v || (other == v && other_at < at)) {
            v = other;
            at = other_at;
        }
    }
    /* Lane 0's answer for all: with NaNs the lanes could disagree. */
    *best_value = __shfl_sync(ALL_LANES, v, 0);
    *best = __shfl_sync(ALL_LANES, at, 0);
}

__device__ double warp_sum(double v)
{
    for (int offset = WARP / 2; offset > 0; offset /= 2)
        v += __shfl_xor_sync(ALL_LANES, v, offset);
    return __shfl_sync(ALL_LANES, v, 0);
}

/* One warp per row, in double as the CPU backend: loss = log sum exp(z - max) - (z_label - max). */
__global__ void softmax_xent_kernel(const float *logits, const int32_t *labels, int rows, int cols,
                                    float *dlogits, dp_cuda_partial *partials)
{
    __shared__ double warp_loss[WARPS];
    __shared__ unsigned long long warp_correct[WARPS];
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    double loss = 0.0;
    unsigned long long correct = 0;
    for (int r = blockIdx.x * WARPS + warp; r < rows; r += gridDim.x * WARPS) {
        const float *z = logits + (size_t)r * cols;
        int label = labels[r], best;
        float top;
        row_argmax(z, cols, lane, &top, &best);
        double exps = 0.0;
        for (int c = lane; c < cols; c += WARP)
            exps += exp((double)z[c] - top);
        double sum = warp_sum(exps);
        loss += log(sum) - ((double)z[label] - top);
        correct += best == label;
        if (dlogits)
            for (int c = lane; c < cols; c += WARP)
                dlogits[(size_t)r * cols + c] =
                    (float)(exp((double)z[c] - top) / sum) - (c == label ? 1.0f : 0.0f);
    }
    if (lane == 0) {
        warp_loss[warp] = loss;
        warp_correct[warp] = correct;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        dp_cuda_partial p = {0.0, 0};
        for (int w = 0; w < WARPS; w++) {
            p.sum += warp_loss[w];
            p.count += warp_correct[w];
        }
        partials[blockIdx.x] = p;
    }
}

__global__ void mse_kernel(const float *pred, const float *targets, size_t n, int cols,
                           float *dpred, dp_cuda_partial *partials)
{
    double squares = 0.0;
    for (size_t i = first_index(); i < n; i += grid_stride()) {
        float diff = pred[i] - targets[i];
        squares += (double)diff * diff;
        if (dpred)
            dpred[i] = __fmul_rn(2.0f, diff) / (float)cols;
    }
    double total = block_sum(squares);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = dp_cuda_partial{total, 0};
}

__global__ void count_nonfinite_kernel(const float *x, size_t n, dp_cuda_partial *partials)
{
    unsigned long long bad = 0;
    for (size_t i = first_index(); i < n; i += grid_stride())
        bad += !isfinite(x[i]);
    unsigned long long total = block_sum(bad);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = dp_cuda_partial{0.0, total};
}

/* A launch's status: configuration errors now, faults at the next synchronising call. */
cudaError_t launched()
{
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t dp_cuda_bias_act(float *y, const float *bias, int rows, int cols, int relu)
{
    if (rows == 0 || cols == 0)
        return cudaSuccess;
    bias_act_kernel<<<row_grid(rows, cols), THREADS>>>(y, bias, rows, cols, relu);
    return launched();
}

extern "C" cudaError_t dp_cuda_relu_backward(float *dy, const float *y, size_t n)
{
    if (n == 0)
        return cudaSuccess;
    relu_backward_kernel<<<blocks_for(n, THREADS, MAX_GRID), THREADS>>>(dy, y, n);
    return launched();
}

extern "C" cudaError_t dp_cuda_bias_grad(const float *dy, int rows, int cols, float *db)
{
    if (rows == 0 || cols == 0)
        return cudaSuccess;
    bias_grad_kernel<<<blocks_for((size_t)cols, WARP, 65535), dim3(WARP, ROW_TILE)>>>(dy, rows, cols, db);
    return launched();
}

extern "C" cudaError_t dp_cuda_scale(float *x, size_t n, float alpha)
{
    if (n == 0)
        return cudaSuccess;
    scale_kernel<<<blocks_for(n, THREADS, MAX_GRID), THREADS>>>(x, n, alpha);
    return launched();
}

extern "C" cudaError_t dp_cuda_sgd_update(float *params, const float *grads, float *velocity,
                                          size_t n, float lr, float momentum, float weight_decay)
{
    if (n == 0)
        return cudaSuccess;
    sgd_kernel<<<blocks_for(n, THREADS, MAX_GRID), THREADS>>>(params, grads, velocity, n, lr,
                                                               momentum, weight_decay);
    return launched();
}

extern "C" cudaError_t dp_cuda_gather_rows(void *dst, const void *src, const size_t *index,
                                           int rows, int width)
{
    if (rows == 0 || width == 0)
        return cudaSuccess;
    gather_rows_kernel<<<row_grid(rows, width), THREADS>>>(
        static_cast<uint32_t *>(dst), static_cast<const uint32_t *>(src), index, rows, width);
    return launched();
}

extern "C" cudaError_t dp_cuda_softmax_xent(const float *logits, const int32_t *labels, int rows,
                                            int cols, float *dlogits, dp_cuda_partial *partials,
                                            int *blocks)
{
    *blocks = (int)blocks_for((size_t)rows, WARPS, DP_CUDA_MAX_BLOCKS);
    if (rows == 0)
        return cudaSuccess;
    softmax_xent_kernel<<<*blocks, THREADS>>>(logits, labels, rows, cols, dlogits, partials);
    return launched();
}

extern "C" cudaError_t dp_cuda_mse(const float *pred, const float *targets, size_t n, int cols,
                                   float *dpred, dp_cuda_partial *partials, int *blocks)
{
    *blocks = (int)blocks_for(n, THREADS, DP_CUDA_MAX_BLOCKS);
    if (n == 0)
        return cudaSuccess;
    mse_kernel<<<*blocks, THREADS>>>(pred, targets, n, cols, dpred, partials);
    return launched();
}

extern "C" cudaError_t dp_cuda_count_nonfinite(const float *x, size_t n, dp_cuda_partial *partials,
                                               int *blocks)
{
    *blocks = (int)blocks_for(n, THREADS, DP_CUDA_MAX_BLOCKS);
    if (n == 0)
        return cudaSuccess;
    count_nonfinite_kernel<<<*blocks, THREADS>>>(x, n, partials);
    return launched();
}
