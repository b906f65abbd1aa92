/* The CUDA backend's fused GEMMs through cuBLASLt: a GEMM whose epilogue adds the bias, applies
 * the ReLU and writes its mask, applies a ReLU's backward from that mask, or sums the bias
 * gradient, in the GEMM's own kernel. Row-major operands swap as in cuda.c's gemm (cuBLAS
 * reads a row-major matrix as its transpose), so our op(A) is cuBLASLt's op(B): the bias
 * gradient of a weight GEMM dW = dY^T X is its BGRADB. At --precision bf16 the operands come
 * as bf16 copies (cuda_operands.c; layouts CUDA_R_16BF, compute 32F), C, D and the vectors FP32,
 * except where a GEMM writes a bf16 activation or its gradient (gemm_rounded_bf16): C and D
 * are then bf16, and so is the bias, as cuBLASLt takes a bias of D's type. Each shape's descriptors and algorithm
 * are found once (the heuristic costs more than the call) and kept; one workspace per context,
 * charged to the allocation counter. make check runs this file against the fake cuBLASLt of
 * tests/fakecuda/cublaslt.c. */
#include "config.h"

#include "src/backend/cuda_lt.h"

#include "dp/error.h"
#include "src/backend/cublaslt_api.h"
#include "src/backend/fatal.h"

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cuBLAS's advice for Hopper: 32 MiB lets every algorithm run (split-K's partial sums). */
#define WORKSPACE_BYTES ((size_t)32 << 20)
/* Shapes kept with their algorithm: a model's GEMMs, a shorter last batch and evaluation's. */
#define PLANS 64

/* Each epilogue as cuBLASLt names it, with and without a bias (or bias gradient) vector, and the
 * transposes a Linear calls it with (the probe at open asks for those). cuBLASLt's bias and bias
 * gradient take D's (C's) type (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE and BIAS_POINTER in
 * cublasLt.h): FP32 at every precision, but for the bf16 bias copy beside a bf16 D
 * (gemm_rounded_bf16); the ReLU's aux is a bit mask whatever the types. */
static const struct {
    cublasLtEpilogue_t with_vector, without_vector;
    int trans_a, trans_b;
} epilogues[DP_EPILOGUES] = {
    [DP_EPILOGUE_BIAS] = {CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_DEFAULT, 0, 1},
    [DP_EPILOGUE_RELU] = {CUBLASLT_EPILOGUE_RELU_BIAS, CUBLASLT_EPILOGUE_RELU, 0, 1},
    [DP_EPILOGUE_RELU_MASK] = {CUBLASLT_EPILOGUE_RELU_AUX_BIAS, CUBLASLT_EPILOGUE_RELU_AUX, 0, 1},
    [DP_EPILOGUE_DRELU] = {CUBLASLT_EPILOGUE_DRELU, CUBLASLT_EPILOGUE_DRELU, 0, 0},
    [DP_EPILOGUE_BIAS_GRAD] = {CUBLASLT_EPILOGUE_BGRADB, CUBLASLT_EPILOGUE_BGRADB, 1, 0},
};

/* What decides a plan: the shape, the epilogue, C's type, and the alignments its algorithm may
 * assume (cuBLASLt's operands A, B, C and the vector or mask). */
typedef struct plan_key {
    int kind, with_vector, out_bf16, trans_a, trans_b, m, n, k, lda, ldb, ldc, beta_zero, mask_ld;
    unsigned align[4]; /* ints alone: no padding, so keys compare with memcmp */
} plan_key;

typedef struct plan {
    plan_key key;
    int used;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c; /* cuBLASLt's A (our b), B (our a), C and D (our c) */
    cublasLtMatmulAlgo_t algo;
} plan;

struct dp_cuda_lt {
    dp_cuda_lt_setup setup;
    dp_cublaslt_api api;
    cublasLtHandle_t handle;
    void *workspace;
    int supported[DP_EPILOGUES];
    char why[DP_EPILOGUES][192];
    int writes_bf16; /* the forward epilogues run with C and D bf16 (gemm_rounded_bf16) */
    char why_not_bf16[192];
    plan plans[PLANS];
    int next; /* the plan a new shape replaces once all are used */
};

static int lt_status(const dp_cuda_lt *lt, cublasStatus_t s, const char *call, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    return dp_fail(DP_EDEVICE, "%s failed at %s:%d on rank %d (GPU %d): %s", call, __FILE__, line, lt->setup.rank,
                   lt->setup.device, lt->api.status_string(s));
}

#define LT_CALL(lt, name, call) lt_status((lt), (call), name, __LINE__)

