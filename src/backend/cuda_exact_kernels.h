/* The CUDA kernels of --exact's accumulator in device memory (cuda_exact_kernels.cu), callable
 * from C (cuda.c); in the fake-CUDA test build the same launchers run on the host
 * (tests/fakecuda/exact_kernels.c). Each queues its kernel on `stream` and returns the
 * launch's status; pointers are device memory. The arguments are include/dp/backend.h's
 * exact_* operations'. */
#ifndef DP_CUDA_EXACT_KERNELS_H
#define DP_CUDA_EXACT_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

cudaError_t dp_cuda_exact_add(cudaStream_t stream, double *acc, const float *values, size_t n, int first);
cudaError_t dp_cuda_exact_to_floats(cudaStream_t stream, const double *acc, const float *last, size_t n, float *out);
/* From digit 0, *largest (zeroed here first) gets the largest size's bits by atomicMax. */
cudaError_t dp_cuda_exact_to_digits(cudaStream_t stream, const double *acc, const float *last, size_t n, int digit_bits,
                                    int first, int digits, int64_t *out, uint64_t *largest);
cudaError_t dp_cuda_exact_from_digits(cudaStream_t stream, const int64_t *digits, size_t n, int digit_bits, int count,
                                      float *out);

#ifdef __cplusplus
}
#endif

#endif
