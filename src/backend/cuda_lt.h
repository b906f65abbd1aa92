/* The CUDA backend's fused GEMMs: cuBLASLt matmuls with epilogues (dp_epilogue), each shape's
 * descriptors and algorithm kept once found, one workspace per context (cuda_lt.c). */
#ifndef DP_BACKEND_CUDA_LT_H
#define DP_BACKEND_CUDA_LT_H

#include "dp/backend.h"

#include <cublas_v2.h>

typedef struct dp_cuda_lt dp_cuda_lt;

/* What the fused GEMMs run on: the context's stream and compute type; rank and GPU name errors. */
typedef struct dp_cuda_lt_setup {
    const dp_backend *be; /* the context: its alloc charges the workspace to the counter */
    cudaStream_t stream;
    cublasComputeType_t compute;
    cudaDataType operands; /* A's and B's elements: CUDA_R_32F, or CUDA_R_16BF copies (C stays FP32) */
    int unfused;          /* --fuse off: every epilogue declined, nothing loaded */
    int rank, device;
} dp_cuda_lt_setup;

/* Opens cuBLASLt and asks it which epilogues it runs at this precision. A library that cannot
 * be opened leaves every epilogue declined, with the reason, rather than failing; errors are a
 * failed CUDA or cuBLASLt call (the workspace's allocation included). */
int dp_cuda_lt_open(const dp_cuda_lt_setup *setup, dp_cuda_lt **out);
/* Releases what open made; with report, the first failure is recorded and returned. */
int dp_cuda_lt_close(dp_cuda_lt *lt, int report);
/* supports() for "gemm_fused/..." (dp_epilogue_ops). */
int dp_cuda_lt_supports(const dp_cuda_lt *lt, const char *op, char *why, size_t size);
/* supports() for "gemm_rounded_bf16": 1 when the forward epilogues and DRELU also write a bf16 C. */
int dp_cuda_lt_writes_bf16(const dp_cuda_lt *lt, char *why, size_t size);
/* The epilogues it fuses, or why none, for the banner. */
void dp_cuda_lt_describe(const dp_cuda_lt *lt, char *text, size_t size);
/* gemm_fused's arguments as the backend table has them, a and b of the setup's operand type, c
 * float32 or (out_bf16: gemm_rounded_bf16, beta 0, a forward epilogue or DRELU) bf16; 0 or the recorded error. */
int dp_cuda_lt_matmul(dp_cuda_lt *lt, int trans_a, int trans_b, int m, int n, int k, float alpha, const void *a,
                      int lda, const void *b, int ldb, float beta, void *c, int out_bf16, int ldc,
                      const dp_gemm_epilogue *e);

#endif
