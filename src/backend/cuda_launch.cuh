/* What every kernel file of the CUDA backend (cuda_kernels.cu, cuda_reductions.cu,
 * cuda_exact_kernels.cu) shares: a launch shape of kernel_grid.h as CUDA's grid and block, the
 * span of it one thread owns, a launch's status, and LAUNCH. Inline, so a file that uses some of them compiles the rest to nothing. */
#ifndef DP_BACKEND_CUDA_LAUNCH_CUH
#define DP_BACKEND_CUDA_LAUNCH_CUH

#include "src/backend/kernel_grid.h"

namespace {

inline dim3 grid_of(dp_shape s)
{
    return dim3(s.grid_x, s.grid_y);
}

inline dim3 block_of(dp_shape s)
{
    return dim3(s.block_x, s.block_y);
}

/* This thread's span along x / y of the launch shape s. */
__device__ inline dp_span span_x(dp_shape s)
{
    return dp_span_x(s, blockIdx.x, threadIdx.x);
}

__device__ inline dp_span span_y(dp_shape s)
{
    return dp_span_y(s, blockIdx.y, threadIdx.y);
}

/* A launch's status: configuration errors now, faults at the next synchronising call. */
inline cudaError_t launched()
{
    return cudaGetLastError();
}

} // namespace

/* Launches kernel on shape s, on the backend's stream (a launcher's `stream`), when it has
 * work (n > 0), and returns the launch's status. */
#define LAUNCH(n, s, kernel, ...)                                                                  \
    do {                                                                                           \
        if ((n) == 0)                                                                              \
            return cudaSuccess;                                                                    \
        kernel<<<grid_of(s), block_of(s), 0, stream>>>(s, __VA_ARGS__);                            \
        return launched();                                                                         \
    } while (0)

#endif
