/* The CUDA kernels of the GPU backend (cuda_kernels.cu), callable from C (cuda.c). Each
 * launcher queues its kernel on the legacy default stream and returns the launch's status;
 * pointers are device memory. Reductions leave one dp_cuda_partial per block in `partials`
 * (at most DP_CUDA_MAX_BLOCKS) and report the block count; the caller adds them in block
 * order, so a result is bitwise the same run to run. */
#ifndef DP_CUDA_KERNELS_H
#define DP_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DP_CUDA_MAX_BLOCKS 1024

typedef struct dp_cuda_partial {
    double sum;
    unsigned long long count;
} dp_cuda_partial;

/* The operations of include/dp/backend.h, same arguments and results. */
cudaError_t dp_cuda_bias_act(float *y, const float *bias, int rows, int cols, int relu);
cudaError_t dp_cuda_relu_backward(float *dy, const float *y, size_t n);
cudaError_t dp_cuda_bias_grad(const float *dy, int rows, int cols, float *db);
cudaError_t dp_cuda_scale(float *x, size_t n, float alpha);
cudaError_t dp_cuda_sgd_update(float *params, const float *grads, float *velocity, size_t n,
                               float lr, float momentum, float weight_decay);
cudaError_t dp_cuda_gather_rows(void *dst, const void *src, const size_t *index, int rows,
                                int width);

/* Per block: sum = the rows' cross-entropy, count = rows whose argmax is the label. */
cudaError_t dp_cuda_softmax_xent(const float *logits, const int32_t *labels, int rows, int cols,
                                 float *dlogits, dp_cuda_partial *partials, int *blocks);
/* Per block: sum = the elements' squared differences (the caller divides by cols). */
cudaError_t dp_cuda_mse(const float *pred, const float *targets, size_t n, int cols,
                        float *dpred, dp_cuda_partial *partials, int *blocks);
/* Per block: count = NaN or infinite elements. */
cudaError_t dp_cuda_count_nonfinite(const float *x, size_t n, dp_cuda_partial *partials,
                                    int *blocks);

#ifdef __cplusplus
}
#endif

#endif
