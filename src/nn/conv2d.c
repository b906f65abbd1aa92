/* nn.Conv2d on [C, H, W] samples, square kernels, weight [out, in, k, k] as PyTorch stores it.
 * Lowered to GEMMs: im2col makes a row of the C k k taps under each of a sample's P windows,
 * col [P, C k k] per sample, and W col^T is that sample's output [out, P] in PyTorch's layout;
 * the bias adds as a rank-1 product with a row of ones. Backward: dW (+)= dy col, db (+)= dy
 * ones, dcol = dy^T W, which col2im folds back into the image. Every buffer is sized for
 * max_rows before the first step. */
#include "src/nn/module.h"

#include "dp/error.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

static const dp_module_arg conv2d_args[] = {
    {"out", DP_ARG_INT, offsetof(dp_module_options, out_features), 1, 1 << 20, 0, 1, "output channels"},
    {"k", DP_ARG_INT, offsetof(dp_module_options, kernel), 1, 1 << 12, 0, 1, "the square kernel's side"},
    {"stride", DP_ARG_INT, offsetof(dp_module_options, stride), 1, 1 << 12, 0, 0, "step between windows"},
    {"padding", DP_ARG_INT, offsetof(dp_module_options, padding), 0, 1 << 12, 0, 0, "zeros on each side"},
    {"bias", DP_ARG_BOOL, offsetof(dp_module_options, bias), 0, 1, 0, 0, "1 adds a learned bias per channel"},
};

typedef struct conv_state {
    dp_window window; /* set by allocate */
    float *col;  /* forward: the lowered input; backward: its gradient */
    float *ones; /* P ones: the bias as a rank-1 product */
} conv_state;

/* The window of options o over image `in`; 0, or -1 when the kernel does not fit the padded
 * image (out_h or out_w would be < 1). */
static int conv_window(const dp_module_options *o, const dp_dims *in, dp_window *w)
{
    *w = (dp_window){.kernel_h = o->kernel, .kernel_w = o->kernel, .stride = o->stride, .padding = o->padding};
    if (in->ndim != 3)
        return -1;
    w->channels = (int)in->dim[0];
    w->height = (int)in->dim[1];
    w->width = (int)in->dim[2];
    int64_t padded_h = in->dim[1] + 2 * (int64_t)o->padding, padded_w = in->dim[2] + 2 * (int64_t)o->padding;
    if (padded_h < o->kernel || padded_w < o->kernel)
        return -1;
    w->out_h = (int)((padded_h - o->kernel) / o->stride + 1);
    w->out_w = (int)((padded_w - o->kernel) / o->stride + 1);
    return 0;
}

static size_t taps(const dp_window *w)
{
    return (size_t)w->channels * w->kernel_h * w->kernel_w;
}

static size_t positions(const dp_window *w)
{
    return (size_t)w->out_h * w->out_w;
}

/* The window of a configured module (its input fits, configure checked). */
static dp_window window_of(const dp_module *m)
{
    dp_window w;
    conv_window(&m->options, &m->in_shape, &w);
    return w;
}

static int conv2d_configure(dp_module *m, const char *spec)
{
    dp_window w;
    char text[64];
    dp_dims_text(&m->in_shape, text, sizeof text);
    if (m->in_shape.ndim != 3)
        return dp_fail(DP_EINVAL, "--model '%s': module %d (conv2d) needs images [C, H, W] but gets %s "
                       "(image data, an .npy of [N, C, H, W], or a conv2d or pool before it)", spec, m->index, text);
    const dp_module_options *o = &m->options;
    if (conv_window(o, &m->in_shape, &w))
        return dp_fail(DP_EINVAL, "--model '%s': module %d (conv2d): kernel %dx%d is larger than its input %s "
                       "padded by %d on each side", spec, m->index, o->kernel, o->kernel, text, o->padding);
    m->out_shape = (dp_dims){.ndim = 3, .dim = {o->out_features, w.out_h, w.out_w}};
    return 0;
}

static size_t conv2d_size(const dp_module_options *o, const dp_dims *in, dp_dims *out, int *overflow)
{
    dp_window w;
    if (conv_window(o, in, &w)) { /* an unknown or unfitting input: nothing counted */
        *out = dp_dims_features(0);
        return 0;
    }
    *out = (dp_dims){.ndim = 3, .dim = {o->out_features, w.out_h, w.out_w}};
    size_t weights = (size_t)o->out_features * taps(&w);
    *overflow |= taps(&w) > SIZE_MAX / (size_t)o->out_features;
    return weights + (size_t)o->out_features * (size_t)o->bias;
}

static void conv2d_describe(const dp_module *m, char *text, size_t size)
{
    const dp_module_options *o = &m->options;
    snprintf(text, size, "(%d, %dx%d, stride %d, padding %d%s)", o->out_features, o->kernel, o->kernel, o->stride,
             o->padding, o->bias ? "" : ", no bias");
}

