/* The cuBLASLt calls of the fused GEMMs (cuda_lt.c), reached through a table as cuBLAS's are
 * (cublas_api.h): the library is opened only when a rank opens the CUDA backend, and the fake
 * cuBLASLt of the tests provides the same table. */
#ifndef DP_BACKEND_CUBLASLT_API_H
#define DP_BACKEND_CUBLASLT_API_H

#include <cublasLt.h>
#include <stddef.h>

typedef struct dp_cublaslt_api {
    cublasStatus_t (*create)(cublasLtHandle_t *handle);
    cublasStatus_t (*destroy)(cublasLtHandle_t handle);
    cublasStatus_t (*desc_create)(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute, cudaDataType_t scale);
    cublasStatus_t (*desc_destroy)(cublasLtMatmulDesc_t desc);
    cublasStatus_t (*desc_set)(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void *buf,
                               size_t bytes);
    cublasStatus_t (*layout_create)(cublasLtMatrixLayout_t *layout, cudaDataType type, uint64_t rows, uint64_t cols,
                                    int64_t ld);
    cublasStatus_t (*layout_destroy)(cublasLtMatrixLayout_t layout);
    cublasStatus_t (*pref_create)(cublasLtMatmulPreference_t *pref);
    cublasStatus_t (*pref_destroy)(cublasLtMatmulPreference_t pref);
    cublasStatus_t (*pref_set)(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                               const void *buf, size_t bytes);
    cublasStatus_t (*heuristic)(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t *results,
                                int *returned);
    cublasStatus_t (*matmul)(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha, const void *a,
                             cublasLtMatrixLayout_t a_layout, const void *b, cublasLtMatrixLayout_t b_layout,
                             const void *beta, const void *c, cublasLtMatrixLayout_t c_layout, void *d,
                             cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t *algo, void *workspace,
                             size_t workspace_bytes, cudaStream_t stream);
    const char *(*status_string)(cublasStatus_t status);
} dp_cublaslt_api;

/* Fills api; on failure returns non-zero with why (the library or symbol missing) in text. */
int dp_cublaslt_load(dp_cublaslt_api *api, char *why, size_t size);

#endif
