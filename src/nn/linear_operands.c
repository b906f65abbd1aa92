/* A Linear's bf16 GEMM operands held across its passes (linear_operands.h). The copies are
 * charged to the allocation counter as activations: X and dY grow with the rows, as module
 * outputs do, and W's copy lives as long. */
#include "src/nn/linear_operands.h"

#include "dp/error.h"

/* Each copy sits as the backend's per-GEMM copies do (bits depend on the alignment). */
#define ALIGN_VALUES (DP_GEMM_OPERAND_ALIGN / sizeof(uint16_t))

static size_t aligned(size_t values)
{
    return (values + ALIGN_VALUES - 1) / ALIGN_VALUES * ALIGN_VALUES;
}

void dp_linear_operands_prepare(dp_linear_operands *o, const dp_backend *be, int max_rows)
{
    char why[256];
    o->max_rows = max_rows;
    o->rounds = be->gemm_rounded && be->supports(be, "gemm_rounded", DP_DTYPE_BF16, why, sizeof why);
}

int dp_linear_operands_used(const dp_module *m)
{
    return ((const dp_linear_operands *)m->state)->rounds && !dp_module_fetches(m);
}

/* Each copy's values: X [rows, in] and dY [rows, out] unless they arrive in bf16, W [out, in],
 * the bias [out] where the output is bf16. */
static void capacities(const dp_module *m, int max_rows, size_t values[DP_HELDS])
{
    size_t in = (size_t)m->in_width, out = (size_t)m->out_width;
    values[DP_HELD_X] = m->bf16_in ? 0 : (size_t)max_rows * in;
    values[DP_HELD_W] = out * in;
    values[DP_HELD_DY] = m->bf16_dy ? 0 : (size_t)max_rows * out;
    values[DP_HELD_BIAS] = m->bf16_out && m->options.bias ? out : 0;
}

size_t dp_linear_operands_bytes(const dp_module *m, int max_rows)
{
    size_t values[DP_HELDS], total = 0;
    capacities(m, max_rows, values);
    for (int i = 0; i < DP_HELDS; i++)
        total += aligned(values[i]);
    return total * 2;
}

/* X or dY handed over already bf16 by the layer that wrote it: read as it is. */
static int arrives_bf16(const dp_module *m, dp_held which)
{
    return (which == DP_HELD_X && m->bf16_in) || (which == DP_HELD_DY && m->bf16_dy);
}

static int allocate(dp_linear_operands *o, const dp_module *m, const dp_backend *be)
{
    size_t values[DP_HELDS];
    capacities(m, o->max_rows, values);
    unsigned char *base = be->alloc(be, dp_linear_operands_bytes(m, o->max_rows),
                                    DP_MEM_ACTIVATIONS, "a Linear's bf16 copies of its input, weight and output gradient");
    if (!base)
        return DP_ENOMEM;
    for (int i = 0; i < DP_HELDS; i++) {
        o->copy[i] = base;
        base += aligned(values[i]) * 2;
    }
    return 0;
}

const void *dp_linear_operands_round(dp_linear_operands *o, const dp_module *m, const dp_backend *be, dp_held which,
                                     const float *x, size_t n)
{
    if (!o->copy[0] && allocate(o, m, be))
        return NULL;
    if (arrives_bf16(m, which))
        return x;
    be->round_operand(be, o->copy[which], x, n);
    o->of[which] = x;
    return o->copy[which];
}

const void *dp_linear_operands_read(dp_linear_operands *o, const dp_module *m, const dp_backend *be, dp_held which,
                                    const float *x, size_t n, int spent)
{
    if (arrives_bf16(m, which))
        return x;
    const void *copy = o->of[which] == x ? o->copy[which] : dp_linear_operands_round(o, m, be, which, x, n);
    if (spent)
        o->of[which] = NULL;
    return copy;
}

void dp_linear_operands_free(dp_linear_operands *o, const dp_backend *be)
{
    if (o->copy[0])
        be->free(be, o->copy[0]);
    *o = (dp_linear_operands){0};
}
