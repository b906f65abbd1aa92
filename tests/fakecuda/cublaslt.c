/* The fake cuBLASLt: handles, matmul descriptors, layouts, preferences, the heuristic and
 * cublasLtMatmul with the epilogues the CUDA backend fuses (bias, ReLU with or without its
 * bit-mask, the ReLU's backward from the mask, the bias gradient of B). Arguments are checked
 * when called, as cuBLASLt does (with its status codes); the product is the fake cuBLAS's
 * reference (gemm.h: inputs rounded as the compute type reads them, sums in double) and the
 * epilogue is applied to its float result with the arithmetic of the unfused kernels
 * (kernel_math.h), so a fused GEMM equals GEMM + kernel to the bit. Operands are float32 or
 * bf16 (the bias gradient of B then sums B's bf16 values, as cuBLASLt can only see those). With
 * bf16 operands C and D may be bf16 too, for the forward epilogues and DRELU: the epilogue is applied to the
 * FP32 product, then D rounded to nearest even; the bias then has D's type, as cuBLASLt documents
 * (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: the vector's type is D's but for integer and fp8 kernels),
 * and a bias of another type is refused. An algorithm remembers the
 * alignments it was chosen for, and cublasLtMatmul refuses pointers aligned less. Every
 * handle and descriptor counts for FAKECUDA_CHECK_LEAKS. FAKECUDA_LT_DECLINE=NAME,... (bias,
 * relu_bias, relu_aux_bias, drelu, bgradb, ...) plays a cuBLASLt without those epilogues. */
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/gemm.h"

#include "src/backend/cublaslt_api.h"
#include "src/backend/kernel_grid.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { LT_MAGIC = 0x17a11, DESC_MAGIC = 0xde5c, LAYOUT_MAGIC = 0x1a7, PREF_MAGIC = 0x9ef, ALGO_MAGIC = 0xa160 };

struct cublasLtContext {
    unsigned magic;
};

typedef struct fake_desc {
    unsigned magic;
    cublasComputeType_t compute;
    cublasOperation_t trans_a, trans_b;
    uint32_t epilogue;
    int32_t bias_type; /* -1: D's type, cuBLASLt's default */
    const void *vector, *aux;
    int64_t aux_ld;
} fake_desc;

typedef struct fake_layout {
    unsigned magic;
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
} fake_layout;

typedef struct fake_pref {
    unsigned magic;
    uint64_t workspace;
    uint32_t align[4];
} fake_pref;

/* The epilogues faked, by the names FAKECUDA_LT_DECLINE takes; what each reads and writes. */
static const struct {
    cublasLtEpilogue_t epilogue;
    const char *name;
    int vector; /* 1: the bias read (m values); 2: the bias gradient of B written (n values) */
    int relu, aux; /* aux 1: the mask written; 2: read (DRELU) */
    int bf16_out;  /* faked with a bf16 C and D too */
} faked[] = {
    {CUBLASLT_EPILOGUE_DEFAULT, "default", 0, 0, 0, 1},     {CUBLASLT_EPILOGUE_BIAS, "bias", 1, 0, 0, 1},
    {CUBLASLT_EPILOGUE_RELU, "relu", 0, 1, 0, 1},           {CUBLASLT_EPILOGUE_RELU_BIAS, "relu_bias", 1, 1, 0, 1},
    {CUBLASLT_EPILOGUE_RELU_AUX, "relu_aux", 0, 1, 1, 1},   {CUBLASLT_EPILOGUE_RELU_AUX_BIAS, "relu_aux_bias", 1, 1, 1, 1},
    {CUBLASLT_EPILOGUE_DRELU, "drelu", 0, 0, 2, 1},         {CUBLASLT_EPILOGUE_BGRADB, "bgradb", 2, 0, 0, 0},
};
#define FAKED ((int)(sizeof faked / sizeof *faked))

static int faked_index(uint32_t epilogue)
{
    for (int i = 0; i < FAKED; i++)
        if (faked[i].epilogue == epilogue)
            return i;
    return -1;
}

static int declined(const char *name)
{
    const char *at = getenv("FAKECUDA_LT_DECLINE");
    size_t length = strlen(name);
    while (at && *at) {
        size_t word = strcspn(at, ",");
        if (word == length && strncmp(at, name, length) == 0)
            return 1;
        at += word + (at[word] == ',');
    }
    return 0;
}

