/* The cuBLAS calls the CUDA backend makes, reached through a table: the real library is
 * opened only when a rank opens the CUDA backend (cublas_load.c), because linking it costs
 * every process about 210 MiB of resident memory at start-up (its initialisers), CPU runs
 * included; the fake cuBLAS of the tests provides the same table. */
#ifndef DP_BACKEND_CUBLAS_API_H
#define DP_BACKEND_CUBLAS_API_H

#include <cublas_v2.h>
#include <stddef.h>

typedef struct dp_cublas_api {
    cublasStatus_t (*create)(cublasHandle_t *handle);
    cublasStatus_t (*destroy)(cublasHandle_t handle);
    cublasStatus_t (*set_stream)(cublasHandle_t handle, cudaStream_t stream);
    cublasStatus_t (*gemm_ex)(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                              int n, int k, const void *alpha, const void *a, cudaDataType a_type, int lda,
                              const void *b, cudaDataType b_type, int ldb, const void *beta, void *c,
                              cudaDataType c_type, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo);
    const char *(*status_string)(cublasStatus_t status);
} dp_cublas_api;

/* Fills api; on failure returns non-zero with why (the library or symbol missing) in text. */
int dp_cublas_load(dp_cublas_api *api, char *why, size_t size);

#endif
