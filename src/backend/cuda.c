/* The CUDA backend: cuBLAS for the GEMMs, the kernels of cuda_kernels.cu for the rest, one GPU
 * per process. Everything runs on the legacy default stream, so operations execute in issue
 * order and an NCCL all-reduce queued on the same stream follows backward without events. */
#include "config.h"

#include "dp/error.h"
#include "src/backend/cuda_kernels.h"
#include "src/backend/device.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct cuda_state {
    int open;
    int rank, device, gpus;
    cublasHandle_t blas;
    cublasComputeType_t compute;    /* exact FP32, or TF32 tensor cores with --tf32 */
    dp_cuda_partial *partials;      /* DP_CUDA_MAX_BLOCKS reduction results, device */
    dp_cuda_partial *host_partials; /* where they are read back, page-locked */
    char description[256];
} cuda = {.device = -1};

static const char *visible_devices(void)
{
    const char *list = getenv("CUDA_VISIBLE_DEVICES");
    return list ? list : "(unset)";
}

/* 0, or the error of a failed call recorded with the call, file, line, rank and CUDA's message;
 * CUDA's last error is cleared so that the next launch check is not blamed for this one. */
static int cuda_status(cudaError_t e, const char *call, const char *file, int line)
{
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    return dp_fail(DP_EDEVICE, "%s failed at %s:%d on rank %d (GPU %d): %s: %s", call, file, line,
                   cuda.rank, cuda.device, cudaGetErrorName(e), cudaGetErrorString(e));
}

static int blas_status(cublasStatus_t s, const char *call, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    return dp_fail(DP_EDEVICE, "%s failed at %s:%d on rank %d (GPU %d): %s", call, file, line,
                   cuda.rank, cuda.device, cublasGetStatusString(s));
}

#define CUDA_CALL(call) cuda_status((call), #call, __FILE__, __LINE__)
#define BLAS_CALL(call) blas_status((call), #call, __FILE__, __LINE__)
/* TRY returns the error (while opening); MUST is for the operations, which cannot. */
#define TRY(checked)                                                         \
    do {                                                                     \
        int status_ = (checked);                                             \
        if (status_)                                                         \
            return status_;                                                  \
    } while (0)
#define MUST(checked)                                                        \
    do {                                                                     \
        if (checked)                                                         \
            dp_backend_fatal();                                              \
    } while (0)

static void *cuda_alloc(size_t bytes, const char *what)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaSuccess)
        return p;
    (void)cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess)
        (void)cudaGetLastError();
    dp_fail(DP_ENOMEM, "cudaMalloc of %zu bytes for %s failed on rank %d (GPU %d, %zu of %zu MiB free): %s",
            bytes, what, cuda.rank, cuda.device, free_bytes >> 20, total_bytes >> 20, cudaGetErrorString(e));
    return NULL;
}

static void *cuda_alloc_host(size_t bytes, const char *what)
{
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e == cudaSuccess)
        return p;
    (void)cudaGetLastError();
    dp_fail(DP_ENOMEM, "cudaMallocHost of %zu page-locked bytes for %s failed on rank %d: %s", bytes,
            what, cuda.rank, cudaGetErrorString(e));
    return NULL;
}

static void cuda_free(void *ptr)
{
    MUST(CUDA_CALL(cudaFree(ptr)));
}

static void cuda_free_host(void *ptr)
{
    MUST(CUDA_CALL(cudaFreeHost(ptr)));
}

static void cuda_upload(void *dst, const void *host_src, size_t bytes)
{
    if (bytes)
        MUST(CUDA_CALL(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice)));
}

static void cuda_download(void *host_dst, const void *src, size_t bytes)
{
    if (bytes)
        MUST(CUDA_CALL(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost)));
}

static void cuda_zero(float *x, size_t n)
{
    if (n)
        MUST(CUDA_CALL(cudaMemsetAsync(x, 0, n * sizeof *x, 0)));
}

