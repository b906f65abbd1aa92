/* The sequential model: modules in order over shared flat buffers, each module's pass on its
 * own (the engine runs them between its strategy's hooks) or the whole model at once. */
#include "src/nn/module.h"

#include "dp/error.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Shapes, tensor names, and which modules the one before them applies (a Linear's ReLU). */
static int configure_modules(dp_model *m)
{
    const dp_model_spec *spec = &m->spec;
    dp_dims shape = m->input_shape;
    int layers = 0; /* modules with parameters so far */
    const dp_module *imager = NULL; /* the conv2d or pool whose images are still unflattened */
    dp_module *open_residuals[DP_RESIDUAL_DEPTH_MAX]; /* the residuals open here, innermost last */
    int depth = 0;
    for (int i = 0; i < m->count; i++) {
        dp_module *mod = &m->modules[i];
        mod->type = spec->modules[i].type;
        mod->options = spec->modules[i].options;
        mod->index = i;
        mod->name = spec->modules[i].name;
        if (mod->type->residual == DP_RESIDUAL_OPEN)
            open_residuals[depth++] = mod;
        if (mod->type->residual == DP_RESIDUAL_SPLIT)
            mod->residual_open = open_residuals[depth - 1], open_residuals[depth - 1]->residual_split = mod;
        if (mod->type->residual == DP_RESIDUAL_CLOSE) {
            dp_module *open = open_residuals[--depth];
            mod->residual_open = open, mod->residual_split = open->residual_split, open->residual_close = mod;
        }
        mod->in_shape = shape;
        mod->in_width = (int)dp_dims_numel(&shape);
        if (mod->type->normalizes && layers == 0)
            return dp_fail(DP_EINVAL, "--model '%s': module %d (%s) comes before any linear or conv2d: "
                           "normalise the output of a layer, not the raw input", spec->text, i, mod->type->name);
        /* Data flattens implicitly; a module's images do not, as nn.Linear would not flatten them. */
        if (mod->type->needs_features && imager) {
            char text[64];
            dp_dims_text(&shape, text, sizeof text);
            return dp_fail(DP_EINVAL, "--model '%s': module %d (%s) gets images %s from module %d (%s): put "
                           "flatten before it (nn.Flatten, as the matching PyTorch model needs)", spec->text, i,
                           mod->type->name, text, imager->index, imager->type->name);
        }
        int status = mod->type->configure(mod, spec->text);
        if (status)
            return status;
        if (dp_dims_values(&mod->out_shape) > INT_MAX) /* widths are ints (dp_model_spec_output says so first) */
            return dp_fail(DP_EINVAL, "--model '%s': module %d (%s) makes %.0f values of each sample, more than the "
                           "%d a module's width is counted in", spec->text, i, mod->type->name,
                           dp_dims_values(&mod->out_shape), INT_MAX);
        shape = mod->out_shape;
        imager = mod->type->spatial ? mod : shape.ndim == 1 ? NULL : imager;
        mod->out_width = (int)dp_dims_numel(&shape);
        layers += mod->type->declare != NULL && !mod->type->normalizes;
        const dp_module *before = i > 0 ? &m->modules[i - 1] : NULL;
        if (before && before->type->absorbs == mod->type) {
            m->modules[i - 1].absorbs_next = 1;
            mod->absorbed = 1;
        }
        if (mod->type->normalizes && (!m->batchnorms || mod->statistic_values < m->statistic_values))
            m->statistic_values = mod->statistic_values;
        m->batchnorms += mod->type->normalizes;
        m->sync_batchnorms += mod->type->normalizes && mod->options.sync;
    }
    m->outputs = (int)dp_dims_numel(&shape);
    return 0;
}

static int declare_tensors(dp_model *m)
{
    for (int i = 0; i < m->count; i++) {
        dp_module *mod = &m->modules[i];
        mod->first_param = dp_params_floats(&m->params);
        mod->first_buffer = dp_params_floats(&m->buffers);
        mod->first_counter = m->buffers.totals[DP_DTYPE_I64];
        int status = mod->type->declare ? mod->type->declare(mod, &m->params, &m->buffers, mod->name) : 0;
        if (status)
            return status;
        mod->param_count = dp_params_floats(&m->params) - mod->first_param;
    }
    return 0;
}

static size_t widest(const dp_model *m)
{
    size_t w = (size_t)m->inputs;
    for (int i = 0; i < m->count; i++)
        if ((size_t)m->modules[i].out_width > w)
            w = (size_t)m->modules[i].out_width;
    return w;
}

