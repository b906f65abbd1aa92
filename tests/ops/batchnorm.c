/* BatchNorm's operations: normalize (training keeps x-hat, eval does not), the input gradient,
 * the parameter gradients from column sums, the running statistics and the inverse standard
 * deviation, in the roundings each one's formula states (include/dp/backend.h). Elementwise:
 * every backend gives the reference's bits. */
#include "tests/ops/op_table.h"

#include <math.h>

static float *per_column(op_run *r, op_fill fill)
{
    return op_input_f32(r, (size_t)r->shape.cols, fill, 1.0f);
}

/* Four per-column coefficients, the second an inverse deviation (positive). */
static void coefficients(op_run *r)
{
    per_column(r, FILL_HOSTILE);
    per_column(r, FILL_POSITIVE);
    per_column(r, FILL_HOSTILE);
    per_column(r, FILL_HOSTILE);
}

/* ---- bn_normalize: x, mean, invstd, gamma, beta; xhat (param 1) and y ---- */

static void normalize_prepare(op_run *r)
{
    op_input_f32(r, op_elements(r), FILL_HOSTILE, 2.0f);
    coefficients(r);
    op_output(r, OP_F32, op_elements(r), SAME_BITS_EVERYWHERE);
    op_output(r, OP_F32, op_elements(r), SAME_BITS_EVERYWHERE);
}

static void normalize_run(const dp_backend *be, op_run *r)
{
    be->bn_normalize(be, OP_DEV(r, 0), r->param ? OP_DEV(r, 5) : NULL, OP_DEV(r, 6), r->shape.rows, r->shape.cols,
                     OP_DEV(r, 1), OP_DEV(r, 2), OP_DEV(r, 3), OP_DEV(r, 4));
}

static void normalize_reference(op_run *r)
{
    const float *x = OP_HOST(r, 0), *mean = OP_HOST(r, 1), *invstd = OP_HOST(r, 2);
    const float *gamma = OP_HOST(r, 3), *beta = OP_HOST(r, 4);
    float *xhat = OP_HOST(r, 5), *y = OP_HOST(r, 6);
    for (size_t i = 0; i < op_elements(r); i++) {
        size_t c = i % (size_t)r->shape.cols;
        float normalized = op_round((double)op_round((double)x[i] - mean[c]) * invstd[c]);
        if (r->param)
            xhat[i] = normalized;
        y[i] = op_round((double)op_round((double)gamma[c] * normalized) + beta[c]);
    }
}

const op_impl op_bn_normalize = {normalize_prepare, normalize_run, normalize_reference};

/* ---- bn_backward_input: dy, xhat, gamma, invstd, mean_dy, mean_dy_xhat; dx ---- */

static void backward_prepare(op_run *r)
{
    op_input_f32(r, op_elements(r), FILL_HOSTILE, 1.0f);
    op_input_f32(r, op_elements(r), FILL_HOSTILE, 2.0f);
    coefficients(r);
    op_output(r, OP_F32, op_elements(r), SAME_BITS_EVERYWHERE);
}

static void backward_run(const dp_backend *be, op_run *r)
{
    be->bn_backward_input(be, OP_DEV(r, 0), OP_DEV(r, 1), OP_DEV(r, 6), r->shape.rows, r->shape.cols, OP_DEV(r, 2),
                          OP_DEV(r, 3), OP_DEV(r, 4), OP_DEV(r, 5));
}

static void backward_reference(op_run *r)
{
    const float *dy = OP_HOST(r, 0), *xhat = OP_HOST(r, 1), *gamma = OP_HOST(r, 2), *invstd = OP_HOST(r, 3);
    const float *mean_dy = OP_HOST(r, 4), *mean_dy_xhat = OP_HOST(r, 5);
    float *dx = OP_HOST(r, 6);
    for (size_t i = 0; i < op_elements(r); i++) {
        size_t c = i % (size_t)r->shape.cols;
        float centred = op_round((double)op_round((double)dy[i] - mean_dy[c]) -
                                 op_round((double)xhat[i] * mean_dy_xhat[c]));
        dx[i] = op_round((double)op_round((double)gamma[c] * invstd[c]) * centred);
    }
}

const op_impl op_bn_backward_input = {backward_prepare, backward_run, backward_reference};

