/* The fake cuBLAS: handles and cublasGemmEx as a column-major reference. Arguments are checked
 * when called, as cuBLAS does (and with its status codes); the product runs on the queue, so
 * its result is visible only after a synchronisation point. FP32 products are summed in
 * double; TF32 compute rounds the inputs to 10 mantissa bits first, as the tensor cores do;
 * bf16 operands (CUDA_R_16BF) are widened exactly, so they give FAST_16BF's products of the
 * floats they were rounded from. */
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/gemm.h"

#include "src/backend/cublas_api.h"
#include "src/backend/kernel_math.h"

#include <cublas_v2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { HANDLE_MAGIC = 0x0b1a5 };

struct cublasContext {
    unsigned magic;
    cudaStream_t stream; /* where its GEMMs queue (NULL: the legacy default stream) */
};

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    *handle = NULL;
    if (fakecuda_device_count() == 0)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    struct cublasContext *h = calloc(1, sizeof *h);
    if (!h)
        return CUBLAS_STATUS_ALLOC_FAILED;
    h->magic = HANDLE_MAGIC;
    fakecuda_count_handle(1);
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
    if (!handle || handle->magic != HANDLE_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (fakecuda_synchronize() != cudaSuccess)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    handle->magic = 0;
    free(handle);
    fakecuda_count_handle(-1);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream)
{
    if (!handle || handle->magic != HANDLE_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "unknown error";
    }
}

/* Round to nearest (ties away, as the conversion to TF32 does) keeping 10 mantissa bits. */
static float to_tf32(float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    if ((bits & 0x7f800000u) != 0x7f800000u)
        bits = (bits + 0x1000u) & ~0x1fffu;
    memcpy(&x, &bits, sizeof x);
    return x;
}

/* Round to nearest even keeping bfloat16's 7 mantissa bits (NaN and infinities unchanged). */
static float to_bf16(float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    if ((bits & 0x7f800000u) != 0x7f800000u)
        bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &bits, sizeof x);
    return x;
}

static float exact(float x)
{
    return x;
}

float (*fakecuda_gemm_input(cublasComputeType_t compute))(float)
{
    return compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? to_tf32 : compute == CUBLAS_COMPUTE_32F_FAST_16BF ? to_bf16 : exact;
}

int fakecuda_gemm_types(const char *call, cudaDataType a, cudaDataType b, cudaDataType c,
                        cublasComputeType_t compute)
{
    int fp32 = a == CUDA_R_32F && b == CUDA_R_32F &&
               (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC ||
                compute == CUBLAS_COMPUTE_32F_FAST_TF32 || compute == CUBLAS_COMPUTE_32F_FAST_16BF);
    int bf16 = a == CUDA_R_16BF && b == CUDA_R_16BF &&
               (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC);
    if ((fp32 || bf16) && c == CUDA_R_32F)
        return 1;
    fakecuda_complain("%s: only float32 operands at FP32/TF32/bf16 compute, or bf16 operands at FP32 compute, "
                      "with a float32 output are faked (A %d, B %d, C %d, compute %d)",
                      call, (int)a, (int)b, (int)c, (int)compute);
    return 0;
}

