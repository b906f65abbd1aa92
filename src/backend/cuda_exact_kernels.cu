/* --exact's accumulator on the GPU: the kernels of cuda_exact_kernels.h. What each thread
 * computes is exact_grid.h's, shared with the host emulation; this file adds the block and
 * thread indices and the largest size's maximum (an integer, so a warp's shuffles and
 * atomicMax give the same result in any order). */
#include "src/backend/cuda_exact_kernels.h"
#include "src/backend/cuda_launch.cuh"
#include "src/backend/exact_grid.h"

namespace {

__global__ void exact_add_kernel(dp_shape s, double *acc, const float *values, size_t n, int first)
{
    dp_exact_add_thread(acc, values, n, first, span_x(s));
}

__global__ void exact_to_floats_kernel(dp_shape s, dp_exact_sums sums, size_t n, float *out)
{
    dp_exact_to_floats_thread(sums, n, out, span_x(s));
}

__global__ void exact_to_digits_kernel(dp_shape s, dp_exact_sums sums, size_t n, int b, int first, int digits,
                                       int64_t *out, unsigned long long *largest)
{
    unsigned long long mine = dp_exact_digits_thread(sums, n, b, first, digits, out, span_x(s));
    if (first != 0)
        return;
    for (int offset = DP_WARP / 2; offset > 0; offset /= 2) { /* the warp's maximum: 32x fewer atomics */
        unsigned long long other = __shfl_xor_sync(0xffffffffu, mine, offset);
        mine = other > mine ? other : mine;
    }
    if (threadIdx.x % DP_WARP == 0 && mine != 0)
        atomicMax(largest, mine);
}

__global__ void exact_from_digits_kernel(dp_shape s, const int64_t *digits, size_t n, int b, int count, float *out)
{
    dp_exact_from_digits_thread(digits, n, b, count, out, span_x(s));
}

} // namespace

extern "C" cudaError_t dp_cuda_exact_add(cudaStream_t stream, double *acc, const float *values, size_t n, int first)
{
    LAUNCH(n, dp_shape_flat(n), exact_add_kernel, acc, values, n, first);
}

extern "C" cudaError_t dp_cuda_exact_to_floats(cudaStream_t stream, const double *acc, const float *last, size_t n,
                                               float *out)
{
    LAUNCH(n, dp_shape_flat(n), exact_to_floats_kernel, dp_exact_sums{acc, last}, n, out);
}

extern "C" cudaError_t dp_cuda_exact_to_digits(cudaStream_t stream, const double *acc, const float *last, size_t n,
                                               int digit_bits, int first, int digits, int64_t *out, uint64_t *largest)
{
    if (first == 0) {
        cudaError_t e = cudaMemsetAsync(largest, 0, sizeof *largest, stream);
        if (e != cudaSuccess)
            return e;
    }
    LAUNCH(n, dp_shape_flat(n), exact_to_digits_kernel, dp_exact_sums{acc, last}, n, digit_bits, first, digits, out,
           (unsigned long long *)largest);
}

extern "C" cudaError_t dp_cuda_exact_from_digits(cudaStream_t stream, const int64_t *digits, size_t n, int digit_bits,
                                                 int count, float *out)
{
    LAUNCH(n, dp_shape_flat(n), exact_from_digits_kernel, digits, n, digit_bits, count, out);
}
