/* BatchNorm's operations: normalize (training keeps x-hat, eval does not), the input gradient,
 * the parameter gradients from column sums, the running statistics, the inverse standard
 * deviation, and the batch statistics finished in backend memory (channel sums, the mean,
 * invstd and unbiased variance, backward's means, the spread over columns), in the roundings each one's formula states (include/dp/backend.h). Elementwise:
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

/* ---- bn_channel_sums: column sums [2, channels pixels] (shape: rows channels, cols pixels) ---- */

/* Finite doubles of mixed signs, with a NaN and an infinity here and there. */
static double *hostile_doubles(op_run *r, size_t n)
{
    double *x = op_input(r, OP_F64, n);
    for (size_t i = 0; i < n; i++)
        x[i] = i % 11 == 5 ? (i % 2 ? NAN : INFINITY) : 1e3 * (2.0 * dp_rng_uniform(&r->rng) - 1.0) / 3.0;
    return x;
}

static void channel_sums_prepare(op_run *r)
{
    hostile_doubles(r, 2 * op_elements(r));
    op_output(r, OP_F64, 2 * (size_t)r->shape.rows, SAME_BITS_EVERYWHERE);
}

static void channel_sums_run(const dp_backend *be, op_run *r)
{
    be->bn_channel_sums(be, OP_DEV(r, 0), OP_DEV(r, 1), r->shape.rows, r->shape.cols);
}

/* Each channel's pixels added in order from 0. */
static void channel_sums_reference(op_run *r)
{
    const double *columns = OP_HOST(r, 0);
    double *sums = OP_HOST(r, 1);
    size_t pixels = (size_t)r->shape.cols;
    for (size_t k = 0; k < 2 * (size_t)r->shape.rows; k++) {
        sums[k] = 0.0;
        for (size_t q = 0; q < pixels; q++)
            sums[k] += columns[k * pixels + q];
    }
}

const op_impl op_bn_channel_sums = {channel_sums_prepare, channel_sums_run, channel_sums_reference};

/* ---- bn_batch_stats: channel sums [2 cols] over param values; mean, invstd, unbiased var ---- */

static const float batch_stats_eps = 1e-5f;

static void batch_stats_prepare(op_run *r)
{
    size_t cols = (size_t)r->shape.cols;
    double *sums = op_input(r, OP_F64, 2 * cols);
    double n = (double)r->param;
    for (size_t c = 0; c < cols; c++) {
        double mean = 2.0 * dp_rng_uniform(&r->rng) - 1.0, spread = dp_rng_uniform(&r->rng);
        sums[c] = mean * n;
        /* every fifth channel constant: a variance that cancels to 0 or just below */
        sums[cols + c] = n * (mean * mean + (c % 5 == 2 ? 0.0 : spread));
    }
    for (int i = 0; i < 3; i++)
        op_output(r, OP_F32, cols, SAME_BITS_EVERYWHERE);
}

static void batch_stats_run(const dp_backend *be, op_run *r)
{
    be->bn_batch_stats(be, OP_DEV(r, 0), r->shape.cols, (double)r->param, batch_stats_eps, OP_DEV(r, 1), OP_DEV(r, 2),
                       OP_DEV(r, 3));
}

/* The biased variance E[x^2] - mean^2 (0 where it rounds below), in double, each result rounded once. */
static void batch_stats_reference(op_run *r)
{
    const double *sums = OP_HOST(r, 0);
    float *mean = OP_HOST(r, 1), *invstd = OP_HOST(r, 2), *unbiased = OP_HOST(r, 3);
    size_t cols = (size_t)r->shape.cols;
    double n = (double)r->param;
    for (size_t c = 0; c < cols; c++) {
        double mu = sums[c] / n, var = fmax(sums[cols + c] / n - mu * mu, 0.0);
        mean[c] = (float)mu;
        invstd[c] = (float)(1.0 / sqrt(var + (double)batch_stats_eps));
        unbiased[c] = (float)(var * n / (n - 1.0));
    }
}

const op_impl op_bn_batch_stats = {batch_stats_prepare, batch_stats_run, batch_stats_reference};

/* ---- bn_means: sums [cols] over param values, as floats ---- */

static void means_prepare(op_run *r)
{
    hostile_doubles(r, (size_t)r->shape.cols);
    op_output(r, OP_F32, (size_t)r->shape.cols, SAME_BITS_EVERYWHERE);
}

static void means_run(const dp_backend *be, op_run *r)
{
    be->bn_means(be, OP_DEV(r, 0), r->shape.cols, (double)r->param, OP_DEV(r, 1));
}

static void means_reference(op_run *r)
{
    const double *sums = OP_HOST(r, 0);
    float *means = OP_HOST(r, 1);
    for (int i = 0; i < r->shape.cols; i++)
        means[i] = (float)(sums[i] / (double)r->param);
}

const op_impl op_bn_means = {means_prepare, means_run, means_reference};

/* ---- bn_spread: param rows of per-channel values (shape: rows channels, cols pixels) ---- */

static void spread_prepare(op_run *r)
{
    op_input_f32(r, (size_t)r->param * r->shape.rows, FILL_HOSTILE, 1.0f);
    op_output(r, OP_F32, (size_t)r->param * op_elements(r), SAME_BITS_EVERYWHERE);
}

static void spread_run(const dp_backend *be, op_run *r)
{
    be->bn_spread(be, OP_DEV(r, 0), OP_DEV(r, 1), r->shape.rows, r->shape.cols, r->param);
}

static void spread_reference(op_run *r)
{
    const float *per_channel = OP_HOST(r, 0);
    float *columns = OP_HOST(r, 1);
    size_t channels = (size_t)r->shape.rows, pixels = (size_t)r->shape.cols;
    for (size_t row = 0; row < (size_t)r->param; row++)
        for (size_t ch = 0; ch < channels; ch++)
            for (size_t q = 0; q < pixels; q++)
                columns[(row * channels + ch) * pixels + q] = per_channel[row * channels + ch];
}

const op_impl op_bn_spread = {spread_prepare, spread_run, spread_reference};
