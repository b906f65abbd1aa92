/* What every module shares (module.h): its memory, its layer parameters' names and start,
 * where its gradient pieces go and its parameter pieces come from under a ZeRO budget, and its
 * weight's blocks of rows. The sequential model (sequential.c) and the layer plan
 * (layer_plan.c) sit above it. */
#include "src/nn/module.h"

#include "dp/error.h"

#include <math.h>
#include <stdio.h>

int dp_module_alloc(const dp_backend *be, size_t count, dp_memory_kind kind, const char *what, float **out)
{
    *out = be->alloc(be, (count ? count : 1) * sizeof(float), kind, what);
    return *out ? 0 : DP_ENOMEM;
}

int dp_module_declare_layer(dp_module *m, dp_param_table *params, const char *prefix, int ndim,
                            const int64_t *weight_shape)
{
    char name[DP_TENSOR_NAME_MAX];
    snprintf(name, sizeof name, "%s.weight", prefix);
    int status = dp_params_add(params, name, ndim, weight_shape, DP_DTYPE_F32, DP_PARAM_DECAY, m->index);
    if (status || !m->options.bias)
        return status;
    snprintf(name, sizeof name, "%s.bias", prefix);
    return dp_params_add(params, name, 1, weight_shape, DP_DTYPE_F32, 0, m->index);
}

void dp_module_init_layer(dp_rng *rng, float *params, size_t count, size_t fan_in)
{
    float bound = 1.0f / sqrtf((float)fan_in);
    for (size_t j = 0; j < count; j++)
        params[j] = (2.0f * dp_rng_uniform(rng) - 1.0f) * bound;
}

int dp_grad_pieces_ready(const dp_grad_pieces *pieces, const dp_module *m, size_t first, size_t count)
{
    return pieces->ready ? pieces->ready(pieces->arg, m->first_param + first, count) : 0;
}

int dp_grad_pieces_place(const dp_grad_pieces *pieces, const dp_module *m, size_t first, size_t count, float **data)
{
    *data = m->grads + first;
    return pieces->place ? pieces->place(pieces->arg, m->first_param + first, count, data) : 0;
}

int dp_module_fetches(const dp_module *m)
{
    return m->param_pieces && m->param_pieces->max_floats && m->param_count > m->param_pieces->max_floats;
}

int dp_module_fetch(const dp_module *m, size_t first, size_t count, const float **data)
{
    return m->param_pieces->fetch(m->param_pieces->arg, m->first_param + first, count, data);
}

int dp_module_fetch_columns(const dp_module *m, size_t first, size_t *end, const float **data)
{
    return m->param_pieces->fetch_columns(m->param_pieces->arg, m->first_param, first, end, data);
}

void dp_module_weight_rows(const dp_module_type *type, const dp_module_options *o, size_t params, size_t *row,
                           size_t *rows)
{
    size_t out = type->weight_rows ? (size_t)o->out_features : 0;
    *rows = out;
    *row = out ? (params - (o->bias ? out : 0)) / out : 0;
}

size_t dp_module_rows_per_block(const dp_module *m, size_t max_floats)
{
    size_t row, rows;
    dp_module_weight_rows(m->type, &m->options, m->param_count, &row, &rows);
    size_t per = max_floats && row ? max_floats / row : rows;
    return per < 1 ? 1 : per;
}

size_t dp_module_row_blocks(const dp_module *m, size_t per)
{
    return ((size_t)m->options.out_features + per - 1) / per;
}

void dp_module_block_rows(const dp_module *m, size_t per, size_t j, size_t *first, size_t *end)
{
    *end = (size_t)m->options.out_features - j * per;
    *first = *end > per ? *end - per : 0;
}
