/* The compute interface: everything the model and optimizer do to numbers goes through one
 * of these tables, so the CUDA backend replaces the CPU one without touching model code.
 * Matrices are row-major; pointers passed to the operations live in backend memory.
 * Operations run in issue order; a device backend may still be running them when they
 * return, except where a result comes back to the host (download, the loss and count
 * results) and at synchronize. */
#ifndef DP_BACKEND_H
#define DP_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef struct dp_backend {
    const char *name;
    int host_memory; /* 1 when backend memory is host memory, so host arrays serve in place */

    /* Backend memory; alloc returns NULL (with dp_last_error set) on failure. */
    void *(*alloc)(size_t bytes, const char *what);
    void (*free)(void *ptr);
    /* Host memory the device copies fastest (page-locked under CUDA); NULL on failure. */
    void *(*alloc_host)(size_t bytes, const char *what);
    void (*free_host)(void *ptr);
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
    /* How many of x[0..n) are NaN or infinite. */
    size_t (*count_nonfinite)(const float *x, size_t n);
    /* PyTorch SGD: d = g + wd p; v = momentum v + d (v = d when momentum is 0); p -= lr v. */
    void (*sgd_update)(float *params, const float *grads, float *velocity, size_t n,
                       float lr, float momentum, float weight_decay);

    /* dst row r = src row index[r], rows of `width` 4-byte values (float features or int32
     * labels): a batch assembled from a dataset held in backend memory. */
    void (*gather_rows)(void *dst, const void *src, const size_t *index, int rows, int width);
    /* Returns once every operation issued so far has finished. */
    void (*synchronize)(void);
    /* The device and its settings, for the banner. */
    const char *(*describe)(void);
} dp_backend;

const dp_backend *dp_backend_cpu(void);

/* Sets the CPU backend's BLAS threads per rank (OpenBLAS); others ignore it. */
void dp_backend_cpu_set_threads(int threads);

typedef enum dp_device { DP_DEVICE_CPU, DP_DEVICE_CUDA, DP_DEVICE_AUTO } dp_device;

typedef struct dp_backend_request {
    dp_device device;     /* AUTO: CUDA when dp_backend_cuda_usable, decided by this rank alone */
    int share_gpu;        /* allow more ranks on a node than GPUs (they take turns) */
    int tf32;             /* GEMMs on TF32 tensor cores instead of exact FP32 */
    int rank, local_rank, local_size; /* this rank, and its place among the node's ranks */
} dp_backend_request;

/* CUDA GPUs this process sees: 0 without a CUDA build, a driver or a GPU. */
int dp_backend_gpu_count(void);

/* 1 when `request` may run on CUDA: GPUs are visible and, without share_gpu, at least as
 * many as the node's ranks. */
int dp_backend_cuda_usable(const dp_backend_request *request);

/* The backend of request->device. CUDA binds GPU local_rank % count and fails, naming the
 * problem, without a CUDA build or GPU, or with more ranks on the node than GPUs unless
 * share_gpu. One CUDA backend per process at a time; dp_backend_close releases it. */
int dp_backend_open(const dp_backend_request *request, const dp_backend **out);
void dp_backend_close(const dp_backend *be);

/* The operations return nothing, so a device backend cannot hand a failed CUDA or cuBLAS
 * call back: it records the call, file, line, rank and CUDA's message (dp_last_error) and
 * calls this handler, which must not return. dp_worker's reports the error and MPI_Aborts
 * the job; without one, the message goes to stderr and MPI_Abort ends the job, as MPI's own
 * MPI_ERRORS_ARE_FATAL does. */
typedef void (*dp_backend_fatal_fn)(void);
void dp_backend_set_fatal_handler(dp_backend_fatal_fn handler);

#endif
