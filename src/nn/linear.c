/* nn.Linear: y = x W^T + b with W [out, in] row-major, as PyTorch stores it. When a ReLU
 * follows, the model folds it in here (one pass for bias and activation; the ReLU module then
 * passes data through), which leaves every result bit as a separate ReLU would. Where the
 * backend fuses GEMM epilogues (the model's plan, m->fused), that pass is the forward GEMM's
 * epilogue, the bias gradient the weight-gradient GEMM's, and a ReLU before this layer has its
 * backward in this layer's input-gradient GEMM. At --precision bf16 its GEMMs read X, W and dY
 * rounded once per micro-batch (linear_operands.h), and where the model's plan says so
 * (layer_plan.c) it writes its output in bf16 for the next Linear, or reads its input so. */
#include "src/nn/linear_operands.h"
#include "src/nn/module.h"

#include "dp/error.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

static const dp_module_arg linear_args[] = {
    {"out", DP_ARG_INT, offsetof(dp_module_options, out_features), 1, 1 << 30, 0, "256", "output features"},
    {"bias", DP_ARG_BOOL, offsetof(dp_module_options, bias), 0, 1, 0, NULL, "1 adds a learned bias"},
};

/* Any input shape: a sample's elements are its features (nn.Flatten then nn.Linear). */
static int linear_configure(dp_module *m, const char *spec)
{
    (void)spec;
    m->out_shape = dp_dims_features(m->options.out_features);
    return 0;
}

static int linear_declare(dp_module *m, dp_param_table *params, dp_param_table *buffers, const char *prefix)
{
    (void)buffers;
    int64_t weight_shape[2] = {m->out_width, m->in_width};
    return dp_module_declare_layer(m, params, prefix, 2, weight_shape);
}

/* PyTorch's default: weight and bias uniform in +-1/sqrt(fan_in), one draw per parameter. */
static void linear_init(const dp_module *m, dp_rng *rng, size_t first, size_t count, float *params)
{
    (void)first;
    dp_module_init_layer(rng, params, count, (size_t)m->in_width);
}

static size_t linear_size(const dp_module_options *o, const dp_dims *in, dp_dims *out_shape, int *overflow)
{
    size_t out = (size_t)o->out_features, count = out * (size_t)o->bias, in_width = (size_t)dp_dims_numel(in);
    *out_shape = dp_dims_features(o->out_features);
    if (in_width > SIZE_MAX / out || count > SIZE_MAX - in_width * out) {
        *overflow = 1;
        return 0;
    }
    return count + in_width * out;
}

static void linear_describe(const dp_module *m, char *text, size_t size)
{
    snprintf(text, size, "(%d)", m->out_width);
}

/* The output buffer for the plan now, bf16 or FP32 values. The plan only moves from bf16 to FP32
 * after allocation (ZeRO-3 making this layer or its reader fetch in pieces, at the engine's
 * start): the buffer then grows once, at the next forward. */
static int output_buffer(dp_module *m, const dp_backend *be)
{
    dp_linear_operands *o = m->state;
    size_t bytes = (size_t)o->max_rows * (size_t)m->out_width * (m->bf16_out ? 2 : sizeof(float));
    if (m->out && bytes <= o->out_bytes)
        return 0;
    be->free(be, m->out);
    o->out_bytes = 0;
    m->out = be->alloc(be, bytes ? bytes : 1, DP_MEM_ACTIVATIONS, "a Linear layer's output");
    if (!m->out)
        return DP_ENOMEM;
    o->out_bytes = bytes;
    return 0;
}

static int linear_allocate(dp_module *m, const dp_backend *be, int max_rows)
{
    dp_linear_operands_prepare(m->state, be, max_rows);
    int status = output_buffer(m, be);
    if (status || !(m->fused & DP_FUSE_MASK))
        return status;
    m->relu_mask = be->alloc(be, dp_relu_mask_bytes(max_rows, m->out_width), DP_MEM_ACTIVATIONS, "a ReLU's mask");
    return m->relu_mask ? 0 : DP_ENOMEM;
}

static const float *bias_of(const dp_module *m, const float *weights)
{
    return m->options.bias ? weights + (size_t)m->out_width * m->in_width : NULL;
}

