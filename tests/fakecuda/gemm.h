/* The fake cuBLAS's column-major reference GEMM (cublas.c), which the fake cuBLASLt
 * (cublaslt.c) runs before its epilogues, so a fused GEMM's product is cublasGemmEx's to the bit. */
#ifndef DP_FAKECUDA_GEMM_H
#define DP_FAKECUDA_GEMM_H

#include <cublas_api.h>
#include <stddef.h>

typedef struct fakecuda_gemm {
    int trans_a, trans_b, m, n, k, lda, ldb, ldc;
    cudaDataType operands; /* A's and B's elements: CUDA_R_32F or CUDA_R_16BF */
    cudaDataType out;      /* C's: CUDA_R_32F (0), or CUDA_R_16BF from cuBLASLt */
    float (*input)(float); /* how the compute type reads an operand: exact, TF32 or bf16 */
    float alpha, beta;
    const void *a, *b;
    void *c;
    const char *a_name, *b_name, *c_name; /* for fault reports */
} fakecuda_gemm;

/* Inside a task: C = alpha op(A) op(B) + beta C, products summed in double (C not read when
 * beta is 0); returns 0, the fault recorded, when an operand is not device memory. */
int fakecuda_gemm_run(const fakecuda_gemm *g);
/* Its two parts: whether A, B and C (of type out) are device memory (0: the fault recorded), and
 * the FP32 product into `into` [m, n] with leading dimension ld (host or device), summed as the
 * operands' and C's alignment picks. */
int fakecuda_gemm_check(const fakecuda_gemm *g);
void fakecuda_gemm_product(const fakecuda_gemm *g, float *into, int ld);

/* How the compute type reads FP32 operands: exactly, or rounded to TF32's or bf16's mantissa. */
float (*fakecuda_gemm_input(cublasComputeType_t compute))(float);

/* Whether cuBLAS computes with these types, as its GEMMs list them: FP32 operands at any FP32
 * compute, or bf16 operands (both) at plain FP32 compute; the output FP32 (a complaint if not). */
int fakecuda_gemm_types(const char *call, cudaDataType a, cudaDataType b, cudaDataType c,
                        cublasComputeType_t compute);

/* Element i of an operand of `type` (FP32, or bf16 widened exactly) as a float. */
float fakecuda_operand(cudaDataType type, const void *base, size_t i);

/* Bytes a column-major matrix of `type` with `rows` x `cols` and leading dimension ld spans. */
size_t fakecuda_span_bytes(cudaDataType type, int rows, int cols, int ld);

/* FAKECUDA_COUNT_GEMMS=1: each GEMM call (cuBLAS's or cuBLASLt's) counted by its operands'
 * type, and those writing a bf16 output, reported on stderr at exit, so a test can tell which
 * operands a precision sends and where it writes bf16 activations. */
void fakecuda_count_gemm(cudaDataType operands, cudaDataType out);
/* The same for each launch rounding `values` floats to bf16 (the GEMM operands' copies, and
 * --grad-dtype bf16's): launches and values, reported beside the GEMMs. */
void fakecuda_count_rounding(size_t values);

#endif
