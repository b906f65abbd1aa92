/* nn.ReLU. After a Linear the model folds it into that layer (see linear.c) and this module
 * passes data through; elsewhere (after BatchNorm or Dropout) it runs on its own. */
#include "src/nn/module.h"

static int relu_configure(dp_module *m, const char *spec)
{
    (void)spec;
    m->out_shape = m->in_shape;
    return 0;
}

static int relu_allocate(dp_module *m, const dp_backend *be, int max_rows)
{
    if (m->absorbed)
        return 0;
    return dp_module_alloc(be, (size_t)max_rows * m->out_width, DP_MEM_ACTIVATIONS, "a ReLU's output", &m->out);
}

static int relu_forward(dp_module *m, const dp_nn_context *ctx, const float *x, int rows, const float **y)
{
    if (m->absorbed) {
        *y = x;
        return 0;
    }
    ctx->be->relu_forward(ctx->be, m->out, x, (size_t)rows * m->out_width);
    *y = m->out;
    return 0;
}

/* In place: dy becomes dx. An absorbed ReLU's mask is applied by its Linear. */
static int relu_backward_input(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy,
                               float *dx, int rows, float **dx_out)
{
    (void)x;
    (void)dx;
    if (!m->absorbed)
        ctx->be->relu_backward(ctx->be, dy, m->out, (size_t)rows * m->out_width);
    *dx_out = dy;
    return 0;
}

static void relu_release(dp_module *m, const dp_backend *be)
{
    be->free(be, m->out);
}

const dp_module_type dp_module_relu = {
    .name = "relu",
    .configure = relu_configure,
    .allocate = relu_allocate,
    .forward = relu_forward,
    .backward_input = relu_backward_input,
    .release = relu_release,
};