static void cuda_gemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                      int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m == 0 || n == 0)
        return;
    /* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS reads each
     * row-major matrix as its transpose, so swapping the operands (flags unchanged) needs no copy. */
    MUST(BLAS_CALL(cublasGemmEx(cuda.blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                           n, m, k, &alpha, b, CUDA_R_32F, ldb, a, CUDA_R_32F, lda, &beta, c, CUDA_R_32F,
                           ldc, cuda.compute, CUBLAS_GEMM_DEFAULT)));
}

static void cuda_bias_act_forward(float *y, const float *bias, int rows, int cols, int relu)
{
    MUST(CUDA_CALL(dp_cuda_bias_act(y, bias, rows, cols, relu)));
}

static void cuda_relu_backward(float *dy, const float *y, size_t n)
{
    MUST(CUDA_CALL(dp_cuda_relu_backward(dy, y, n)));
}

static void cuda_bias_grad(const float *dy, int rows, int cols, float *db)
{
    MUST(CUDA_CALL(dp_cuda_bias_grad(dy, rows, cols, db)));
}

/* The reduction's per-block results, copied to the host (this waits for the kernel). */
static const dp_cuda_partial *read_partials(int blocks)
{
    if (blocks)
        MUST(CUDA_CALL(cudaMemcpy(cuda.host_partials, cuda.partials, (size_t)blocks * sizeof *cuda.partials,
                             cudaMemcpyDeviceToHost)));
    return cuda.host_partials;
}

static void cuda_softmax_xent(const float *logits, const int32_t *labels, int rows, int cols,
                              float *dlogits, double *loss_sum, long *correct)
{
    int blocks = 0;
    MUST(CUDA_CALL(dp_cuda_softmax_xent(logits, labels, rows, cols, dlogits, cuda.partials, &blocks)));
    const dp_cuda_partial *p = read_partials(blocks);
    for (int i = 0; i < blocks; i++) {
        *loss_sum += p[i].sum;
        *correct += (long)p[i].count;
    }
}

static void cuda_mse(const float *pred, const float *targets, int rows, int cols, float *dpred,
                     double *loss_sum)
{
    int blocks = 0;
    MUST(CUDA_CALL(dp_cuda_mse(pred, targets, (size_t)rows * cols, cols, dpred, cuda.partials, &blocks)));
    const dp_cuda_partial *p = read_partials(blocks);
    double squares = 0.0;
    for (int i = 0; i < blocks; i++)
        squares += p[i].sum;
    *loss_sum += squares / cols;
}

static void cuda_scale(float *x, size_t n, float alpha)
{
    MUST(CUDA_CALL(dp_cuda_scale(x, n, alpha)));
}

static size_t cuda_count_nonfinite(const float *x, size_t n)
{
    int blocks = 0;
    MUST(CUDA_CALL(dp_cuda_count_nonfinite(x, n, cuda.partials, &blocks)));
    const dp_cuda_partial *p = read_partials(blocks);
    size_t bad = 0;
    for (int i = 0; i < blocks; i++)
        bad += (size_t)p[i].count;
    return bad;
}

static void cuda_sgd_update(float *params, const float *grads, float *velocity, size_t n, float lr,
                            float momentum, float weight_decay)
{
    MUST(CUDA_CALL(dp_cuda_sgd_update(params, grads, velocity, n, lr, momentum, weight_decay)));
}

static void cuda_gather_rows(void *dst, const void *src, const size_t *index, int rows, int width)
{
    MUST(CUDA_CALL(dp_cuda_gather_rows(dst, src, index, rows, width)));
}

static void cuda_synchronize(void)
{
    MUST(CUDA_CALL(cudaDeviceSynchronize()));
}

static const char *cuda_describe(void)
{
    return cuda.description;
}

