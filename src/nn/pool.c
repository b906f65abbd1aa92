/* nn.MaxPool2d and nn.AvgPool2d on [C, H, W] samples: square windows of side k moved by
 * stride (k when not given), padded by at most k/2 on each side (max pooling's padding never
 * wins, average pooling's counts as zeros: PyTorch's count_include_pad), windows that would pass
 * the edge left out (PyTorch's floor mode). Max pooling's gradient goes to each window's first
 * maximum, as PyTorch's. globalavgpool is nn.AdaptiveAvgPool2d(1): one window over the whole
 * image, [C, H, W] to [C, 1, 1]. */
#include "src/nn/module.h"

#include "dp/error.h"

#include <stddef.h>
#include <stdio.h>

static const dp_module_arg pool_args[] = {
    {"k", DP_ARG_INT, offsetof(dp_module_options, kernel), 1, 1 << 12, 0, "2", "the square window's side"},
    {"stride", DP_ARG_INT, offsetof(dp_module_options, stride), 1, 1 << 12, 0, NULL,
     "step between windows (default: k)"},
    {"padding", DP_ARG_INT, offsetof(dp_module_options, padding), 0, 1 << 11, 0, NULL,
     "each side's padding, at most k/2"},
};

static dp_pool pool_kind(const dp_module *m)
{
    return m->type == &dp_module_maxpool ? DP_POOL_MAX : DP_POOL_AVG;
}

/* The window of pool type `type` with options o over `in`: 0, or -1 as dp_window_over. */
static int window_of(const dp_module_type *type, const dp_module_options *o, const dp_dims *in, dp_window *w)
{
    if (type != &dp_module_globalavgpool)
        return dp_window_over(o, in, w);
    if (in->ndim != 3)
        return -1;
    int h = (int)in->dim[1], v = (int)in->dim[2];
    *w = (dp_window){.channels = (int)in->dim[0], .height = h, .width = v, .kernel_h = h, .kernel_w = v, .stride = 1,
                     .out_h = 1, .out_w = 1};
    return 0;
}

static dp_window window(const dp_module *m)
{
    dp_window w;
    window_of(m->type, &m->options, &m->in_shape, &w);
    return w;
}

static int pool_configure(dp_module *m, const char *spec)
{
    dp_window w;
    if (2 * m->options.padding > m->options.kernel)
        return dp_fail(DP_EINVAL, "--model '%s': module %d (%s): padding=%d is more than half the window k=%d "
                       "(a window of padding alone; PyTorch refuses it too)", spec, m->index, m->type->name,
                       m->options.padding, m->options.kernel);
    int status = m->type == &dp_module_globalavgpool ? dp_window_configure_image(m, spec)
                                                    : dp_window_configure(m, spec, "window", &w);
    if (!status)
        window_of(m->type, &m->options, &m->in_shape, &w);
    if (!status)
        m->out_shape = (dp_dims){.ndim = 3, .dim = {w.channels, w.out_h, w.out_w}};
    return status;
}

static size_t pool_size(const dp_module_options *o, const dp_dims *in, dp_dims *out, int *overflow)
{
    (void)overflow;
    dp_window w;
    *out = dp_window_over(o, in, &w) ? dp_dims_features(0)
                                     : (dp_dims){.ndim = 3, .dim = {w.channels, w.out_h, w.out_w}};
    return 0;
}

static size_t global_size(const dp_module_options *o, const dp_dims *in, dp_dims *out, int *overflow)
{
    (void)overflow;
    dp_window w;
    *out = window_of(&dp_module_globalavgpool, o, in, &w) ? dp_dims_features(0)
                                                          : (dp_dims){.ndim = 3, .dim = {w.channels, 1, 1}};
    return 0;
}

static void pool_describe(const dp_module *m, char *text, size_t size)
{
    dp_window w = window(m);
    if (w.padding)
        snprintf(text, size, "(%dx%d, stride %d, padding %d)", w.kernel_h, w.kernel_w, w.stride, w.padding);
    else
        snprintf(text, size, "(%dx%d, stride %d)", w.kernel_h, w.kernel_w, w.stride);
}

static int pool_allocate(dp_module *m, const dp_backend *be, int max_rows)
{
    return dp_module_alloc(be, (size_t)max_rows * m->out_width, DP_MEM_ACTIVATIONS, "a pooling layer's output",
                           &m->out);
}

static int pool_forward(dp_module *m, const dp_nn_context *ctx, const float *x, int rows, const float **y)
{
    dp_window w = window(m);
    ctx->be->pool_forward(ctx->be, x, m->out, rows, &w, pool_kind(m));
    *y = m->out;
    return 0;
}

static int pool_backward_input(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy, float *dx,
                               int rows, float **dx_out)
{
    dp_window w = window(m);
    ctx->be->pool_backward(ctx->be, x, dy, dx, rows, &w, pool_kind(m));
    *dx_out = dx;
    return 0;
}

static void pool_release(dp_module *m, const dp_backend *be)
{
    be->free(be, m->out);
}

#define POOL_TYPE(type_name, type_args, type_nargs, size_of) \
    {                                         \
        .name = type_name,                    \
        .args = type_args,                    \
        .nargs = type_nargs,                  \
        .spatial = 1,                         \
        .size = size_of,                      \
        .describe = pool_describe,            \
        .configure = pool_configure,          \
        .allocate = pool_allocate,            \
        .forward = pool_forward,              \
        .backward_input = pool_backward_input, \
        .release = pool_release,              \
    }

const dp_module_type dp_module_maxpool = POOL_TYPE("maxpool", pool_args, DP_COUNT(pool_args), pool_size);
const dp_module_type dp_module_avgpool = POOL_TYPE("avgpool", pool_args, DP_COUNT(pool_args), pool_size);
const dp_module_type dp_module_globalavgpool = POOL_TYPE("globalavgpool", NULL, 0, global_size);
