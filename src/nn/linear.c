/* nn.Linear: y = x W^T + b with W [out, in] row-major, as PyTorch stores it. When a ReLU
 * follows, the model folds it in here (one pass for bias and activation; the ReLU module then
 * passes data through), which leaves every result bit as a separate ReLU would. */
#include "src/nn/module.h"

#include "dp/error.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

static const dp_module_arg linear_args[] = {
    {"out", DP_ARG_INT, offsetof(dp_module_options, out_features), 1, 1 << 30, 0, 1, "output features"},
    {"bias", DP_ARG_BOOL, offsetof(dp_module_options, bias), 0, 1, 0, 0, "1 adds a learned bias"},
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

static void linear_init(const dp_module *m, dp_rng *rng, float *params, float *buffers, int64_t *counters)
{
    (void)buffers;
    (void)counters;
    dp_module_init_layer(m, rng, params, (size_t)m->in_width);
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

static int linear_allocate(dp_module *m, const dp_backend *be, int max_rows)
{
    return dp_module_alloc(be, (size_t)max_rows * m->out_width, DP_MEM_ACTIVATIONS, "a Linear layer's output", &m->out);
}

static const float *bias_of(const dp_module *m, const float *weights)
{
    return m->options.bias ? weights + (size_t)m->out_width * m->in_width : NULL;
}

static int linear_forward(dp_module *m, const dp_nn_context *ctx, const float *x, int rows, const float **y)
{
    const dp_backend *be = ctx->be;
    int in = m->in_width, out = m->out_width;
    be->gemm(be, 0, 1, rows, out, in, 1.0f, x, in, m->weights, in, 0.0f, m->out, out);
    if (m->options.bias || m->absorbs_next)
        be->bias_act_forward(be, m->out, bias_of(m, m->weights), rows, out, m->absorbs_next);
    *y = m->out;
    return 0;
}

static int linear_backward_params(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy, int rows,
                                  const dp_grad_pieces *pieces)
{
    const dp_backend *be = ctx->be;
    int in = m->in_width, out = m->out_width;
    size_t weight = (size_t)out * in;
    int status = 0;
    if (m->absorbs_next)
        be->relu_backward(be, dy, m->out, (size_t)rows * out);
    /* db (+)= column sums of dY: the end of the slice, where backward-order buckets begin. */
    if (m->options.bias) {
        be->bias_grad(be, dy, rows, out, m->grads + weight, ctx->accumulate);
        status = dp_grad_pieces_ready(pieces, m, weight, (size_t)out);
    }
    /* dW (+)= dY^T X, rows [first, end) of dW from columns [first, end) of dY: in blocks of
     * rows when pieces are wanted, the last first. */
    size_t block = pieces->max_floats ? pieces->max_floats / (size_t)in : (size_t)out;
    block = block < 1 ? 1 : block;
    for (size_t end = (size_t)out; !status && end > 0;) {
        size_t first = end > block ? end - block : 0;
        be->gemm(be, 1, 0, (int)(end - first), in, rows, 1.0f, dy + first, out, x, in, ctx->accumulate ? 1.0f : 0.0f,
                 m->grads + first * (size_t)in, in);
        status = dp_grad_pieces_ready(pieces, m, first * (size_t)in, (end - first) * (size_t)in);
        end = first;
    }
    return status;
}

static int linear_backward_input(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy,
                                 float *dx, int rows, float **dx_out)
{
    (void)x;
    int in = m->in_width, out = m->out_width;
    ctx->be->gemm(ctx->be, 0, 0, rows, in, out, 1.0f, dy, out, m->weights, in, 0.0f, dx, in);
    *dx_out = dx;
    return 0;
}

static void linear_release(dp_module *m, const dp_backend *be)
{
    be->free(be, m->out);
}

const dp_module_type dp_module_linear = {
    .name = "linear",
    .args = linear_args,
    .nargs = DP_COUNT(linear_args),
    .defaults = {.bias = 1},
    .absorbs = &dp_module_relu,
    .structural = 1,
    .needs_features = 1,
    .size = linear_size,
    .describe = linear_describe,
    .configure = linear_configure,
    .declare = linear_declare,
    .init = linear_init,
    .allocate = linear_allocate,
    .forward = linear_forward,
    .backward_params = linear_backward_params,
    .backward_input = linear_backward_input,
    .release = linear_release,
};
