/* nn.Flatten: a sample's [C, H, W] becomes [C H W] features in the same order; the data
 * passes through untouched both ways. */
#include "src/nn/module.h"

static int flatten_configure(dp_module *m, const char *spec)
{
    (void)spec;
    m->out_shape = dp_dims_features(dp_dims_numel(&m->in_shape));
    return 0;
}

static size_t flatten_size(const dp_module_options *o, const dp_dims *in, dp_dims *out, int *overflow)
{
    (void)o;
    (void)overflow;
    *out = dp_dims_features(dp_dims_numel(in));
    return 0;
}

static int flatten_forward(dp_module *m, const dp_nn_context *ctx, const float *x, int rows, const float **y)
{
    (void)m;
    (void)ctx;
    (void)rows;
    *y = x;
    return 0;
}

static int flatten_backward_input(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy, float *dx,
                                  int rows, float **dx_out)
{
    (void)m;
    (void)ctx;
    (void)x;
    (void)dx;
    (void)rows;
    *dx_out = dy;
    return 0;
}

const dp_module_type dp_module_flatten = {
    .name = "flatten",
    .size = flatten_size,
    .configure = flatten_configure,
    .forward = flatten_forward,
    .backward_input = flatten_backward_input,
};