static int allocate(dp_model *m, unsigned owns)
{
    const dp_backend *be = m->be;
    size_t rows = (size_t)m->max_rows;
    int status = 0;
    if (owns & DP_MODEL_OWNS_WEIGHTS)
        status = dp_module_alloc(be, dp_params_floats(&m->params), DP_MEM_PARAMETERS, "the parameters", &m->weights);
    if (!status && (owns & DP_MODEL_OWNS_GRADS))
        status = dp_module_alloc(be, dp_params_floats(&m->params), DP_MEM_GRADIENTS, "the gradients", &m->grads);
    if (!status)
        status = dp_module_alloc(be, dp_params_floats(&m->buffers), DP_MEM_BUFFERS, "the running statistics", &m->buffer_values);
    for (int i = 0; !status && i < DP_COUNT(m->delta); i++)
        status = dp_module_alloc(be, rows * widest(m), DP_MEM_ACTIVATIONS, "activation gradients", &m->delta[i]);
    if (status)
        return status;
    m->counters = dp_calloc(m->buffers.totals[DP_DTYPE_I64] + 1, sizeof *m->counters, "BatchNorm counters");
    m->inputs_of = dp_calloc((size_t)m->count, sizeof *m->inputs_of, "the modules' inputs");
    if (!m->counters || !m->inputs_of)
        return DP_ENOMEM;
    dp_model_plan_layers(m);
    for (int i = 0; !status && i < m->count; i++) {
        dp_module *mod = &m->modules[i];
        mod->weights = m->weights ? m->weights + mod->first_param : NULL;
        mod->grads = m->grads ? m->grads + mod->first_param : NULL;
        mod->param_pieces = &m->param_pieces;
        mod->buffers = m->buffer_values + mod->first_buffer;
        mod->counters = m->counters + mod->first_counter;
        if (mod->type->state_size && !(mod->state = dp_calloc(1, mod->type->state_size, "a module's state")))
            return DP_ENOMEM;
        status = mod->type->allocate ? mod->type->allocate(mod, be, m->max_rows) : 0;
    }
    return status;
}

int dp_model_create(dp_model *m, const dp_backend *be, const dp_model_spec *spec, int inputs, int max_rows)
{
    dp_dims input = dp_dims_features(inputs);
    return dp_model_create_owning(m, be, spec, &input, max_rows, DP_MODEL_OWNS_ALL);
}

int dp_model_create_owning(dp_model *m, const dp_backend *be, const dp_model_spec *spec, const dp_dims *input,
                           int max_rows, unsigned owns)
{
    memset(m, 0, sizeof *m);
    m->be = be;
    m->spec = *spec;
    m->count = spec->count;
    m->input_shape = *input;
    m->inputs = (int)dp_dims_numel(input);
    m->max_rows = max_rows;
    m->modules = dp_calloc((size_t)spec->count, sizeof *m->modules, "the model's modules");
    int status = m->modules ? 0 : DP_ENOMEM;
    if (!status)
        status = configure_modules(m);
    if (!status)
        status = declare_tensors(m);
    if (!status)
        status = allocate(m, owns);
    if (status)
        dp_model_free(m);
    return status;
}

size_t dp_model_rounded_operand_bytes(const dp_model *m)
{
    size_t bytes = 0;
    for (int i = 0; i < m->count; i++)
        if (m->modules[i].type->rounded_operand_bytes)
            bytes += m->modules[i].type->rounded_operand_bytes(&m->modules[i], m->max_rows);
    return bytes;
}

void dp_model_module_rows(const dp_model *m, int module, size_t *row, size_t *rows)
{
    const dp_module *mod = &m->modules[module];
    dp_module_weight_rows(mod->type, &mod->options, mod->param_count, row, rows);
}

/* Layers that now read their parameters in pieces stop fusing and writing bf16 outputs (no mask
 * is needed that was not allocated: pieces only turn fusion off; a Linear's output grows to FP32
 * at its next forward). */
void dp_model_set_param_pieces(dp_model *m, const dp_param_pieces *pieces)
{
    m->param_pieces = *pieces;
    dp_model_plan_layers(m);
}

void dp_model_bind(dp_model *m, int module, float *weights, float *grads)
{
    dp_module *mod = &m->modules[module];
    if (weights)
        mod->weights = weights;
    if (grads)
        mod->grads = grads;
}

void dp_model_module_params(const dp_model *m, int module, size_t *offset, size_t *count)
{
    *offset = m->modules[module].first_param;
    *count = m->modules[module].param_count;
}

void dp_model_free(dp_model *m)
{
    if (!m->be)
        return;
    for (int i = 0; m->modules && i < m->count; i++) {
        dp_module *mod = &m->modules[i];
        if (mod->type && mod->type->release && (mod->state || !mod->type->state_size))
            mod->type->release(mod, m->be);
        free(mod->state);
    }
    m->be->free(m->be, m->weights);
    m->be->free(m->be, m->grads);
    m->be->free(m->be, m->buffer_values);
    m->be->free(m->be, m->delta[0]);
    m->be->free(m->be, m->delta[1]);
    free(m->counters);
    free(m->inputs_of);
    free(m->modules);
    dp_params_free(&m->params);
    dp_params_free(&m->buffers);
    memset(m, 0, sizeof *m);
}