static int conv2d_declare(dp_module *m, dp_param_table *params, dp_param_table *buffers, const char *prefix)
{
    (void)buffers;
    dp_window w = window_of(m);
    int64_t weight_shape[4] = {m->options.out_features, w.channels, w.kernel_h, w.kernel_w};
    return dp_module_declare_layer(m, params, prefix, 4, weight_shape);
}

/* PyTorch's default with fan_in = C k k, one draw per parameter in flat order. */
static void conv2d_init(const dp_module *m, dp_rng *rng, size_t first, size_t count, float *params)
{
    (void)first;
    dp_window w = window_of(m);
    dp_module_init_layer(rng, params, count, taps(&w));
}

static int conv2d_allocate(dp_module *m, const dp_backend *be, int max_rows)
{
    conv_state *s = m->state;
    s->window = window_of(m);
    size_t windows = (size_t)max_rows * positions(&s->window);
    int status = dp_module_alloc(be, (size_t)max_rows * m->out_width, DP_MEM_ACTIVATIONS, "a Conv2d's output", &m->out);
    if (!status)
        status = dp_module_alloc(be, windows * taps(&s->window), DP_MEM_ACTIVATIONS, "a Conv2d's lowered input",
                                 &s->col);
    if (!status && m->options.bias)
        status = dp_module_alloc(be, positions(&s->window), DP_MEM_ACTIVATIONS, "a Conv2d's row of ones", &s->ones);
    for (size_t p = 0; !status && s->ones && p < positions(&s->window); p++)
        be->upload(be, s->ones + p, &(float){1.0f}, sizeof(float));
    return status;
}

static const float *bias_of(const dp_module *m, const float *weights)
{
    return m->options.bias ? weights + (size_t)m->options.out_features * taps(&((conv_state *)m->state)->window)
                           : NULL;
}

/* Each sample's output channels from a bias (backend memory) of out_features floats. */
static void add_bias(dp_module *m, const dp_backend *be, const float *bias, int rows)
{
    conv_state *s = m->state;
    int out = m->options.out_features, p = (int)positions(&s->window);
    for (int n = 0; n < rows; n++)
        be->gemm(be, 0, 0, out, p, 1, 1.0f, bias, 1, s->ones, p, 1.0f, m->out + (size_t)n * m->out_width, p);
}

/* Under a ZeRO budget the weight is read in blocks of out-channel rows (ascending offsets, as
 * the strategy prefetches them): each sample's output channels [first, end) from its rows. */
static int forward_in_pieces(dp_module *m, const dp_nn_context *ctx, int rows)
{
    conv_state *s = m->state;
    const dp_backend *be = ctx->be;
    size_t k = taps(&s->window), p = positions(&s->window), out = (size_t)m->options.out_features;
    size_t per = dp_module_rows_per_block(m, m->param_pieces->max_floats), first, end;
    int status = 0;
    for (size_t j = dp_module_row_blocks(m, per); !status && j-- > 0;) {
        const float *w;
        dp_module_block_rows(m, per, j, &first, &end);
        if ((status = dp_module_fetch(m, first * k, (end - first) * k, &w)))
            break;
        for (int n = 0; n < rows; n++)
            be->gemm(be, 0, 1, (int)(end - first), (int)p, (int)k, 1.0f, w, (int)k, s->col + (size_t)n * p * k, (int)k,
                     0.0f, m->out + (size_t)n * m->out_width + first * p, (int)p);
    }
    const float *bias;
    if (!status && m->options.bias && !(status = dp_module_fetch(m, out * k, out, &bias)))
        add_bias(m, be, bias, rows);
    return status;
}

static int conv2d_forward(dp_module *m, const dp_nn_context *ctx, const float *x, int rows, const float **y)
{
    conv_state *s = m->state;
    const dp_backend *be = ctx->be;
    int k = (int)taps(&s->window), out = m->options.out_features, p = (int)positions(&s->window);
    be->im2col(be, x, s->col, rows, &s->window);
    *y = m->out;
    if (dp_module_fetches(m))
        return forward_in_pieces(m, ctx, rows);
    for (int n = 0; n < rows; n++)
        be->gemm(be, 0, 1, out, p, k, 1.0f, m->weights, k, s->col + (size_t)n * p * k, k, 0.0f,
                 m->out + (size_t)n * m->out_width, p);
    if (m->options.bias)
        add_bias(m, be, bias_of(m, m->weights), rows);
    return 0;
}

/* db (+)= each sample's output-channel sums of dY, then dW (+)= dY_n col_n summed over the
 * samples, in blocks of out-channel rows when pieces are wanted, the last first (Linear's
 * order); each piece reported as it is final. */
