/* --precision bf16: a Linear's GEMM operands rounded once per micro-batch and read by each of
 * its GEMMs, where the backend's GEMMs read bf16 copies (gemm_rounded), as PyTorch's autocast
 * casts once: forward rounds X and W for Y = X W^T, backward_params rounds dY for
 * dW = dY^T X, backward_input reads dY and W for dX = dY W. A layer whose input is the bf16
 * output of the Linear before it (m->bf16_in) reads that as X and keeps no copy of it, as one
 * whose output gradient arrives in bf16 (m->bf16_dy) reads that as dY; a layer writing a bf16
 * output (m->bf16_out) rounds its bias too, which cuBLASLt then adds. */
#ifndef DP_NN_LINEAR_OPERANDS_H
#define DP_NN_LINEAR_OPERANDS_H

#include "src/nn/module.h"

#include <stddef.h>

typedef enum dp_held {
    DP_HELD_X,  /* the input [rows, in]: rounded by forward, last read by backward_params */
    DP_HELD_W,  /* the weight [out, in]: rounded by forward, last read by backward_input */
    DP_HELD_DY, /* the output gradient [rows, out]: rounded by backward_params, last read by backward_input */
    DP_HELD_BIAS, /* the bias [out] where the output is bf16: rounded and read by forward */
    DP_HELDS
} dp_held;

/* The copies of one Linear (its module state). A copy is read only while `of` names the values
 * it was rounded from; the pass that reads it last marks it spent, and forward rounds X and W
 * afresh, so no GEMM reads a copy of values that have changed since (the optimizer's update,
 * the next micro-batch). */
typedef struct dp_linear_operands {
    void *copy[DP_HELDS];     /* in one allocation, each 256-byte aligned; NULL until the first use */
    const float *of[DP_HELDS]; /* what each copy holds now; NULL: spent */
    int max_rows;
    int rounds; /* the backend's GEMMs read bf16 copies (gemm_rounded): asked once, at allocation */
    size_t out_bytes; /* the layer's output buffer as allocated (bf16 or FP32 values) */
} dp_linear_operands;

/* Sizes o for max_rows rows and asks be once whether its GEMMs read bf16 copies. */
void dp_linear_operands_prepare(dp_linear_operands *o, const dp_backend *be, int max_rows);

/* 1 when m's GEMMs read rounded copies held across its passes: the backend has gemm_rounded for
 * bf16 and m reads its weight whole (a weight fetched in pieces, ZeRO-3's, is rounded per GEMM). */
int dp_linear_operands_used(const dp_module *m);

/* Backend memory of the copies of Linear m for max_rows rows (its rounded_operand_bytes). */
size_t dp_linear_operands_bytes(const dp_module *m, int max_rows);

/* Rounds x (n values) into copy `which`, allocating the copies at their first use (an eager
 * step's, before any CUDA graph capture, after the model's plan is final), and returns it held;
 * NULL with the error recorded. X or dY that arrives in bf16 is x itself. */
const void *dp_linear_operands_round(dp_linear_operands *o, const dp_module *m, const dp_backend *be, dp_held which,
                                     const float *x, size_t n);
/* Copy `which` of x: the held one, else x rounded now; spent marks it spent after this read. */
const void *dp_linear_operands_read(dp_linear_operands *o, const dp_module *m, const dp_backend *be, dp_held which,
                                    const float *x, size_t n, int spent);

void dp_linear_operands_free(dp_linear_operands *o, const dp_backend *be);

#endif