float fakecuda_operand(cudaDataType type, const void *base, size_t i)
{
    return type == CUDA_R_16BF ? dp_bf16_value(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

size_t fakecuda_span_bytes(cudaDataType type, int rows, int cols, int ld)
{
    size_t element = type == CUDA_R_16BF ? sizeof(uint16_t) : sizeof(float);
    return rows && cols ? ((size_t)(cols - 1) * ld + rows) * element : 0;
}

/* The calls counted by fakecuda_count_gemm and fakecuda_count_rounding, and the process that
 * reports them. */
static long gemms_fp32, gemms_bf16, outputs_bf16, roundings, rounded_values;
static pid_t counting;

static void report_counts(void)
{
    if (getpid() != counting)
        return;
    fprintf(stderr, "fakecuda: GEMM operands: %ld float32, %ld bfloat16\n", gemms_fp32, gemms_bf16);
    fprintf(stderr, "fakecuda: GEMM outputs in bfloat16: %ld\n", outputs_bf16);
    fprintf(stderr, "fakecuda: bf16 roundings: %ld launches, %ld values\n", roundings, rounded_values);
}

/* 1 while FAKECUDA_COUNT_GEMMS=1 (the report is printed at exit); under the lock. */
static int counts(void)
{
    const char *count = getenv("FAKECUDA_COUNT_GEMMS");
    if (!counting && count && strcmp(count, "1") == 0) {
        counting = getpid();
        atexit(report_counts);
    }
    return counting != 0;
}

void fakecuda_count_gemm(cudaDataType operands, cudaDataType out)
{
    fakecuda_lock();
    if (counts()) {
        *(operands == CUDA_R_16BF ? &gemms_bf16 : &gemms_fp32) += 1;
        outputs_bf16 += out == CUDA_R_16BF;
    }
    fakecuda_unlock();
}

void fakecuda_count_rounding(size_t values)
{
    fakecuda_lock();
    if (counts()) {
        roundings++;
        rounded_values += (long)values;
    }
    fakecuda_unlock();
}

int fakecuda_gemm_check(const fakecuda_gemm *g)
{
    int a_rows = g->trans_a ? g->k : g->m, a_cols = g->trans_a ? g->m : g->k;
    int b_rows = g->trans_b ? g->n : g->k, b_cols = g->trans_b ? g->k : g->n;
    return fakecuda_need(g->a, fakecuda_span_bytes(g->operands, a_rows, a_cols, g->lda), g->a_name) &&
           fakecuda_need(g->b, fakecuda_span_bytes(g->operands, b_rows, b_cols, g->ldb), g->b_name) &&
           fakecuda_need(g->c, fakecuda_span_bytes(g->out, g->m, g->n, g->ldc), g->c_name);
}

void fakecuda_gemm_product(const fakecuda_gemm *g, float *into, int ld)
{
    /* cuBLAS picks its kernel by the operands' alignment, and its kernels round differently:
     * operands not all 256-byte aligned (the most cuBLASLt keys on) are summed in float here
     * (another kernel), so code that expects the same bits from differently aligned copies
     * fails on the fake as on a GPU. */
    int aligned = (((uintptr_t)g->a | (uintptr_t)g->b | (uintptr_t)g->c) & 255u) == 0;
    for (int j = 0; j < g->n; j++)
        for (int i = 0; i < g->m; i++) {
            double sum = 0.0;
            for (int p = 0; p < g->k; p++) {
                size_t at_a = g->trans_a ? (size_t)i * g->lda + p : (size_t)p * g->lda + i;
                size_t at_b = g->trans_b ? (size_t)p * g->ldb + j : (size_t)j * g->ldb + p;
                float a = g->input(fakecuda_operand(g->operands, g->a, at_a));
                float b = g->input(fakecuda_operand(g->operands, g->b, at_b));
                sum = aligned ? sum + (double)a * b : (double)(float)(sum + (double)(a * b));
            }
            float *c = &into[(size_t)j * ld + i];
            /* beta 0: C is written, never read (it may hold NaN). */
            *c = (float)(g->alpha * sum + (g->beta != 0.0f ? (double)g->beta * *c : 0.0));
        }
}

int fakecuda_gemm_run(const fakecuda_gemm *g)
{
    if (!fakecuda_gemm_check(g))
        return 0;
    fakecuda_gemm_product(g, g->c, g->ldc);
    return 1;
}

static void run_gemm(void *raw)
{
    (void)fakecuda_gemm_run(raw);
}

static int max1(int v)
{
    return v > 1 ? v : 1;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType Atype, int lda,
                            const void *B, cudaDataType Btype, int ldb, const void *beta, void *C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    if (!handle || handle->magic != HANDLE_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
    if ((transa != CUBLAS_OP_N && transa != CUBLAS_OP_T && transa != CUBLAS_OP_C) ||
        (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T && transb != CUBLAS_OP_C) || m < 0 || n < 0 || k < 0 ||
        lda < max1(ta ? k : m) || ldb < max1(tb ? n : k) || ldc < max1(m) || !alpha || !beta) {
        fakecuda_complain("cublasGemmEx(%c, %c, m %d, n %d, k %d, lda %d, ldb %d, ldc %d): invalid value",
                          ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, lda, ldb, ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!fakecuda_gemm_types("cublasGemmEx", Atype, Btype, Ctype, computeType))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (algo != CUBLAS_GEMM_DEFAULT && algo != CUBLAS_GEMM_DEFAULT_TENSOR_OP) {
        fakecuda_complain("cublasGemmEx: only the default algorithm is faked");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    fakecuda_count_gemm(Atype, Ctype);
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    /* The default pointer mode: alpha and beta are host values, read now. */
    fakecuda_gemm g = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
                       .operands = Atype, .input = fakecuda_gemm_input(computeType), .alpha = *(const float *)alpha,
                       .beta = *(const float *)beta, .a = A, .b = B, .c = C, .a_name = "cublasGemmEx's A",
                       .b_name = "cublasGemmEx's B", .c_name = "cublasGemmEx's C"};
    return fakecuda_enqueue_on(handle->stream, run_gemm, &g, sizeof g, "cublasGemmEx", NULL) == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                                                                   : CUBLAS_STATUS_EXECUTION_FAILED;
}

/* The table the CUDA backend loads, as the real cublas_load.c fills it from the library. */
int dp_cublas_load(dp_cublas_api *api, char *why, size_t size)
{
    (void)why;
    (void)size;
    *api = (dp_cublas_api){.create = cublasCreate_v2, .destroy = cublasDestroy_v2, .set_stream = cublasSetStream_v2, .gemm_ex = cublasGemmEx,
                           .status_string = cublasGetStatusString};
    return 0;
}
