/* nn.MaxPool2d and nn.AvgPool2d on [C, H, W] samples: square windows of side k moved by
 * stride (k when not given), no padding, windows that would pass the edge left out (PyTorch's
 * floor mode). Max pooling's gradient goes to each window's first maximum, as PyTorch's. */
#include "src/nn/module.h"

#include <stddef.h>
#include <stdio.h>

static const dp_module_arg pool_args[] = {
    {"k", DP_ARG_INT, offsetof(dp_module_options, kernel), 1, 1 << 12, 0, "2", "the square window's side"},
    {"stride", DP_ARG_INT, offsetof(dp_module_options, stride), 1, 1 << 12, 0, NULL,
     "step between windows (default: k)"},
};

static dp_pool pool_kind(const dp_module *m)
{
    return m->type == &dp_module_maxpool ? DP_POOL_MAX : DP_POOL_AVG;
}

static int pool_configure(dp_module *m, const char *spec)
{
    dp_window w;
    int status = dp_window_configure(m, spec, "window", &w);
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

static void pool_describe(const dp_module *m, char *text, size_t size)
{
    dp_window w = dp_module_window(m);
    snprintf(text, size, "(%dx%d, stride %d)", w.kernel_h, w.kernel_w, w.stride);
}

static int pool_allocate(dp_module *m, const dp_backend *be, int max_rows)
{
    return dp_module_alloc(be, (size_t)max_rows * m->out_width, DP_MEM_ACTIVATIONS, "a pooling layer's output",
                           &m->out);
}

static int pool_forward(dp_module *m, const dp_nn_context *ctx, const float *x, int rows, const float **y)
{
    dp_window w = dp_module_window(m);
    ctx->be->pool_forward(ctx->be, x, m->out, rows, &w, pool_kind(m));
    *y = m->out;
    return 0;
}

static int pool_backward_input(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy, float *dx,
                               int rows, float **dx_out)
{
    dp_window w = dp_module_window(m);
    ctx->be->pool_backward(ctx->be, x, dy, dx, rows, &w, pool_kind(m));
    *dx_out = dx;
    return 0;
}

static void pool_release(dp_module *m, const dp_backend *be)
{
    be->free(be, m->out);
}

#define POOL_TYPE(type_name)                  \
    {                                         \
        .name = type_name,                    \
        .args = pool_args,                    \
        .nargs = DP_COUNT(pool_args),         \
        .spatial = 1,                         \
        .size = pool_size,                    \
        .describe = pool_describe,            \
        .configure = pool_configure,          \
        .allocate = pool_allocate,            \
        .forward = pool_forward,              \
        .backward_input = pool_backward_input, \
        .release = pool_release,              \
    }

const dp_module_type dp_module_maxpool = POOL_TYPE("maxpool");
const dp_module_type dp_module_avgpool = POOL_TYPE("avgpool");
