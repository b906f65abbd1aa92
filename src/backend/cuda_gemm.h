/* The CUDA backend's GEMM operations (cuda_gemm.c), for cuda.c's operation table: the same
 * arguments and results as gemm, gemm_fused, round_operand, gemm_rounded and gemm_rounded_bf16 in
 * dp/backend.h. */
#ifndef DP_BACKEND_CUDA_GEMM_H
#define DP_BACKEND_CUDA_GEMM_H

#include "dp/backend.h"

#include <stddef.h>

void dp_cuda_gemm(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                  int lda, const float *b, int ldb, float beta, float *out, int ldc);
void dp_cuda_gemm_fused(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                        const float *a, int lda, const float *b, int ldb, float beta, float *out, int ldc,
                        const dp_gemm_epilogue *epilogue);
void dp_cuda_round_operand(const dp_backend *be, void *copy, const float *x, size_t n);
void dp_cuda_gemm_rounded(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                          const void *a, int lda, const void *b, int ldb, float beta, float *out, int ldc,
                          const dp_gemm_epilogue *epilogue);

void dp_cuda_gemm_rounded_bf16(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                               const void *a, int lda, const void *b, int ldb, void *out, int ldc,
                               const dp_gemm_epilogue *epilogue);

#endif
