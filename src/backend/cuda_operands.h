/* --precision bf16 on the CUDA backend: where a GEMM's two operands are rounded to bfloat16
 * before cuBLAS or cuBLASLt reads them (cuda_operands.c). */
#ifndef DP_BACKEND_CUDA_OPERANDS_H
#define DP_BACKEND_CUDA_OPERANDS_H

#include "dp/backend.h"

#include <stddef.h>
#include <stdint.h>

/* One device buffer per context holding the bf16 copies of the current GEMM's A and B. */
typedef struct dp_cuda_bf16_operands {
    const dp_backend *be; /* the context: its alloc charges the buffer to the counter */
    int rank;
    uint16_t *base;       /* A's copy, then B's from the next 256-byte boundary */
    size_t elements;      /* its size */
    int captured;         /* a CUDA graph's GEMMs use base: it must outlive the graph */
    uint16_t **kept;      /* earlier buffers graphs use, freed with the context */
    size_t kept_count;
} dp_cuda_bf16_operands;

/* Elements a row-major operand of rows x cols with leading dimension ld spans (0 when empty):
 * its copy keeps ld, so the GEMM's arguments stay as they are. */
size_t dp_gemm_operand_span(int rows, int cols, int ld);

/* Places copies of a_elements and b_elements in the buffer, growing it when it is smaller: the
 * old one is freed after the stream's work, which may still read it, or kept while the context
 * lives if a capture used it (a graph replays GEMMs on it, evaluation may grow it later). Inside
 * a capture nothing may be allocated: `capturing` with a buffer too small is an error (the
 * eager warm-up step before a capture runs the same GEMMs, so it has grown the buffer already). */
int dp_cuda_bf16_operands_place(dp_cuda_bf16_operands *o, int capturing, size_t a_elements, size_t b_elements,
                                uint16_t **a, uint16_t **b);

/* Frees the buffers; with report, the first failure is recorded and returned. */
int dp_cuda_bf16_operands_release(dp_cuda_bf16_operands *o, int report);

#endif