void dp_model_init(const dp_model *m, uint64_t seed, float *params, float *buffers, int64_t *counters)
{
    dp_model_init_slice(m, seed, 0, dp_params_floats(&m->params), params, buffers, counters);
}

/* One stream in module order; a module drawing one number per parameter is skipped into at
 * the slice's first, so every slice has the values the whole draw gives it. */
void dp_model_init_slice(const dp_model *m, uint64_t seed, size_t begin, size_t end, float *params, float *buffers,
                         int64_t *counters)
{
    dp_rng rng;
    dp_rng_seed(&rng, dp_rng_mix(seed, 0x1a17));
    for (int i = 0; i < m->count; i++) {
        const dp_module *mod = &m->modules[i];
        size_t first = mod->first_param, lo = begin > first ? begin : first;
        size_t hi = end < first + mod->param_count ? end : first + mod->param_count;
        if (mod->type->init_params && lo < hi) {
            dp_rng at = rng;
            dp_rng_skip(&at, (uint64_t)(lo - first) * (uint64_t)mod->type->draws);
            mod->type->init_params(mod, &at, lo - first, hi - lo, params + (lo - begin));
        }
        dp_rng_skip(&rng, (uint64_t)mod->param_count * (uint64_t)mod->type->draws);
        if (mod->type->init_buffers)
            mod->type->init_buffers(mod, buffers + mod->first_buffer, counters + mod->first_counter);
    }
}

int dp_model_forward_module(dp_model *m, int i, const dp_nn_context *ctx, const float *x, int rows,
                            const float **y)
{
    m->inputs_of[i] = x;
    return m->modules[i].type->forward(&m->modules[i], ctx, x, rows, y);
}

int dp_model_backward_module(dp_model *m, int i, const dp_nn_context *ctx, int rows,
                             const dp_grad_pieces *pieces, float **dy)
{
    dp_module *mod = &m->modules[i];
    int status = mod->type->backward_params ? mod->type->backward_params(mod, ctx, m->inputs_of[i], *dy, rows, pieces)
                                            : 0;
    if (status || i == 0)
        return status;
    float *spare = *dy == m->delta[0] ? m->delta[1] : m->delta[0];
    return mod->type->backward_input(mod, ctx, m->inputs_of[i], *dy, spare, rows, dy);
}

int dp_model_forward(dp_model *m, const dp_nn_context *ctx, const float *x, int rows, const float **out)
{
    int status = 0;
    for (int i = 0; !status && i < m->count; i++)
        status = dp_model_forward_module(m, i, ctx, x, rows, &x);
    *out = x;
    return status;
}

int dp_model_backward(dp_model *m, const dp_nn_context *ctx, float *dout, int rows, const dp_grad_pieces *pieces)
{
    static const dp_grad_pieces whole = {0};
    int status = 0;
    for (int i = m->count - 1; !status && i >= 0; i--)
        status = dp_model_backward_module(m, i, ctx, rows, pieces ? pieces : &whole, &dout);
    return status;
}

void dp_model_loss(const dp_model *m, dp_loss loss, const float *out, const int32_t *labels,
                   const float *targets, int rows, float *dout, double *totals)
{
    if (loss == DP_LOSS_XENT)
        m->be->softmax_xent(m->be, out, labels, rows, m->outputs, dout, totals);
    else
        m->be->mse(m->be, out, targets, rows, m->outputs, dout, totals);
}

void dp_model_module_name(const dp_model *m, int i, char *text, size_t size)
{
    snprintf(text, size, "%s (%s)", m->modules[i].name, m->modules[i].type->name);
}

void dp_model_describe(const dp_model *m, char *text, size_t size)
{
    if (m->spec.from_layers) {
        snprintf(text, size, "MLP %s", m->spec.text);
        return;
    }
    if (m->spec.preset) { /* hundreds of modules: the preset's name says them */
        int residuals = 0;
        for (int i = 0; i < m->count; i++)
            residuals += m->modules[i].type == &dp_module_residual;
        char shape[64];
        dp_dims_text(&m->input_shape, shape, sizeof shape);
        snprintf(text, size, "%s on %s: %d residual blocks, %d modules -> %d outputs", m->spec.text, shape, residuals,
                 m->count, m->outputs);
        return;
    }
    size_t used = (size_t)snprintf(text, size, "%d", m->inputs);
    for (int i = 0; i < m->count && used < size; i++) {
        const dp_module *mod = &m->modules[i];
        char options[64] = "";
        if (mod->type->describe)
            mod->type->describe(mod, options, sizeof options);
        used += (size_t)snprintf(text + used, size - used, " -> %s%s", mod->type->name, options);
    }
}