/* Makes an object of `bytes` whose first member is magic, counted for the leak check. */
static cublasStatus_t make(void **out, size_t bytes, unsigned magic)
{
    *out = NULL;
    unsigned *object = calloc(1, bytes);
    if (!object)
        return CUBLAS_STATUS_ALLOC_FAILED;
    *object = magic;
    fakecuda_count_handle(1);
    *out = object;
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t unmake(void *object, unsigned magic)
{
    if (!object || *(unsigned *)object != magic)
        return CUBLAS_STATUS_INVALID_VALUE;
    *(unsigned *)object = 0;
    free(object);
    fakecuda_count_handle(-1);
    return CUBLAS_STATUS_SUCCESS;
}

static int valid(const void *object, unsigned magic)
{
    return object && *(const unsigned *)object == magic;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle)
{
    if (fakecuda_device_count() == 0) {
        *handle = NULL;
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    return make((void **)handle, sizeof **handle, LT_MAGIC);
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle)
{
    if (!valid(handle, LT_MAGIC))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (fakecuda_synchronize() != cudaSuccess)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    return unmake(handle, LT_MAGIC);
}

/* cuBLASLt shares cuBLAS's status codes and words (the fake cuBLAS's). */
const char *cublasLtGetStatusString(cublasStatus_t status)
{
    return cublasGetStatusString(status);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute, cudaDataType_t scale)
{
    if (scale != CUDA_R_32F || (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32 &&
                                compute != CUBLAS_COMPUTE_32F_FAST_16BF)) {
        fakecuda_complain("cublasLtMatmulDescCreate: only FP32 scales and FP32/TF32/bf16 compute are faked");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    fake_desc *d;
    cublasStatus_t s = make((void **)&d, sizeof *d, DESC_MAGIC);
    if (s == CUBLAS_STATUS_SUCCESS) {
        d->compute = compute;
        d->trans_a = d->trans_b = CUBLAS_OP_N;
        d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        d->bias_type = -1;
    }
    *desc = (cublasLtMatmulDesc_t)d;
    return s;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc)
{
    return unmake(desc, DESC_MAGIC);
}

/* Copies an attribute of exactly `expected` bytes. */
static cublasStatus_t take(void *field, size_t expected, const void *buf, size_t bytes, const char *name)
{
    if (bytes != expected || !buf) {
        fakecuda_complain("cublasLt: attribute %s takes %zu bytes, given %zu", name, expected, bytes);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    memcpy(field, buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t bytes)
{
    fake_desc *d = (fake_desc *)desc;
    if (!valid(d, DESC_MAGIC))
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return take(&d->trans_a, sizeof(int32_t), buf, bytes, "TRANSA");
    case CUBLASLT_MATMUL_DESC_TRANSB: return take(&d->trans_b, sizeof(int32_t), buf, bytes, "TRANSB");
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return take(&d->epilogue, sizeof d->epilogue, buf, bytes, "EPILOGUE");
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return take(&d->vector, sizeof d->vector, buf, bytes, "BIAS_POINTER");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return take(&d->aux, sizeof d->aux, buf, bytes, "AUX_POINTER");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return take(&d->aux_ld, sizeof d->aux_ld, buf, bytes, "AUX_LD");
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return take(&d->bias_type, sizeof d->bias_type, buf, bytes, "BIAS_DATA_TYPE");
    default:
        fakecuda_complain("cublasLtMatmulDescSetAttribute: attribute %d is not faked", (int)attr);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld)
{
    *layout = NULL;
    if ((type != CUDA_R_32F && type != CUDA_R_16BF) || ld < (int64_t)(rows > 1 ? rows : 1) || rows > INT32_MAX ||
        cols > INT32_MAX) {
        fakecuda_complain("cublasLtMatrixLayoutCreate(rows %llu, cols %llu, ld %lld): only float32 or bf16 with ld >= rows",
                          (unsigned long long)rows, (unsigned long long)cols, (long long)ld);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    fake_layout *l;
    cublasStatus_t s = make((void **)&l, sizeof *l, LAYOUT_MAGIC);
    if (s == CUBLAS_STATUS_SUCCESS)
        *l = (fake_layout){LAYOUT_MAGIC, type, rows, cols, ld};
    *layout = (cublasLtMatrixLayout_t)l;
    return s;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout)
{
    return unmake(layout, LAYOUT_MAGIC);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    fake_pref *p;
    cublasStatus_t s = make((void **)&p, sizeof *p, PREF_MAGIC);
    if (s == CUBLAS_STATUS_SUCCESS)
        for (int i = 0; i < 4; i++)
            p->align[i] = 256; /* cuBLASLt's default: every pointer 256-byte aligned */
    *pref = (cublasLtMatmulPreference_t)p;
    return s;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    return unmake(pref, PREF_MAGIC);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t bytes)
{
    fake_pref *p = (fake_pref *)pref;
    if (!valid(p, PREF_MAGIC))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
        return take(&p->workspace, sizeof p->workspace, buf, bytes, "MAX_WORKSPACE_BYTES");
    if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
        return take(&p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], sizeof *p->align, buf, bytes,
                    "MIN_ALIGNMENT");
    fakecuda_complain("cublasLtMatmulPreferenceSetAttribute: attribute %d is not faked", (int)attr);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

/* cuBLAS's types (gemm.h), or bf16 operands at FP32 compute writing a bf16 C: cuBLASLt's
 * CUDA_R_16BF row (the faked epilogues then decide). */
static int output_types(cudaDataType a, cudaDataType b, cudaDataType c, cublasComputeType_t compute)
{
    if (c != CUDA_R_16BF)
        return fakecuda_gemm_types("cublasLtMatmul", a, b, c, compute);
    if (a == CUDA_R_16BF && b == CUDA_R_16BF && (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC))
        return 1;
    fakecuda_complain("cublasLtMatmul: a bf16 C is faked for bf16 operands at FP32 compute only (A %d, B %d, "
                      "compute %d)", (int)a, (int)b, (int)compute);
    return 0;
}

/* A matmul as the descriptors give it, checked as cuBLASLt checks it. */
typedef struct lt_call {
    fakecuda_gemm g;
    int faked;          /* index into faked[] */
    const void *vector; /* bias (read) or bias gradient (written) */
    cudaDataType vector_type;
    unsigned char *aux;
    int64_t aux_ld;
} lt_call;

static cublasStatus_t check_call(const fake_desc *d, const fake_layout *a, const fake_layout *b, const fake_layout *c,
                                 const fake_layout *dl, lt_call *call)
{
    if (!valid(d, DESC_MAGIC) || !valid(a, LAYOUT_MAGIC) || !valid(b, LAYOUT_MAGIC) || !valid(c, LAYOUT_MAGIC) ||
        !valid(dl, LAYOUT_MAGIC))
        return CUBLAS_STATUS_INVALID_VALUE;
    int ta = d->trans_a != CUBLAS_OP_N, tb = d->trans_b != CUBLAS_OP_N;
    uint64_t m = c->rows, n = c->cols, k = ta ? a->rows : a->cols;
    if ((ta ? a->cols : a->rows) != m || (tb ? b->cols : b->rows) != k || (tb ? b->rows : b->cols) != n ||
        dl->rows != m || dl->cols != n || dl->ld != c->ld) {
        fakecuda_complain("cublasLtMatmul: the layouts do not make one product (A %llux%llu, B %llux%llu, C %llux%llu)",
                          (unsigned long long)a->rows, (unsigned long long)a->cols, (unsigned long long)b->rows,
                          (unsigned long long)b->cols, (unsigned long long)c->rows, (unsigned long long)c->cols);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (dl->type != c->type || !output_types(a->type, b->type, c->type, d->compute))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    int f = faked_index(d->epilogue);
    if (f < 0 || declined(faked[f].name))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    cudaDataType vector_type = d->bias_type == -1 ? c->type : (cudaDataType)d->bias_type;
    if ((c->type == CUDA_R_16BF && !faked[f].bf16_out) || (faked[f].vector && vector_type != c->type)) {
        fakecuda_complain("cublasLtMatmul: epilogue %s with C type %d and vector type %d: cuBLASLt's vector takes "
                          "D's type, and a bf16 D is faked for the forward epilogues and DRELU only", faked[f].name,
                          (int)c->type, (int)vector_type);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if ((faked[f].vector && !d->vector) ||
        (faked[f].aux && (!d->aux || d->aux_ld % 128 || d->aux_ld < (int64_t)m))) {
        fakecuda_complain("cublasLtMatmul: epilogue %s needs its vector, or a mask with a leading dimension that is "
                          "a multiple of 128 and at least %llu (given %lld)", faked[f].name, (unsigned long long)m,
                          (long long)d->aux_ld);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    call->g = (fakecuda_gemm){.trans_a = ta, .trans_b = tb, .m = (int)m, .n = (int)n, .k = (int)k, .lda = (int)a->ld,
                              .ldb = (int)b->ld, .ldc = (int)c->ld, .operands = a->type, .out = c->type,
                              .input = fakecuda_gemm_input(d->compute), .a_name = "cublasLtMatmul's A",
                              .b_name = "cublasLtMatmul's B", .c_name = "cublasLtMatmul's C"};
    call->faked = f;
    call->vector = d->vector;
    call->vector_type = vector_type;
    call->aux = (unsigned char *)d->aux;
    call->aux_ld = d->aux_ld;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *returned)
{
    lt_call call;
    const fake_pref *p = (const fake_pref *)pref;
    *returned = 0;
    if (!valid(handle, LT_MAGIC) || !valid(p, PREF_MAGIC) || requested < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t s = check_call((const fake_desc *)desc, (const fake_layout *)a, (const fake_layout *)b,
                                  (const fake_layout *)c, (const fake_layout *)d, &call);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = ALGO_MAGIC;
    for (int i = 0; i < 4; i++)
        results[0].algo.data[1 + i] = p->align[i];
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* The epilogue over the FP32 product c [m, n] (column-major, leading dimension ldc), in the
 * unfused kernels' arithmetic: bias per row i, the ReLU's mask bit i + j * ld (set where the
 * value before the ReLU was not <= 0), the bias gradient of op(B) summed over k in bias_grad's lanes. */
static void apply_epilogue(const lt_call *call, float *c, int ldc)
{
    const fakecuda_gemm *g = &call->g;
    int f = call->faked;
    for (int j = 0; j < g->n && faked[f].vector != 2; j++)
        for (int i = 0; i < g->m; i++) {
            float *v = &c[(size_t)j * ldc + i];
            size_t bit = (size_t)i + (size_t)j * (size_t)call->aux_ld;
            if (faked[f].aux == 2 && !(call->aux[bit / 8] >> (bit % 8) & 1u))
                *v = 0.0f;
            float before = faked[f].vector == 1 ? dp_add(*v, fakecuda_operand(call->vector_type, call->vector, i)) : *v;
            if (faked[f].aux == 1)
                call->aux[bit / 8] = (unsigned char)((call->aux[bit / 8] & ~(1u << (bit % 8))) |
                                                     (unsigned)!(before <= 0.0f) << (bit % 8));
            *v = dp_act(before, faked[f].relu);
        }
    if (faked[f].vector != 2)
        return;
    float lanes[DP_ROW_TILE];
    for (int j = 0; j < g->n; j++) {
        for (int lane = 0; lane < DP_ROW_TILE; lane++) {
            lanes[lane] = 0.0f;
            for (int p = lane; p < g->k; p += DP_ROW_TILE)
                lanes[lane] = dp_add(lanes[lane], fakecuda_operand(g->operands, g->b, g->trans_b ? (size_t)p * g->ldb + j
                                                                                             : (size_t)j * g->ldb + p));
        }
        ((float *)call->vector)[j] = dp_bias_grad_merge(lanes, 1);
    }
}

/* A bf16 D: the product and epilogue in FP32 on the host, then each value rounded to nearest even. */
static void run_to_bf16(const lt_call *call)
{
    const fakecuda_gemm *g = &call->g;
    float *product = malloc(((size_t)g->m * (size_t)g->n + 1) * sizeof *product);
    if (!product) {
        fakecuda_complain("cublasLtMatmul: no host memory for the fake's FP32 product");
        fakecuda_fault();
        return;
    }
    fakecuda_gemm_product(g, product, g->m);
    apply_epilogue(call, product, g->m);
    for (int j = 0; j < g->n; j++)
        for (int i = 0; i < g->m; i++)
            ((uint16_t *)g->c)[(size_t)j * g->ldc + i] = dp_bf16_bits(product[(size_t)j * g->m + i]);
    free(product);
}

static void run_matmul(void *raw)
{
    const lt_call *call = raw;
    const fakecuda_gemm *g = &call->g;
    int f = call->faked;
    size_t vector_bytes = (size_t)(faked[f].vector == 2 ? g->n : g->m) * (call->vector_type == CUDA_R_16BF ? 2 : 4);
    size_t aux_bytes = (size_t)g->n * (size_t)(call->aux_ld / 8);
    if ((faked[f].vector && !fakecuda_need(call->vector, vector_bytes, "cublasLtMatmul's bias")) ||
        (faked[f].aux && !fakecuda_need(call->aux, aux_bytes, "cublasLtMatmul's mask")) || !fakecuda_gemm_check(g))
        return;
    if (g->out == CUDA_R_16BF) {
        run_to_bf16(call);
        return;
    }
    fakecuda_gemm_product(g, g->c, g->ldc);
    apply_epilogue(call, g->c, g->ldc);
}

static uint64_t alignment_of(const void *p)
{
    uint64_t a = 256;
    while (a > 1 && (uintptr_t)p % a)
        a /= 2;
    return a;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream)
{
    lt_call call;
    if (!valid(handle, LT_MAGIC))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasStatus_t s = check_call((const fake_desc *)desc, (const fake_layout *)Adesc, (const fake_layout *)Bdesc,
                                  (const fake_layout *)Cdesc, (const fake_layout *)Ddesc, &call);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    const void *pointers[4] = {A, B, C, D};
    if (!algo || algo->data[0] != ALGO_MAGIC || !alpha || !beta || C != D || (workspace_bytes && !workspace)) {
        fakecuda_complain("cublasLtMatmul: no algorithm from the heuristic, no alpha or beta, C not D (not faked), "
                          "or a workspace size without a workspace");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    for (int i = 0; i < 4; i++)
        if (alignment_of(pointers[i]) < algo->data[1 + i]) {
            fakecuda_complain("cublasLtMatmul: operand %d is %llu-byte aligned, its algorithm was chosen for %llu",
                              i, (unsigned long long)alignment_of(pointers[i]), (unsigned long long)algo->data[1 + i]);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    fakecuda_count_gemm(call.g.operands, call.g.out);
    if (call.g.m == 0 || call.g.n == 0)
        return CUBLAS_STATUS_SUCCESS;
    /* The default pointer mode: alpha and beta are host values, read now. */
    call.g.alpha = *(const float *)alpha;
    call.g.beta = *(const float *)beta;
    if (call.g.out == CUDA_R_16BF && call.g.beta != 0.0f) {
        fakecuda_complain("cublasLtMatmul: a bf16 C is faked with beta 0 only");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    call.g.a = A;
    call.g.b = B;
    call.g.c = D;
    return fakecuda_enqueue_on(stream, run_matmul, &call, sizeof call, "cublasLtMatmul", NULL) == cudaSuccess
               ? CUBLAS_STATUS_SUCCESS
               : CUBLAS_STATUS_EXECUTION_FAILED;
}

/* The table the CUDA backend loads, as the real cublaslt_load.c fills it from the library. */
int dp_cublaslt_load(dp_cublaslt_api *api, char *why, size_t size)
{
    (void)why;
    (void)size;
    *api = (dp_cublaslt_api){.create = cublasLtCreate, .destroy = cublasLtDestroy,
                             .desc_create = cublasLtMatmulDescCreate, .desc_destroy = cublasLtMatmulDescDestroy,
                             .desc_set = cublasLtMatmulDescSetAttribute, .layout_create = cublasLtMatrixLayoutCreate,
                             .layout_destroy = cublasLtMatrixLayoutDestroy,
                             .pref_create = cublasLtMatmulPreferenceCreate,
                             .pref_destroy = cublasLtMatmulPreferenceDestroy,
                             .pref_set = cublasLtMatmulPreferenceSetAttribute,
                             .heuristic = cublasLtMatmulAlgoGetHeuristic, .matmul = cublasLtMatmul,
                             .status_string = cublasLtGetStatusString};
    return 0;
}