static const dp_backend cuda_backend = {
    .name = "cuda",
    .host_memory = 0,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .alloc_host = cuda_alloc_host,
    .free_host = cuda_free_host,
    .upload = cuda_upload,
    .download = cuda_download,
    .zero = cuda_zero,
    .gemm = cuda_gemm,
    .bias_act_forward = cuda_bias_act_forward,
    .relu_backward = cuda_relu_backward,
    .bias_grad = cuda_bias_grad,
    .softmax_xent = cuda_softmax_xent,
    .mse = cuda_mse,
    .scale = cuda_scale,
    .count_nonfinite = cuda_count_nonfinite,
    .sgd_update = cuda_sgd_update,
    .gather_rows = cuda_gather_rows,
    .synchronize = cuda_synchronize,
    .describe = cuda_describe,
};

int dp_cuda_gpu_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess)
        return count;
    (void)cudaGetLastError();
    return 0;
}

static int bind_device(const dp_backend_request *request)
{
    cudaError_t e = cudaGetDeviceCount(&cuda.gpus);
    if (e != cudaSuccess || cuda.gpus == 0) {
        (void)cudaGetLastError();
        return dp_fail(DP_EDEVICE, "--device cuda: rank %d sees no CUDA GPU (cudaGetDeviceCount: %s; CUDA_VISIBLE_DEVICES=%s)",
                       request->rank, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", visible_devices());
    }
    if (request->local_size > cuda.gpus && !request->share_gpu)
        return dp_fail(DP_EINVAL, "--device cuda: %d ranks on rank %d's node but %d GPU%s visible (CUDA_VISIBLE_DEVICES=%s): "
                       "start one rank per GPU, or add --share-gpu to let ranks take turns on a GPU",
                       request->local_size, request->rank, cuda.gpus, cuda.gpus == 1 ? "" : "s", visible_devices());
    cuda.device = request->local_rank % cuda.gpus;
    TRY(CUDA_CALL(cudaSetDevice(cuda.device)));
    return 0;
}

static int describe_device(int tf32)
{
    struct cudaDeviceProp prop;
    TRY(CUDA_CALL(cudaGetDeviceProperties(&prop, cuda.device)));
    snprintf(cuda.description, sizeof cuda.description, "cuda: GPU %d of %d, %.128s (sm_%d%d, %zu GiB), %s GEMMs",
             cuda.device, cuda.gpus, prop.name, prop.major, prop.minor,
             (size_t)(prop.totalGlobalMem >> 30), tf32 ? "TF32 tensor-core" : "exact FP32");
    return 0;
}

static int create_resources(int tf32)
{
    TRY(BLAS_CALL(cublasCreate(&cuda.blas)));
    TRY(CUDA_CALL(cudaMalloc((void **)&cuda.partials, DP_CUDA_MAX_BLOCKS * sizeof *cuda.partials)));
    TRY(CUDA_CALL(cudaMallocHost((void **)&cuda.host_partials, DP_CUDA_MAX_BLOCKS * sizeof *cuda.host_partials)));
    cuda.compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    return describe_device(tf32);
}

static void release_resources(void)
{
    if (cuda.blas)
        MUST(BLAS_CALL(cublasDestroy(cuda.blas)));
    if (cuda.partials)
        MUST(CUDA_CALL(cudaFree(cuda.partials)));
    if (cuda.host_partials)
        MUST(CUDA_CALL(cudaFreeHost(cuda.host_partials)));
    cuda.blas = NULL;
    cuda.partials = cuda.host_partials = NULL;
    cuda.open = 0;
}

int dp_cuda_open(const dp_backend_request *request, const dp_backend **out)
{
    if (cuda.open)
        return dp_fail(DP_EINVAL, "the CUDA backend is already open in this process (one per process)");
    memset(&cuda, 0, sizeof cuda);
    cuda.rank = request->rank;
    cuda.device = -1;
    int status = bind_device(request);
    if (!status)
        status = create_resources(request->tf32);
    if (status) {
        release_resources();
        return status;
    }
    cuda.open = 1;
    *out = &cuda_backend;
    return 0;
}

void dp_cuda_close(void)
{
    release_resources();
}
