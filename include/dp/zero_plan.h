/* What each ZeRO stage holds per rank, predicted: the parameters, gradients and optimizer
 * state (persistent, sharded by stage as the ZeRO paper's P_os, P_os+g, P_os+g+p) and the
 * working buffers the stage adds (gradient buckets in flight, gathered parameters). The
 * banner sets it beside what the allocation counter measured; --memory-plan prints it for
 * any model size and precision assumption without training. */
#ifndef DP_ZERO_PLAN_H
#define DP_ZERO_PLAN_H

#include <stddef.h>

/* A working slot holds its bucket or unit at the offset it has in the flat buffers modulo 256
 * bytes, so a GEMM's operands there have DDP's alignment: cuBLAS picks its kernels, and so the
 * bits, by the pointers' alignment. Each slot is that much larger than what it holds. */
#define DP_ZERO_SLOT_ALIGN_FLOATS 64

/* The floats a working slot for n floats takes (0: unknown stays 0). */
size_t dp_zero_slot_floats(size_t n);
/* Where a slot's contents start: at `offset` (in the flat buffers) modulo the alignment. */
float *dp_zero_aligned_like(float *base, size_t offset);

typedef struct dp_zero_plan_input {
    size_t params;           /* Psi: trainable parameters */
    int world, rank;         /* whose shard: sizes differ by at most one (rank 0's is the largest) */
    double param_bytes;      /* per parameter: the parameters as the model computes with them */
    double grad_bytes;       /* the gradients */
    double state_bytes;      /* optimizer state (AdamW: two moments; mixed precision adds the FP32 master copy) */
    size_t bucket_floats;    /* the largest gradient bucket (0: unknown) */
    size_t unit_floats;      /* the largest unit stage 3 gathers: a module, or under a budget a block
                              * of its rows (0: unknown) */
    int grad_slots;          /* buckets in flight at once in stages 2 and 3 (2 with overlap) */
    int gather_slots;        /* units gathered at once in stage 3 (the current and the next) */
    double live_bytes;       /* --zero-live-mb as resolved (0: unlimited), for reports */
} dp_zero_plan_input;

typedef struct dp_zero_plan {
    double params, grads, optimizer, working; /* bytes */
} dp_zero_plan;

dp_zero_plan dp_zero_predict(const dp_zero_plan_input *in, int stage);

/* params + grads + optimizer (what the ZeRO paper and the documents' tables count). */
static inline double dp_zero_plan_model_bytes(const dp_zero_plan *p)
{
    return p->params + p->grads + p->optimizer;
}

#endif
