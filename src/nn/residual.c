/* Residual blocks, torchvision's BasicBlock and Bottleneck: relu(body(x) + shortcut(x)). A residual
 * is flattened into the model's module list as markers around its modules:
 *
 *     residual, body..., shortcut, shortcut's modules (none: identity)..., add
 *
 * so the engine runs it module by module like any other, its strategy's hooks between them, and
 * the parameters lie in torchvision's order (the body's, then the downsample's). Forward:
 * `residual` keeps the residual's input x and passes it on; `shortcut` keeps the body's output and
 * gives its modules x again; `add` sums the two (and applies the ReLU). Backward runs the same
 * list in reverse: `add` keeps the sum's gradient g and hands it to the shortcut's modules;
 * `shortcut` keeps their gradient w.r.t. x and hands g to the body; `residual` adds the kept
 * gradient to the body's. The residual's state (what is kept) lives with its `residual`. */
#include "src/nn/module.h"

#include "dp/error.h"

#include <stddef.h>
#include <stdio.h>

typedef struct residual_state {
    const float *input;    /* forward: the residual's input x */
    const float *body_out; /* forward: body(x), until add */
    float *input_grad;     /* backward: the shortcut's gradient w.r.t. x, until the body's is added */
    float *sum_grad;       /* backward: the gradient of body(x) + shortcut(x), until the body takes it */
} residual_state;

/* Written on the residual, "residual(relu=0){...}"; its add applies them. */
static const dp_module_arg residual_args[] = {
    {"relu", DP_ARG_BOOL, offsetof(dp_module_options, relu), 0, 1, 0, NULL,
     "1 applies ReLU to body + shortcut (torchvision's BasicBlock and Bottleneck); 0 leaves the sum"},
};

static residual_state *state_of(const dp_module *m)
{
    return m->residual_open->state;
}

static int residual_configure(dp_module *m, const char *spec)
{
    (void)spec;
    m->out_shape = m->in_shape;
    return 0;
}

static int residual_allocate(dp_module *m, const dp_backend *be, int max_rows)
{
    residual_state *s = m->state;
    int status = dp_module_alloc(be, (size_t)max_rows * m->in_width, DP_MEM_ACTIVATIONS,
                                 "a residual block's shortcut gradient", &s->input_grad);
    return status ? status
                  : dp_module_alloc(be, (size_t)max_rows * m->residual_close->out_width, DP_MEM_ACTIVATIONS,
                                    "a residual block's sum gradient", &s->sum_grad);
}

static int residual_forward(dp_module *m, const dp_nn_context *ctx, const float *x, int rows, const float **y)
{
    (void)ctx;
    (void)rows;
    ((residual_state *)m->state)->input = x;
    *y = x;
    return 0;
}

/* The body's gradient w.r.t. x, in place, plus the shortcut's. */
static int residual_backward_input(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy, float *dx,
                                   int rows, float **dx_out)
{
    (void)x;
    (void)dx;
    ctx->be->accumulate(ctx->be, dy, ((residual_state *)m->state)->input_grad, (size_t)rows * m->in_width, 1);
    *dx_out = dy;
    return 0;
}

static void residual_release(dp_module *m, const dp_backend *be)
{
    residual_state *s = m->state;
    be->free(be, s->input_grad);
    be->free(be, s->sum_grad);
}

/* The shortcut's modules take the residual's input: its shape, whatever the body made. */
static int shortcut_configure(dp_module *m, const char *spec)
{
    (void)spec;
    m->out_shape = m->residual_open->in_shape;
    return 0;
}

static int shortcut_forward(dp_module *m, const dp_nn_context *ctx, const float *x, int rows, const float **y)
{
    (void)ctx;
    (void)rows;
    residual_state *s = state_of(m);
    s->body_out = x;
    *y = s->input;
    return 0;
}