/* y's columns [first, end) from W's rows [first, end), block by block (ascending offsets, as
 * the strategy prefetches them), then the bias. */
static int forward_in_pieces(dp_module *m, const dp_nn_context *ctx, const float *x, int rows)
{
    const dp_backend *be = ctx->be;
    int in = m->in_width, out = m->out_width;
    size_t per = dp_module_rows_per_block(m, m->param_pieces->max_floats), first, end;
    int status = 0;
    for (size_t j = dp_module_row_blocks(m, per); !status && j-- > 0;) {
        const float *w;
        dp_module_block_rows(m, per, j, &first, &end);
        if (!(status = dp_module_fetch(m, first * (size_t)in, (end - first) * (size_t)in, &w)))
            be->gemm(be, 0, 1, rows, (int)(end - first), in, 1.0f, x, in, w, in, 0.0f, m->out + first, out);
    }
    const float *bias = NULL;
    if (!status && m->options.bias)
        status = dp_module_fetch(m, (size_t)out * in, (size_t)out, &bias);
    if (!status && (bias || m->absorbs_next))
        be->bias_act_forward(be, m->out, bias, rows, out, m->absorbs_next);
    return status;
}

/* A bf16 activation: the GEMM writes it, with the bias's bf16 copy (cuBLASLt's bias takes the
 * output's type, as PyTorch's autocast casts it) and the ReLU applied in FP32 before rounding. */
static int forward_to_bf16(dp_module *m, const dp_backend *be, const void *x16, const void *w16, int rows,
                           dp_gemm_epilogue *e)
{
    int in = m->in_width, out = m->out_width;
    if (e->bias && !(e->bias16 = dp_linear_operands_round(m->state, m, be, DP_HELD_BIAS, e->bias, (size_t)out)))
        return DP_ENOMEM;
    e->bias = NULL;
    be->gemm_rounded_bf16(be, 0, 1, rows, out, in, 1.0f, x16, in, w16, in, m->out, out, e);
    return 0;
}

static int linear_forward(dp_module *m, const dp_nn_context *ctx, const float *x, int rows, const float **y)
{
    const dp_backend *be = ctx->be;
    int in = m->in_width, out = m->out_width;
    int status = output_buffer(m, be);
    if (status)
        return status;
    *y = m->out;
    if (dp_module_fetches(m))
        return forward_in_pieces(m, ctx, x, rows);
    dp_gemm_epilogue e = {.kind = DP_EPILOGUE_BIAS, .bias = bias_of(m, m->weights), .mask = m->relu_mask,
                          .mask_ld = dp_relu_mask_ld(out)};
    if (m->absorbs_next)
        e.kind = ctx->training && (m->fused & DP_FUSE_MASK) ? DP_EPILOGUE_RELU_MASK : DP_EPILOGUE_RELU;
    const dp_gemm_epilogue *fused = m->fused & DP_FUSE_FORWARD ? &e : NULL;
    if (dp_linear_operands_used(m)) {
        dp_linear_operands *o = m->state;
        const void *x16 = dp_linear_operands_round(o, m, be, DP_HELD_X, x, (size_t)rows * in);
        const void *w16 = x16 ? dp_linear_operands_round(o, m, be, DP_HELD_W, m->weights, (size_t)out * in) : NULL;
        if (!w16)
            return DP_ENOMEM;
        if (m->bf16_out)
            return forward_to_bf16(m, be, x16, w16, rows, &e);
        be->gemm_rounded(be, 0, 1, rows, out, in, 1.0f, x16, in, w16, in, 0.0f, m->out, out, fused);
    } else if (fused) {
        be->gemm_fused(be, 0, 1, rows, out, in, 1.0f, x, in, m->weights, in, 0.0f, m->out, out, fused);
    } else {
        be->gemm(be, 0, 1, rows, out, in, 1.0f, x, in, m->weights, in, 0.0f, m->out, out);
    }
    if (!fused && (m->options.bias || m->absorbs_next))
        be->bias_act_forward(be, m->out, bias_of(m, m->weights), rows, out, m->absorbs_next);
    return 0;
}

/* dW = dY^T X with db, dY's column sums, in the GEMM's epilogue; the bias reported first, as
 * the separate pass does. Only where both are overwritten whole (the epilogue overwrites db)
 * and the layer is one block, its bias included: a placing strategy (ZeRO-2/3 under a budget)
 * has then bound the module's gradients to its bucket's memory before backward, so the same
 * GEMM serves DDP and ZeRO alike (cuBLASLt sums db in its own order: a separate pass would
 * change the bits on a GPU). */
