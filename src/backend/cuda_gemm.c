/* The CUDA backend's GEMMs: cuBLAS's cublasGemmEx, or cuBLASLt's matmul with an epilogue
 * (cuda_lt.c), on operands as the context's precision has them: the caller's floats, or at
 * --precision bf16 their bf16 copies (cuda_operands.c), rounded here per GEMM or once by a
 * caller that keeps them (round_operand, gemm_rounded), which may also have the output written
 * in bf16 (gemm_rounded_bf16). cuda.c's table points at these. */
#include "config.h"

#include "src/backend/cuda_gemm.h"

#include "src/backend/cuda_context.h"
#include "src/backend/fatal.h"

/* A GEMM's operands as cuBLAS reads them: the caller's floats, or at bf16 their copies rounded
 * to nearest even, each spanning what its leading dimension does (6 bytes moved per element:
 * 4 read, 2 written; the GEMM then reads 2 instead of 4). */
static void gemm_operands(cuda_context *c, int trans_a, int trans_b, int m, int n, int k, const float *a, int lda,
                          const float *b, int ldb, const void **a_out, const void **b_out)
{
    *a_out = a;
    *b_out = b;
    if (c->operands == CUDA_R_32F)
        return;
    size_t a_span = dp_gemm_operand_span(trans_a ? k : m, trans_a ? m : k, lda);
    size_t b_span = dp_gemm_operand_span(trans_b ? n : k, trans_b ? k : n, ldb);
    uint16_t *a16 = NULL, *b16 = NULL;
    MUST(dp_cuda_bf16_operands_place(&c->bf16, c->capturing, a_span, b_span, &a16, &b16));
    MUST(LAUNCH(c, dp_cuda_to_bf16, a16, a, a_span));
    MUST(LAUNCH(c, dp_cuda_to_bf16, b16, b, b_span));
    *a_out = a16;
    *b_out = b16;
}

/* One GEMM on operands as cuBLAS reads them: cublasGemmEx (epilogue NULL) or cuBLASLt with it,
 * which also writes a bf16 out (out_bf16). */
static void run_gemm(const cuda_context *c, int trans_a, int trans_b, int m, int n, int k, float alpha,
                     const void *a, int lda, const void *b, int ldb, float beta, void *out, int out_bf16, int ldc,
                     const dp_gemm_epilogue *epilogue)
{
    if (epilogue) {
        MUST(dp_cuda_lt_matmul(c->lt, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, out, out_bf16, ldc,
                               epilogue));
    } else {
        if (m == 0 || n == 0)
            return;
        /* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS reads each
         * row-major matrix as its transpose, so swapping the operands (flags unchanged) needs no copy. */
        MUST(BLAS_CALL(c, "cublasGemmEx",
                       c->blas_api.gemm_ex(c->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                           trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, c->operands, ldb,
                                           a, c->operands, lda, &beta, out, CUDA_R_32F, ldc, c->compute,
                                           CUBLAS_GEMM_DEFAULT)));
    }
    if (c->check_launches)
        MUST(dp_cuda_launch_status(c, cudaSuccess, epilogue ? "cublasLtMatmul's kernels" : "cublasGemmEx's kernels",
                                   __FILE__, __LINE__));
}

void dp_cuda_gemm(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                  int lda, const float *b, int ldb, float beta, float *out, int ldc)
{
    cuda_context *c = ctx_of(be);
    if (m == 0 || n == 0)
        return;
    const void *a_in, *b_in;
    gemm_operands(c, trans_a, trans_b, m, n, k, a, lda, b, ldb, &a_in, &b_in);
    run_gemm(c, trans_a, trans_b, m, n, k, alpha, a_in, lda, b_in, ldb, beta, out, 0, ldc, NULL);
}

void dp_cuda_gemm_fused(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                        const float *a, int lda, const float *b, int ldb, float beta, float *out, int ldc,
                        const dp_gemm_epilogue *epilogue)
{
    cuda_context *c = ctx_of(be);
    const void *a_in = a, *b_in = b;
    if (m > 0 && n > 0 && k > 0)
        gemm_operands(c, trans_a, trans_b, m, n, k, a, lda, b, ldb, &a_in, &b_in);
    run_gemm(c, trans_a, trans_b, m, n, k, alpha, a_in, lda, b_in, ldb, beta, out, 0, ldc, epilogue);
}

/* What gemm_operands does to one operand, for a caller that reads the copy in several GEMMs. */
void dp_cuda_round_operand(const dp_backend *be, void *copy, const float *x, size_t n)
{
    MUST(LAUNCH(ctx_of(be), dp_cuda_to_bf16, copy, x, n));
}

void dp_cuda_gemm_rounded(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                          const void *a, int lda, const void *b, int ldb, float beta, float *out, int ldc,
                          const dp_gemm_epilogue *epilogue)
{
    run_gemm(ctx_of(be), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, out, 0, ldc, epilogue);
}

/* A bf16 activation: cuBLASLt's D in bf16, always with an epilogue (DEFAULT for BIAS without a bias). */
void dp_cuda_gemm_rounded_bf16(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                               const void *a, int lda, const void *b, int ldb, void *c, int ldc,
                               const dp_gemm_epilogue *epilogue)
{
    run_gemm(ctx_of(be), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, 1, ldc, epilogue);
}