/* The largest power of two up to 256 dividing the address: what an algorithm may assume. */
static unsigned alignment_of(const void *p)
{
    unsigned a = 256;
    while (a > 1 && (uintptr_t)p % a)
        a /= 2;
    return a;
}

static void destroy_plan(dp_cuda_lt *lt, plan *p)
{
    if (p->desc)
        (void)lt->api.desc_destroy(p->desc);
    cublasLtMatrixLayout_t layouts[] = {p->a, p->b, p->c};
    for (int i = 0; i < 3; i++)
        if (layouts[i])
            (void)lt->api.layout_destroy(layouts[i]);
    memset(p, 0, sizeof *p);
}

/* The epilogue's vector: the bias it reads (FP32, or bf16 beside a bf16 C) or the bias gradient
 * it writes (NULL: none). */
static const void *vector_of(const dp_gemm_epilogue *e)
{
    if (e->kind == DP_EPILOGUE_BIAS_GRAD)
        return e->bias_grad;
    return e->bias16 ? e->bias16 : (const void *)e->bias;
}

static int masked(dp_epilogue kind)
{
    return kind == DP_EPILOGUE_RELU_MASK || kind == DP_EPILOGUE_DRELU;
}

/* The vector and mask pointers of this call, set before the heuristic too, which reads their
 * alignment from them. */
static int set_pointers(dp_cuda_lt *lt, plan *p, const dp_gemm_epilogue *e)
{
    const void *vector = vector_of(e), *mask = masked(e->kind) ? e->mask : NULL;
    if (vector)
        TRY(LT_CALL(lt, "cublasLtMatmulDescSetAttribute(BIAS_POINTER)",
                    lt->api.desc_set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector, sizeof vector)));
    if (mask)
        TRY(LT_CALL(lt, "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)",
                    lt->api.desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &mask, sizeof mask)));
    return 0;
}

static int describe_operation(dp_cuda_lt *lt, plan *p, const plan_key *key)
{
    const dp_cublaslt_api *api = &lt->api;
    cublasOperation_t op_a = key->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = key->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint32_t epilogue = key->with_vector ? epilogues[key->kind].with_vector : epilogues[key->kind].without_vector;
    int64_t mask_ld = key->mask_ld;
    TRY(LT_CALL(lt, "cublasLtMatmulDescCreate", api->desc_create(&p->desc, lt->setup.compute, CUDA_R_32F)));
    TRY(LT_CALL(lt, "cublasLtMatmulDescSetAttribute(TRANSA)",
                api->desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a)));
    TRY(LT_CALL(lt, "cublasLtMatmulDescSetAttribute(TRANSB)",
                api->desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b)));
    TRY(LT_CALL(lt, "cublasLtMatmulDescSetAttribute(EPILOGUE)",
                api->desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue)));
    if (mask_ld)
        TRY(LT_CALL(lt, "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_LD)",
                    api->desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &mask_ld, sizeof mask_ld)));
    /* Column-major as cuBLASLt stores them: A is our b, B our a, C our c transposed. */
    TRY(LT_CALL(lt, "cublasLtMatrixLayoutCreate(A)",
                api->layout_create(&p->a, lt->setup.operands, (uint64_t)(key->trans_b ? key->k : key->n),
                                   (uint64_t)(key->trans_b ? key->n : key->k), key->ldb)));
    TRY(LT_CALL(lt, "cublasLtMatrixLayoutCreate(B)",
                api->layout_create(&p->b, lt->setup.operands, (uint64_t)(key->trans_a ? key->m : key->k),
                                   (uint64_t)(key->trans_a ? key->k : key->m), key->lda)));
    return LT_CALL(lt, "cublasLtMatrixLayoutCreate(C)",
                   api->layout_create(&p->c, key->out_bf16 ? CUDA_R_16BF : CUDA_R_32F, (uint64_t)key->n,
                                      (uint64_t)key->m, key->ldc));
}

/* The heuristic's best algorithm for p within the workspace and the key's alignments; *found 0
 * when it has none. */
