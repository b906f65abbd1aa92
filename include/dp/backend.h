/* The compute interface: everything the model and optimizer do to numbers goes through one
 * of these tables, so a CUDA backend can replace the CPU one without touching model code.
 * Matrices are row-major; pointers passed to the operations live in backend memory. */
#ifndef DP_BACKEND_H
#define DP_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef struct dp_backend {
    const char *name;

    /* Backend memory; alloc returns NULL (with dp_last_error set) on failure. */
    void *(*alloc)(size_t bytes, const char *what);
    void (*free)(void *ptr);
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    void (*download)(void *host_dst, const void *src, size_t bytes);
    void (*zero)(float *x, size_t n);

    /* C = alpha * op(A) op(B) + beta * C with op(A) [m, k], op(B) [k, n], C [m, n]. */
    void (*gemm)(int trans_a, int trans_b, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);

    /* y[r, c] += bias[c], then max(0, y) when relu. */
    void (*bias_act_forward)(float *y, const float *bias, int rows, int cols, int relu);
    /* dy[i] = 0 where the ReLU output y[i] was 0. */
    void (*relu_backward)(float *dy, const float *y, size_t n);
    /* db[c] += sum over rows of dy[r, c]. */
    void (*bias_grad)(const float *dy, int rows, int cols, float *db);

    /* Summed (not averaged) softmax cross-entropy over rows; dlogits = softmax - onehot
     * (skipped when NULL); *loss_sum and *correct (argmax == label) are accumulated into. */
    void (*softmax_xent)(const float *logits, const int32_t *labels, int rows, int cols,
                         float *dlogits, double *loss_sum, long *correct);
    /* Per-sample loss mean_c (pred - target)^2 summed over rows, as PyTorch's MSELoss once
     * divided by the batch; dpred = 2 (pred - target) / cols (skipped when NULL). */
    void (*mse)(const float *pred, const float *targets, int rows, int cols,
                float *dpred, double *loss_sum);

    void (*scale)(float *x, size_t n, float alpha);
    /* PyTorch SGD: d = g + wd p; v = momentum v + d (v = d when momentum is 0); p -= lr v. */
    void (*sgd_update)(float *params, const float *grads, float *velocity, size_t n,
                       float lr, float momentum, float weight_decay);
} dp_backend;

const dp_backend *dp_backend_cpu(void);

/* Sets the CPU backend's BLAS threads per rank (OpenBLAS); others ignore it. */
void dp_backend_cpu_set_threads(int threads);

#endif
