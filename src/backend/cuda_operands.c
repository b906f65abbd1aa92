/* --precision bf16's GEMM operands: cuBLAS runs bf16 tensor-core kernels only for operands
 * that are bf16 in memory (CUDA_R_16BF; FP32 operands at the FAST_16BF compute type ran at TF32's
 * speed on an H200), so each GEMM's A and B are rounded (nearest even) into this buffer first,
 * C stays FP32. The buffer grows to the largest GEMM the run makes, on the eager steps before
 * any CUDA graph capture (one a graph uses is kept, not freed, when evaluation grows it), and
 * is charged to the allocation counter. */
#include "config.h"

#include "src/backend/cuda_operands.h"

#include "dp/error.h"
#include "dp/memory.h"
#include "src/backend/fatal.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>

/* Each copy's B operand starts on the boundary cuBLAS picks its fastest kernels for. */
#define ALIGN_ELEMENTS (DP_GEMM_OPERAND_ALIGN / sizeof(uint16_t))

size_t dp_gemm_operand_span(int rows, int cols, int ld)
{
    return rows > 0 && cols > 0 ? (size_t)(rows - 1) * (size_t)ld + (size_t)cols : 0;
}

/* Keeps the buffer a graph's GEMMs use until the context closes. */
static int keep(dp_cuda_bf16_operands *o)
{
    uint16_t **kept = realloc(o->kept, (o->kept_count + 1) * sizeof *kept);
    if (!kept)
        return dp_fail(DP_ENOMEM, "rank %d: no host memory to keep a CUDA graph's bf16 operand buffer", o->rank);
    o->kept = kept;
    o->kept[o->kept_count++] = o->base;
    return 0;
}

static int grow(dp_cuda_bf16_operands *o, size_t elements)
{
    const dp_backend *be = o->be;
    if (o->base && o->captured) {
        TRY(keep(o));
    } else if (o->base) {
        be->synchronize(be); /* earlier GEMMs may still read the old copies */
        be->free(be, o->base);
    }
    o->base = NULL;
    o->elements = 0;
    o->captured = 0;
    o->base = be->alloc(be, elements * sizeof *o->base, DP_MEM_OTHER, "the bf16 copies of a GEMM's operands");
    if (!o->base)
        return DP_ENOMEM;
    o->elements = elements;
    return 0;
}

int dp_cuda_bf16_operands_place(dp_cuda_bf16_operands *o, int capturing, size_t a_elements, size_t b_elements,
                                uint16_t **a, uint16_t **b)
{
    size_t b_offset = (a_elements + ALIGN_ELEMENTS - 1) / ALIGN_ELEMENTS * ALIGN_ELEMENTS;
    size_t needed = b_offset + (b_elements ? b_elements : 1);
    if (needed > o->elements) {
        if (capturing)
            return dp_fail(DP_EINVAL, "rank %d: a GEMM inside a CUDA graph capture needs %zu bytes for its bf16 "
                           "operands, more than the %zu the eager steps before it grew, and nothing may be "
                           "allocated in a capture: rerun with --cuda-graph off", o->rank,
                           needed * sizeof *o->base, o->elements * sizeof *o->base);
        TRY(grow(o, needed));
    }
    o->captured |= capturing;
    *a = o->base;
    *b = o->base + b_offset;
    return 0;
}

static int release(const dp_cuda_bf16_operands *o, uint16_t *buffer, int report)
{
    if (!buffer)
        return 0;
    dp_memory_release(buffer);
    cudaError_t e = cudaFree(buffer);
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    return report ? dp_fail(DP_EDEVICE, "cudaFree(the bf16 copies of GEMM operands) failed on rank %d: %s", o->rank,
                            cudaGetErrorString(e))
                  : 0;
}

int dp_cuda_bf16_operands_release(dp_cuda_bf16_operands *o, int report)
{
    int status = release(o, o->base, report);
    for (size_t i = 0; i < o->kept_count; i++) {
        int freed = release(o, o->kept[i], report && !status);
        if (!status)
            status = freed;
    }
    free(o->kept);
    *o = (dp_cuda_bf16_operands){.be = o->be, .rank = o->rank};
    return status;
}