/* Keeps the shortcut's gradient w.r.t. x; the body's backward starts from the sum's gradient. */
static int shortcut_backward_input(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy, float *dx,
                                   int rows, float **dx_out)
{
    (void)x;
    (void)dx;
    residual_state *s = state_of(m);
    ctx->be->accumulate(ctx->be, s->input_grad, dy, (size_t)rows * m->out_width, 0);
    *dx_out = s->sum_grad;
    return 0;
}

/* The body and the shortcut must make the same shape: the error names both. */
static int add_configure(dp_module *m, const char *spec)
{
    const dp_dims *body = &m->residual_split->in_shape, *shortcut = &m->in_shape;
    int same = body->ndim == shortcut->ndim;
    for (int d = 0; same && d < body->ndim; d++)
        same = body->dim[d] == shortcut->dim[d];
    if (!same) {
        char input[64], body_text[64], shortcut_text[64];
        dp_dims_text(&m->residual_open->in_shape, input, sizeof input);
        dp_dims_text(body, body_text, sizeof body_text);
        dp_dims_text(shortcut, shortcut_text, sizeof shortcut_text);
        return dp_fail(DP_EINVAL, "--model '%s': residual block %s (module %d): its body makes %s of its input %s "
                       "but its shortcut makes %s: they are added, so they must match (a projection shortcut, "
                       "e.g. '| conv2d(C, 1, stride=S, bias=0), batchnorm', makes the body's)", spec,
                       m->residual_open->name, m->residual_open->index, body_text, input, shortcut_text);
    }
    m->out_shape = m->in_shape;
    return 0;
}

static void add_describe(const dp_module *m, char *text, size_t size)
{
    snprintf(text, size, "(%s)", m->options.relu ? "relu" : "no relu");
}

static int add_allocate(dp_module *m, const dp_backend *be, int max_rows)
{
    return dp_module_alloc(be, (size_t)max_rows * m->out_width, DP_MEM_ACTIVATIONS, "a residual block's output",
                           &m->out);
}

static int add_forward(dp_module *m, const dp_nn_context *ctx, const float *x, int rows, const float **y)
{
    const dp_backend *be = ctx->be;
    size_t n = (size_t)rows * m->out_width;
    be->accumulate(be, m->out, state_of(m)->body_out, n, 0);
    be->accumulate(be, m->out, x, n, 1);
    if (m->options.relu)
        be->relu_forward(be, m->out, m->out, n);
    *y = m->out;
    return 0;
}

/* The sum's gradient, in place, kept for the body and passed on to the shortcut. */
static int add_backward_input(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy, float *dx,
                              int rows, float **dx_out)
{
    (void)x;
    (void)dx;
    const dp_backend *be = ctx->be;
    size_t n = (size_t)rows * m->out_width;
    if (m->options.relu)
        be->relu_backward(be, dy, m->out, n);
    be->accumulate(be, state_of(m)->sum_grad, dy, n, 0);
    *dx_out = dy;
    return 0;
}

static void add_release(dp_module *m, const dp_backend *be)
{
    be->free(be, m->out);
}

const dp_module_type dp_module_residual = {
    .name = "residual",
    .residual = DP_RESIDUAL_OPEN,
    .args = residual_args,
    .nargs = DP_COUNT(residual_args),
    .defaults = {.relu = 1},
    .state_size = sizeof(residual_state),
    .configure = residual_configure,
    .allocate = residual_allocate,
    .forward = residual_forward,
    .backward_input = residual_backward_input,
    .release = residual_release,
};

const dp_module_type dp_module_shortcut = {
    .name = "shortcut",
    .residual = DP_RESIDUAL_SPLIT,
    .structural = 1,
    .configure = shortcut_configure,
    .forward = shortcut_forward,
    .backward_input = shortcut_backward_input,
};

const dp_module_type dp_module_add = {
    .name = "add",
    .residual = DP_RESIDUAL_CLOSE,
    .describe = add_describe,
    .configure = add_configure,
    .allocate = add_allocate,
    .forward = add_forward,
    .backward_input = add_backward_input,
    .release = add_release,
};
