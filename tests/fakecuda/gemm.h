/* The fake cuBLAS's column-major reference GEMM (cublas.c), which the fake cuBLASLt
 * (cublaslt.c) runs before its epilogues, so a fused GEMM's product is cublasGemmEx's to the bit. */
#ifndef DP_FAKECUDA_GEMM_H
#define DP_FAKECUDA_GEMM_H

#include <cublas_api.h>
#include <stddef.h>

typedef struct fakecuda_gemm {
    int trans_a, trans_b, m, n, k, lda, ldb, ldc;
    float (*input)(float); /* how the compute type reads an operand: exact, TF32 or bf16 */
    float alpha, beta;
    const float *a, *b;
    float *c;
    const char *a_name, *b_name, *c_name; /* for fault reports */
} fakecuda_gemm;

/* Inside a task: C = alpha op(A) op(B) + beta C, products summed in double (C not read when
 * beta is 0); returns 0, the fault recorded, when an operand is not device memory. */
int fakecuda_gemm_run(const fakecuda_gemm *g);

/* How the compute type reads FP32 operands: exactly, or rounded to TF32's or bf16's mantissa. */
float (*fakecuda_gemm_input(cublasComputeType_t compute))(float);

/* Bytes a column-major operand with `rows` x `cols` and leading dimension ld spans. */
size_t fakecuda_span_bytes(int rows, int cols, int ld);

#endif