static int choose_algorithm(dp_cuda_lt *lt, plan *p, int *found)
{
    const dp_cublaslt_api *api = &lt->api;
    static const cublasLtMatmulPreferenceAttributes_t aligns[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    cublasLtMatmulPreference_t pref = NULL;
    uint64_t workspace = WORKSPACE_BYTES;
    cublasLtMatmulHeuristicResult_t result;
    int status = LT_CALL(lt, "cublasLtMatmulPreferenceCreate", api->pref_create(&pref));
    if (!status)
        status = LT_CALL(lt, "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)",
                         api->pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
    for (int i = 0; !status && i < 4; i++) {
        uint32_t bytes = p->key.align[i < 3 ? i : 2]; /* D is C */
        status = LT_CALL(lt, "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)",
                         api->pref_set(pref, aligns[i], &bytes, sizeof bytes));
    }
    *found = 0;
    if (!status) {
        cublasStatus_t s = api->heuristic(lt->handle, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result, found);
        if (s == CUBLAS_STATUS_NOT_SUPPORTED)
            *found = 0;
        else
            status = LT_CALL(lt, "cublasLtMatmulAlgoGetHeuristic", s);
    }
    if (pref)
        (void)api->pref_destroy(pref);
    if (!status && *found)
        p->algo = result.algo;
    return status;
}

static plan_key key_of(int trans_a, int trans_b, int m, int n, int k, const void *a, int lda, const void *b, int ldb,
                       float beta, const void *c, int out_bf16, int ldc, const dp_gemm_epilogue *e)
{
    const void *vector = vector_of(e);
    int with_mask = masked(e->kind);
    return (plan_key){.kind = e->kind, .with_vector = vector != NULL, .out_bf16 = out_bf16, .trans_a = trans_a,
                      .trans_b = trans_b,
                      .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc, .beta_zero = beta == 0.0f,
                      .mask_ld = with_mask ? (int)e->mask_ld : 0,
                      .align = {alignment_of(b), alignment_of(a), alignment_of(c),
                                alignment_of(with_mask ? (const void *)e->mask : vector)}};
}

/* The kept plan of key, or a new one in a free slot (the oldest otherwise); *found 0 when
 * cuBLASLt has no algorithm for it. */
static int plan_for(dp_cuda_lt *lt, const plan_key *key, const dp_gemm_epilogue *e, plan **out, int *found)
{
    for (int i = 0; i < PLANS; i++)
        if (lt->plans[i].used && memcmp(&lt->plans[i].key, key, sizeof *key) == 0) {
            *out = &lt->plans[i];
            *found = 1;
            return set_pointers(lt, *out, e);
        }
    plan *p = &lt->plans[lt->next];
    lt->next = (lt->next + 1) % PLANS;
    destroy_plan(lt, p);
    p->key = *key;
    int status = describe_operation(lt, p, key);
    if (!status)
        status = set_pointers(lt, p, e);
    if (!status)
        status = choose_algorithm(lt, p, found);
    if (status || !*found) {
        destroy_plan(lt, p);
        return status;
    }
    p->used = 1;
    *out = p;
    return 0;
}

/* No products to sum (k = 0, a rank without rows): C (FP32: backward) and the bias gradient are zeros. */
static int empty_product(dp_cuda_lt *lt, int m, int n, float beta, float *c, int ldc, const dp_gemm_epilogue *e)
{
    if (beta != 0.0f || (e->kind != DP_EPILOGUE_BIAS_GRAD && e->kind != DP_EPILOGUE_DRELU))
        return dp_fail(DP_EINVAL, "a fused GEMM with k = 0 takes beta 0 and a backward epilogue");
    cudaStream_t s = lt->setup.stream;
    cudaError_t err = cudaSuccess;
    int contiguous = ldc == n;
    for (int row = 0; err == cudaSuccess && row < (contiguous ? 1 : m); row++)
        err = cudaMemsetAsync(c + (size_t)row * ldc, 0, (size_t)n * (contiguous ? m : 1) * sizeof *c, s);
    if (err == cudaSuccess && e->kind == DP_EPILOGUE_BIAS_GRAD)
        err = cudaMemsetAsync(e->bias_grad, 0, (size_t)m * sizeof *c, s);
    if (err == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    return dp_fail(DP_EDEVICE, "cudaMemsetAsync of an empty fused GEMM failed on rank %d (GPU %d): %s",
                   lt->setup.rank, lt->setup.device, cudaGetErrorString(err));
}

int dp_cuda_lt_matmul(dp_cuda_lt *lt, int trans_a, int trans_b, int m, int n, int k, float alpha, const void *a,
                      int lda, const void *b, int ldb, float beta, void *c, int out_bf16, int ldc,
                      const dp_gemm_epilogue *e)
{
    if (!lt->supported[e->kind])
        return dp_fail(DP_EINVAL, "%s was asked for, but this context declines it: %s", dp_epilogue_ops[e->kind],
                       lt->why[e->kind]);
    if (out_bf16 && !lt->writes_bf16)
        return dp_fail(DP_EINVAL, "a GEMM writing bf16 was asked for, but this context declines it: %s",
                       lt->why_not_bf16);
    if (m == 0 || n == 0)
        return 0;
    if (k == 0)
        return empty_product(lt, m, n, beta, c, ldc, e);
    plan_key key = key_of(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, out_bf16, ldc, e);
    plan *p = NULL;
    int found = 0;
    TRY(plan_for(lt, &key, e, &p, &found));
    if (!found)
        return dp_fail(DP_EDEVICE, "rank %d (GPU %d): cuBLASLt has no algorithm for %s with m %d, n %d, k %d "
                       "(transposes %d, %d; leading dimensions %d, %d, %d): rerun with --fuse off",
                       lt->setup.rank, lt->setup.device, dp_epilogue_ops[e->kind], m, n, k, trans_a, trans_b,
                       lda, ldb, ldc);
    return LT_CALL(lt, "cublasLtMatmul",
                   lt->api.matmul(lt->handle, p->desc, &alpha, b, p->a, a, p->b, &beta, c, p->c, c, p->c, &p->algo,
                                  lt->workspace, WORKSPACE_BYTES, lt->setup.stream));
}

/* Whether cuBLASLt has an algorithm for epilogue `kind` on a Linear's shape (64 x 64 x 64) with
 * the pointers given (their alignment is what an algorithm may assume): with its vector and,
 * where `both` (a ReLU without bias; DEFAULT for a bias), without. */
static int probe_epilogue(dp_cuda_lt *lt, dp_epilogue kind, const void *operand, void *c, const void *vector,
                          int out_bf16, int both, int *found)
{
    *found = 1;
    for (int v = 0; *found && v < (both ? 2 : 1); v++) {
        dp_gemm_epilogue e = {.kind = kind, .mask = lt->workspace, .mask_ld = dp_relu_mask_ld(64)};
        if (!v && kind == DP_EPILOGUE_BIAS_GRAD)
            e.bias_grad = (float *)vector;
        else if (!v && out_bf16)
            e.bias16 = vector;
        else if (!v)
            e.bias = vector;
        plan_key key = key_of(epilogues[kind].trans_a, epilogues[kind].trans_b, 64, 64, 64, operand, 64, operand, 64,
                              0.0f, c, out_bf16, 64, &e);
        plan *p = NULL;
        TRY(plan_for(lt, &key, &e, &p, found));
    }
    return 0;
}

/* Whether the forward epilogues and DRELU also write a bf16 C (gemm_rounded_bf16), asked with
 * bf16 C and bias at 256-byte boundaries, as a Linear's activation, its bias copy and the model's
 * gradient buffers sit. */
static int probe_bf16_output(dp_cuda_lt *lt)
{
    static const dp_epilogue forward[] = {DP_EPILOGUE_BIAS, DP_EPILOGUE_RELU, DP_EPILOGUE_RELU_MASK,
                                          DP_EPILOGUE_DRELU};
    if (lt->setup.operands != CUDA_R_16BF) {
        snprintf(lt->why_not_bf16, sizeof lt->why_not_bf16, "the GEMMs read float32 operands (only --precision bf16 "
                 "writes bf16 activations)");
        return 0;
    }
    int found = 1;
    for (size_t i = 0; found && i < sizeof forward / sizeof *forward; i++) {
        if (!lt->supported[forward[i]]) {
            snprintf(lt->why_not_bf16, sizeof lt->why_not_bf16, "%s", lt->why[forward[i]]);
            return 0;
        }
        int drelu = forward[i] == DP_EPILOGUE_DRELU; /* no vector */
        TRY(probe_epilogue(lt, forward[i], lt->workspace, lt->workspace, drelu ? NULL : lt->workspace, 1, !drelu,
                           &found));
    }
    lt->writes_bf16 = found;
    if (!found)
        snprintf(lt->why_not_bf16, sizeof lt->why_not_bf16, "cuBLASLt has no algorithm for a forward epilogue "
                 "or DRELU writing bf16");
    return 0;
}

/* Whether cuBLASLt runs each epilogue at this precision, asked once for a Linear's shape with
 * the least alignment (4 bytes; a mask is its own allocation; bf16 operands are copies at
 * 256-byte boundaries), so any call may use it: with its vector and, where cuBLASLt has another
 * epilogue for that (a ReLU without bias), without. One that would sum a bf16 operand is
 * declined without asking, so the bias gradient stays FP32's. */
static int probe(dp_cuda_lt *lt)
{
    float *any = (float *)((char *)lt->workspace + sizeof(float));
    const void *operand = lt->setup.operands == CUDA_R_32F ? (const void *)any : lt->workspace;
    for (int kind = 0; kind < DP_EPILOGUES; kind++) {
        if (dp_epilogue_sums_operand[kind] && lt->setup.operands != CUDA_R_32F) {
            snprintf(lt->why[kind], sizeof lt->why[kind], "with bf16 operands %s would sum the bf16 copy of the "
                     "gradient; the unfused pass sums it in FP32", dp_epilogue_ops[kind]);
            continue;
        }
        int found = 1, both = epilogues[kind].without_vector != epilogues[kind].with_vector &&
                              epilogues[kind].without_vector != CUBLASLT_EPILOGUE_DEFAULT;
        TRY(probe_epilogue(lt, kind, operand, any, any, 0, both, &found));
        lt->supported[kind] = found;
        if (!found)
            snprintf(lt->why[kind], sizeof lt->why[kind], "cuBLASLt has no algorithm for epilogue %s at this precision",
                     dp_epilogue_ops[kind]);
    }
    return probe_bf16_output(lt);
}

static void decline_all(dp_cuda_lt *lt, const char *why)
{
    for (int kind = 0; kind < DP_EPILOGUES; kind++)
        snprintf(lt->why[kind], sizeof lt->why[kind], "%s", why);
    snprintf(lt->why_not_bf16, sizeof lt->why_not_bf16, "%s", why);
}

int dp_cuda_lt_open(const dp_cuda_lt_setup *setup, dp_cuda_lt **out)
{
    dp_cuda_lt *lt = calloc(1, sizeof *lt);
    if (!lt)
        return dp_fail(DP_ENOMEM, "rank %d: no host memory for cuBLASLt's plans", setup->rank);
    lt->setup = *setup;
    *out = lt;
    char why[160];
    if (setup->unfused) {
        decline_all(lt, "turned off by --fuse off");
        return 0;
    }
    if (dp_cublaslt_load(&lt->api, why, sizeof why)) {
        char text[192];
        snprintf(text, sizeof text, "cuBLASLt: %s", why);
        decline_all(lt, text);
        return 0;
    }
    TRY(LT_CALL(lt, "cublasLtCreate", lt->api.create(&lt->handle)));
    const dp_backend *be = setup->be;
    if (!(lt->workspace = be->alloc(be, WORKSPACE_BYTES, DP_MEM_OTHER, "cuBLASLt's workspace")))
        return DP_ENOMEM;
    return probe(lt);
}

int dp_cuda_lt_close(dp_cuda_lt *lt, int report)
{
    if (!lt)
        return 0;
    for (int i = 0; i < PLANS; i++)
        destroy_plan(lt, &lt->plans[i]);
    int status = 0;
    if (lt->handle) {
        cublasStatus_t s = lt->api.destroy(lt->handle);
        if (report)
            status = LT_CALL(lt, "cublasLtDestroy", s);
    }
    if (lt->workspace) {
        dp_memory_release(lt->workspace);
        cudaError_t e = cudaFree(lt->workspace);
        if (report && !status && e != cudaSuccess)
            status = dp_fail(DP_EDEVICE, "cudaFree(cuBLASLt's workspace) failed on rank %d (GPU %d): %s",
                             lt->setup.rank, lt->setup.device, cudaGetErrorString(e));
    }
    free(lt);
    return status;
}

void dp_cuda_lt_describe(const dp_cuda_lt *lt, char *text, size_t size)
{
    size_t used = (size_t)snprintf(text, size, "cuBLASLt epilogues:");
    int any = 0;
    for (int kind = 0; kind < DP_EPILOGUES && used < size; kind++)
        if (lt->supported[kind]) {
            used += (size_t)snprintf(text + used, size - used, "%s %s", any ? "," : "", dp_epilogue_ops[kind] + 11);
            any = 1;
        }
    if (!any)
        snprintf(text, size, "no fused epilogues (%s)", lt->why[0]);
}

int dp_cuda_lt_writes_bf16(const dp_cuda_lt *lt, char *why, size_t size)
{
    if (!lt->writes_bf16)
        snprintf(why, size, "%s", lt->why_not_bf16);
    return lt->writes_bf16;
}

int dp_cuda_lt_supports(const dp_cuda_lt *lt, const char *op, char *why, size_t size)
{
    for (int kind = 0; kind < DP_EPILOGUES; kind++)
        if (strcmp(op, dp_epilogue_ops[kind]) == 0) {
            if (!lt->supported[kind])
                snprintf(why, size, "%s", lt->why[kind]);
            return lt->supported[kind];
        }
    snprintf(why, size, "the CUDA backend has no %s", op);
    return 0;
}