static int fused_param_grads(dp_module *m, const dp_nn_context *ctx, const float *x, const float *dy, int rows,
                             const dp_grad_pieces *pieces)
{
    int in = m->in_width, out = m->out_width;
    size_t weight = (size_t)out * in;
    dp_gemm_epilogue e = {.kind = DP_EPILOGUE_BIAS_GRAD, .bias_grad = m->grads + weight};
    ctx->be->gemm_fused(ctx->be, 1, 0, out, in, rows, 1.0f, dy, out, x, in, 0.0f, m->grads, in, &e);
    int status = dp_grad_pieces_ready(pieces, m, weight, (size_t)out);
    return status ? status : dp_grad_pieces_ready(pieces, m, 0, weight);
}

/* Rows [first, end) of dW (+)= columns [first, end) of dY^T X, block j of `blocks`. A layer of
 * one block reads the held copies: dY rounded here for backward_input too, X from forward,
 * spent. A block of dY's columns would sit in memory unlike the per-GEMM copy of it (and cuBLAS
 * picks kernels by alignment), so blocks round per GEMM, but for a bf16 input or dY, which have no
 * FP32 values to round: there each block reads its columns of dY's copy, rounded at the first. */
static int weight_grad(dp_module *m, const dp_nn_context *ctx, const float *x, const float *dy, int rows,
                       size_t first, size_t end, size_t j, size_t blocks, float *into)
{
    const dp_backend *be = ctx->be;
    int in = m->in_width, out = m->out_width;
    float beta = ctx->accumulate ? 1.0f : 0.0f;
    if ((blocks > 1 && !m->bf16_in && !m->bf16_dy) || !dp_linear_operands_used(m)) {
        be->gemm(be, 1, 0, (int)(end - first), in, rows, 1.0f, dy + first, out, x, in, beta, into, in);
        return 0;
    }
    dp_linear_operands *o = m->state;
    size_t n = (size_t)rows * out;
    const uint16_t *dy16 = j == 0 ? dp_linear_operands_round(o, m, be, DP_HELD_DY, dy, n)
                                  : dp_linear_operands_read(o, m, be, DP_HELD_DY, dy, n, 0);
    const void *x16 = dy16 ? dp_linear_operands_read(o, m, be, DP_HELD_X, x, (size_t)rows * in, j + 1 == blocks)
                           : NULL;
    if (!x16)
        return DP_ENOMEM;
    be->gemm_rounded(be, 1, 0, (int)(end - first), in, rows, 1.0f, dy16 + first, out, x16, in, beta, into, in, NULL);
    return 0;
}

static int linear_backward_params(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy, int rows,
                                  const dp_grad_pieces *pieces)
{
    const dp_backend *be = ctx->be;
    int in = m->in_width, out = m->out_width;
    size_t weight = (size_t)out * in;
    float *into;
    int status = 0;
    /* Under DP_FUSE_MASK the layer after the ReLU applied its backward already. */
    if (m->absorbs_next && !(m->fused & DP_FUSE_MASK))
        be->relu_backward(be, dy, m->out, (size_t)rows * out);
    size_t per = dp_module_rows_per_block(m, pieces->max_floats), first, end;
    if ((m->fused & DP_FUSE_BIAS_GRAD) && !ctx->accumulate && dp_module_row_blocks(m, per) == 1 &&
        (!pieces->place || m->param_count <= pieces->max_floats))
        return fused_param_grads(m, ctx, x, dy, rows, pieces);
    /* db (+)= column sums of dY: the end of the slice, where backward-order buckets begin. */
    if (m->options.bias && !(status = dp_grad_pieces_place(pieces, m, weight, (size_t)out, &into))) {
        be->bias_grad(be, dy, rows, out, into, ctx->accumulate);
        status = dp_grad_pieces_ready(pieces, m, weight, (size_t)out);
    }
    /* dW (+)= dY^T X, rows [first, end) of dW from columns [first, end) of dY: in blocks of
     * rows when pieces are wanted, the last first. */
    size_t blocks = dp_module_row_blocks(m, per);
    for (size_t j = 0; !status && j < blocks; j++) {
        dp_module_block_rows(m, per, j, &first, &end);
        size_t at = first * (size_t)in, count = (end - first) * (size_t)in;
        if (!(status = dp_grad_pieces_place(pieces, m, at, count, &into)) &&
            !(status = weight_grad(m, ctx, x, dy, rows, first, end, j, blocks, into)))
            status = dp_grad_pieces_ready(pieces, m, at, count);
    }
    return status;
}