static int conv2d_backward_params(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy, int rows,
                                  const dp_grad_pieces *pieces)
{
    (void)x;
    conv_state *s = m->state;
    const dp_backend *be = ctx->be;
    size_t k = taps(&s->window), p = positions(&s->window), out = (size_t)m->options.out_features;
    float *into;
    int status = 0;
    if (m->options.bias && !(status = dp_grad_pieces_place(pieces, m, out * k, out, &into))) {
        if (rows == 0 && !ctx->accumulate) /* a rank without rows contributes zeros */
            be->zero(be, into, out);
        for (int n = 0; n < rows; n++)
            be->gemm(be, 0, 0, (int)out, 1, (int)p, 1.0f, dy + (size_t)n * m->out_width, (int)p, s->ones, 1,
                     n > 0 || ctx->accumulate ? 1.0f : 0.0f, into, 1);
        status = dp_grad_pieces_ready(pieces, m, out * k, out);
    }
    size_t per = dp_module_rows_per_block(m, pieces->max_floats), first, end;
    for (size_t j = 0; !status && j < dp_module_row_blocks(m, per); j++) {
        dp_module_block_rows(m, per, j, &first, &end);
        size_t at = first * k, count = (end - first) * k;
        if ((status = dp_grad_pieces_place(pieces, m, at, count, &into)))
            break;
        if (rows == 0 && !ctx->accumulate)
            be->zero(be, into, count);
        for (int n = 0; n < rows; n++)
            be->gemm(be, 0, 0, (int)(end - first), (int)k, (int)p, 1.0f, dy + (size_t)n * m->out_width + first * p,
                     (int)p, s->col + (size_t)n * p * k, (int)k, n > 0 || ctx->accumulate ? 1.0f : 0.0f, into, (int)k);
        status = dp_grad_pieces_ready(pieces, m, at, count);
    }
    return status;
}

/* col_n = dY_n^T W as a sum over W's blocks of out-channel rows, the last first (backward's order). */
static int input_grad_in_pieces(dp_module *m, const dp_nn_context *ctx, const float *dy, int rows)
{
    conv_state *s = m->state;
    size_t k = taps(&s->window), p = positions(&s->window);
    size_t per = dp_module_rows_per_block(m, m->param_pieces->max_floats), first, end;
    int status = 0;
    for (size_t j = 0; !status && j < dp_module_row_blocks(m, per); j++) {
        const float *w;
        dp_module_block_rows(m, per, j, &first, &end);
        if ((status = dp_module_fetch(m, first * k, (end - first) * k, &w)))
            break;
        for (int n = 0; n < rows; n++)
            ctx->be->gemm(ctx->be, 1, 0, (int)p, (int)k, (int)(end - first), 1.0f,
                          dy + (size_t)n * m->out_width + first * p, (int)p, w, (int)k, j ? 1.0f : 0.0f,
                          s->col + (size_t)n * p * k, (int)k);
    }
    return status;
}

/* After backward_params, which needed col: its gradient overwrites it. */
static int conv2d_backward_input(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy,
                                 float *dx, int rows, float **dx_out)
{
    (void)x;
    conv_state *s = m->state;
    int k = (int)taps(&s->window), out = m->options.out_features, p = (int)positions(&s->window);
    int status = dp_module_fetches(m) ? input_grad_in_pieces(m, ctx, dy, rows) : 0;
    for (int n = 0; !dp_module_fetches(m) && n < rows; n++)
        ctx->be->gemm(ctx->be, 1, 0, p, k, out, 1.0f, dy + (size_t)n * m->out_width, p, m->weights, k, 0.0f,
                      s->col + (size_t)n * p * k, k);
    if (!status)
        ctx->be->col2im(ctx->be, s->col, dx, rows, &s->window);
    *dx_out = dx;
    return status;
}

static void conv2d_release(dp_module *m, const dp_backend *be)
{
    conv_state *s = m->state;
    be->free(be, m->out);
    be->free(be, s->col);
    be->free(be, s->ones);
}

const dp_module_type dp_module_conv2d = {
    .name = "conv2d",
    .args = conv2d_args,
    .nargs = DP_COUNT(conv2d_args),
    .defaults = {.bias = 1, .stride = 1},
    .state_size = sizeof(conv_state),
    .structural = 1,
    .spatial = 1,
    .weight_rows = 1,
    .size = conv2d_size,
    .describe = conv2d_describe,
    .configure = conv2d_configure,
    .declare = conv2d_declare,
    .init_params = conv2d_init,
    .draws = 1,
    .allocate = conv2d_allocate,
    .forward = conv2d_forward,
    .backward_params = conv2d_backward_params,
    .backward_input = conv2d_backward_input,
    .release = conv2d_release,
};
