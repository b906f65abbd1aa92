/* nn.Dropout: in training each unit is zeroed with probability p and the rest scaled by
 * 1/(1-p). Masks are a hash of (seed, module, step, the sample's position in the step, unit),
 * never of the rank, so W ranks draw exactly the masks one rank draws. Eval mode and p = 0
 * pass data through. */
#include "src/nn/module.h"

#include "dp/rng.h"

#include <stddef.h>
#include <stdio.h>

static const dp_module_arg dropout_args[] = {
    {"p", DP_ARG_FLOAT, offsetof(dp_module_options, p), 0, 1, 1, NULL, "probability of zeroing a unit"},
};

typedef struct dropout_state {
    float *mask; /* this forward's: 1 / (1 - p) where kept, 0 where dropped */
} dropout_state;

static int dropout_configure(dp_module *m, const char *spec)
{
    (void)spec;
    m->out_shape = m->in_shape;
    return 0;
}

static void dropout_describe(const dp_module *m, char *text, size_t size)
{
    snprintf(text, size, "(%g)", m->options.p);
}

static int dropout_allocate(dp_module *m, const dp_backend *be, int max_rows)
{
    dropout_state *s = m->state;
    size_t n = (size_t)max_rows * m->out_width;
    int status = dp_module_alloc(be, n, DP_MEM_ACTIVATIONS, "a Dropout's output", &m->out);
    return status ? status : dp_module_alloc(be, n, DP_MEM_ACTIVATIONS, "a Dropout's mask", &s->mask);
}

const float *dp_dropout_mask(const dp_module *m)
{
    return ((const dropout_state *)m->state)->mask;
}

static int active(const dp_module *m, const dp_nn_context *ctx)
{
    return ctx->training && m->options.p > 0.0f;
}

static int dropout_forward(dp_module *m, const dp_nn_context *ctx, const float *x, int rows, const float **y)
{
    if (!active(m, ctx)) {
        *y = x;
        return 0;
    }
    dp_dropout_key key = {.seed = dp_rng_mix(ctx->seed, 0xd40u + (uint64_t)m->index),
                          .step = ctx->step,
                          .first_sample = ctx->first_sample,
                          .p = m->options.p,
                          .scale = 1.0f / (1.0f - m->options.p)};
    ctx->be->dropout_forward(ctx->be, m->out, x, ((dropout_state *)m->state)->mask, rows, m->out_width, &key);
    *y = m->out;
    return 0;
}

/* In place: dy becomes dx = dy * mask. */
static int dropout_backward_input(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy,
                                  float *dx, int rows, float **dx_out)
{
    (void)x;
    (void)dx;
    if (active(m, ctx))
        ctx->be->multiply(ctx->be, dy, dy, ((dropout_state *)m->state)->mask, (size_t)rows * m->out_width);
    *dx_out = dy;
    return 0;
}

static void dropout_release(dp_module *m, const dp_backend *be)
{
    be->free(be, m->out);
    be->free(be, ((dropout_state *)m->state)->mask);
}

const dp_module_type dp_module_dropout = {
    .name = "dropout",
    .args = dropout_args,
    .nargs = DP_COUNT(dropout_args),
    .defaults = {.p = 0.5f},
    .state_size = sizeof(dropout_state),
    .describe = dropout_describe,
    .configure = dropout_configure,
    .allocate = dropout_allocate,
    .forward = dropout_forward,
    .backward_input = dropout_backward_input,
    .release = dropout_release,
};