/* dX's columns [first, end) = dY W[:, first:end), from W's blocks of whole columns as the
 * strategy gathers them: each element's sum over the out-features is one GEMM's, as unsharded. */
static int input_grad_in_pieces(dp_module *m, const dp_nn_context *ctx, const float *dy, float *dx, int rows)
{
    int in = m->in_width, out = m->out_width, status = 0;
    for (size_t first = 0, end; !status && first < (size_t)in; first = end) {
        const float *w;
        if (!(status = dp_module_fetch_columns(m, first, &end, &w)))
            ctx->be->gemm(ctx->be, 0, 0, rows, (int)(end - first), out, 1.0f, dy, out, w, (int)(end - first), 0.0f,
                          dx + first, in);
    }
    return status;
}

static int linear_backward_input(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy,
                                 float *dx, int rows, float **dx_out)
{
    (void)x;
    int in = m->in_width, out = m->out_width;
    *dx_out = dx;
    if (dp_module_fetches(m))
        return input_grad_in_pieces(m, ctx, dy, dx, rows);
    const dp_backend *be = ctx->be;
    dp_gemm_epilogue e = {.kind = DP_EPILOGUE_DRELU, .mask = m->drelu_of ? m->drelu_of->relu_mask : NULL,
                          .mask_ld = dp_relu_mask_ld(in)};
    const dp_gemm_epilogue *fused = m->drelu_of ? &e : NULL;
    if (dp_linear_operands_used(m)) { /* both copies spent: this is their last read */
        dp_linear_operands *o = m->state;
        const void *dy16 = dp_linear_operands_read(o, m, be, DP_HELD_DY, dy, (size_t)rows * out, 1);
        const void *w16 = dy16 ? dp_linear_operands_read(o, m, be, DP_HELD_W, m->weights, (size_t)out * in, 1) : NULL;
        if (!w16)
            return DP_ENOMEM;
        if (m->bf16_dx) /* the layer before reads it through GEMMs alone: DRELU, or nothing, then bf16 */
            be->gemm_rounded_bf16(be, 0, 0, rows, in, out, 1.0f, dy16, out, w16, in, dx, in,
                                  fused ? fused : &(dp_gemm_epilogue){.kind = DP_EPILOGUE_BIAS});
        else
            be->gemm_rounded(be, 0, 0, rows, in, out, 1.0f, dy16, out, w16, in, 0.0f, dx, in, fused);
    } else if (fused) {
        be->gemm_fused(be, 0, 0, rows, in, out, 1.0f, dy, out, m->weights, in, 0.0f, dx, in, fused);
    } else {
        be->gemm(be, 0, 0, rows, in, out, 1.0f, dy, out, m->weights, in, 0.0f, dx, in);
    }
    return 0;
}

static void linear_release(dp_module *m, const dp_backend *be)
{
    be->free(be, m->out);
    dp_linear_operands_free(m->state, be);
    if (m->relu_mask)
        be->free(be, m->relu_mask);
}

const dp_module_type dp_module_linear = {
    .name = "linear",
    .args = linear_args,
    .nargs = DP_COUNT(linear_args),
    .defaults = {.bias = 1},
    .absorbs = &dp_module_relu,
    .structural = 1,
    .weight_rows = 1,
    .fuses = 1,
    .state_size = sizeof(dp_linear_operands),
    .rounded_operand_bytes = dp_linear_operands_bytes,
    .needs_features = 1,
    .size = linear_size,
    .describe = linear_describe,
    .configure = linear_configure,
    .declare = linear_declare,
    .init_params = linear_init,
    .draws = 1,
    .allocate = linear_allocate,
    .forward = linear_forward,
    .backward_params = linear_backward_params,
    .backward_input = linear_backward_input,
    .release = linear_release,
};