/* ---- bn_param_grads: double sums [2 cols]; dgamma, dbeta; param 1 accumulates ---- */

static void param_grads_prepare(op_run *r)
{
    size_t cols = (size_t)r->shape.cols;
    double *sums = op_input(r, OP_F64, 2 * cols);
    for (size_t i = 0; i < 2 * cols; i++)
        sums[i] = i % 7 == 3 ? (i % 2 ? NAN : -INFINITY) : 1e3 * (2.0 * dp_rng_uniform(&r->rng) - 1.0) / 3.0;
    op_output_f32(r, cols, FILL_HOSTILE, 1.0f, SAME_BITS_EVERYWHERE);
    op_output_f32(r, cols, FILL_HOSTILE, 1.0f, SAME_BITS_EVERYWHERE);
}

static void param_grads_run(const dp_backend *be, op_run *r)
{
    be->bn_param_grads(be, OP_DEV(r, 0), r->shape.cols, OP_DEV(r, 1), OP_DEV(r, 2), r->param);
}

static void param_grads_reference(op_run *r)
{
    const double *sums = OP_HOST(r, 0);
    float *dgamma = OP_HOST(r, 1), *dbeta = OP_HOST(r, 2);
    size_t cols = (size_t)r->shape.cols;
    for (size_t c = 0; c < cols; c++) {
        float sum_dy_xhat = (float)sums[cols + c], sum_dy = (float)sums[c];
        dgamma[c] = r->param ? op_round((double)dgamma[c] + sum_dy_xhat) : sum_dy_xhat;
        dbeta[c] = r->param ? op_round((double)dbeta[c] + sum_dy) : sum_dy;
    }
}

const op_impl op_bn_param_grads = {param_grads_prepare, param_grads_run, param_grads_reference};

/* ---- bn_update_running: running mean and variance, batch mean and variance ---- */

static const float running_momentum = 0.1f;

static void running_prepare(op_run *r)
{
    size_t cols = (size_t)r->shape.cols;
    op_output_f32(r, cols, FILL_HOSTILE, 1.0f, SAME_BITS_EVERYWHERE);
    op_output_f32(r, cols, FILL_POSITIVE, 1.0f, SAME_BITS_EVERYWHERE);
    per_column(r, FILL_HOSTILE);
    per_column(r, FILL_POSITIVE);
}

static void running_run(const dp_backend *be, op_run *r)
{
    be->bn_update_running(be, OP_DEV(r, 0), OP_DEV(r, 1), OP_DEV(r, 2), OP_DEV(r, 3), r->shape.cols, running_momentum);
}

static float running_update(float running, float batch)
{
    float keep = op_round(1.0 - (double)running_momentum);
    return op_round((double)op_round((double)keep * running) + op_round((double)running_momentum * batch));
}

static void running_reference(op_run *r)
{
    float *mean = OP_HOST(r, 0), *var = OP_HOST(r, 1);
    const float *batch_mean = OP_HOST(r, 2), *batch_var = OP_HOST(r, 3);
    for (int c = 0; c < r->shape.cols; c++) {
        mean[c] = running_update(mean[c], batch_mean[c]);
        var[c] = running_update(var[c], batch_var[c]);
    }
}

const op_impl op_bn_update_running = {running_prepare, running_run, running_reference};

/* ---- inverse_std: 1 / sqrt(var + eps); negative variances give NaN ---- */

static const float inverse_std_eps = 1e-5f;

static void inverse_std_prepare(op_run *r)
{
    per_column(r, FILL_HOSTILE);
    op_output(r, OP_F32, (size_t)r->shape.cols, SAME_BITS_EVERYWHERE);
}

static void inverse_std_run(const dp_backend *be, op_run *r)
{
    be->inverse_std(be, OP_DEV(r, 0), OP_DEV(r, 1), r->shape.cols, inverse_std_eps);
}

static void inverse_std_reference(op_run *r)
{
    const float *var = OP_HOST(r, 0);
    float *invstd = OP_HOST(r, 1);
    for (int c = 0; c < r->shape.cols; c++) {
        float root = op_round(sqrt((double)op_round((double)var[c] + inverse_std_eps)));
        invstd[c] = op_round(1.0 / root);
    }
}

const op_impl op_inverse_std = {inverse_std_prepare, inverse_std_run, inverse_std_reference};
