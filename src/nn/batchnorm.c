/* nn.BatchNorm1d over the features of [rows, features] activations. Training normalises with
 * the batch's statistics: this rank's rows, or with sync=1 (SyncBatchNorm) every rank's, from
 * one sum over ranks of (sum, sum of squares, count) per layer; backward sums its two column
 * sums over ranks too, so W ranks compute exactly what one rank computes on the whole batch.
 * Running statistics follow PyTorch: momentum 0.1, unbiased variance, num_batches_tracked
 * counting training forwards. Eval mode normalises with the running statistics. Column sums
 * are in double and the per-feature statistics are worked out on the host (a few numbers per
 * feature), then the backend applies them to every element. */
#include "src/nn/module.h"

#include "dp/error.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static const dp_module_arg batchnorm_args[] = {
    {"momentum", DP_ARG_FLOAT, offsetof(dp_module_options, momentum), 0, 1, 0, 0,
     "weight of the batch in the running statistics"},
    {"eps", DP_ARG_FLOAT, offsetof(dp_module_options, eps), 1e-30, HUGE_VAL, 0, 0,
     "added to the variance"},
    {"sync", DP_ARG_BOOL, offsetof(dp_module_options, sync), 0, 1, 0, 0,
     "1: statistics over every rank's rows (SyncBatchNorm)"},
};

/* What a BatchNorm keeps between its passes. */
typedef struct bn_state {
    float *xhat;                 /* the normalised input */
    double *sums;                /* column sums (backend memory, 2 x width) */
    double *host_sums;           /* their host copy, + the row count */
    float *coefs, *host_coefs;   /* per-column coefficients (COEF_ROWS x width) */
    double rows_seen;            /* rows the statistics came from (every rank's when sync) */
} bn_state;

/* The per-feature coefficient rows in host_coefs and coefs, each `width` floats. */
enum bn_coef { COEF_MEAN, COEF_INVSTD, COEF_VAR_UNBIASED, COEF_MEAN_DY, COEF_MEAN_DY_XHAT, COEF_ROWS };
/* host_sums: the two column-sum rows, then the row count. */
enum { SUM_ROWS = 2 };

static float *coef(float *coefs, const dp_module *m, enum bn_coef row)
{
    return coefs + (size_t)row * m->in_width;
}

static int batchnorm_configure(dp_module *m, const char *spec)
{
    (void)spec;
    m->out_shape = m->in_shape;
    return 0;
}

static size_t batchnorm_size(const dp_module_options *o, size_t in_width, size_t *out_width, int *overflow)
{
    (void)o;
    *out_width = in_width;
    *overflow |= in_width > SIZE_MAX / 2;
    return 2 * in_width;
}

static void batchnorm_describe(const dp_module *m, char *text, size_t size)
{
    snprintf(text, size, "%s", m->options.sync ? "(sync)" : "");
}

static int batchnorm_declare(dp_module *m, dp_param_table *params, dp_param_table *buffers, const char *prefix)
{
    static const char *const affine[] = {"weight", "bias"};
    static const char *const running[] = {"running_mean", "running_var"};
    int64_t shape[1] = {m->in_width};
    char name[DP_TENSOR_NAME_MAX];
    int status = 0;
    for (int i = 0; !status && i < DP_COUNT(affine); i++) {
        snprintf(name, sizeof name, "%s.%s", prefix, affine[i]);
        status = dp_params_add(params, name, 1, shape, DP_DTYPE_F32, 0, m->index);
    }
    for (int i = 0; !status && i < DP_COUNT(running); i++) {
        snprintf(name, sizeof name, "%s.%s", prefix, running[i]);
        status = dp_params_add(buffers, name, 1, shape, DP_DTYPE_F32, 0, m->index);
    }
    snprintf(name, sizeof name, "%s.num_batches_tracked", prefix);
    return status ? status : dp_params_add(buffers, name, 0, NULL, DP_DTYPE_I64, 0, m->index);
}

/* weight 1, bias 0 (weight's C parameters first). */
static void batchnorm_init_params(const dp_module *m, dp_rng *rng, size_t first, size_t count, float *params)
{
    (void)rng;
    for (size_t j = 0; j < count; j++)
        params[j] = first + j < (size_t)m->in_width ? 1.0f : 0.0f;
}

/* Running mean 0, running variance 1, no batches yet. */
static void batchnorm_init_buffers(const dp_module *m, float *buffers, int64_t *counters)
{
    int c = m->in_width;
    for (int i = 0; i < c; i++) {
        buffers[i] = 0.0f;
        buffers[c + i] = 1.0f;
    }
    counters[0] = 0;
}

static int batchnorm_allocate(dp_module *m, const dp_backend *be, int max_rows)
{
    bn_state *s = m->state;
    size_t n = (size_t)max_rows * m->in_width, c = (size_t)m->in_width;
    int status = dp_module_alloc(be, n, DP_MEM_ACTIVATIONS, "a BatchNorm's output", &m->out);
    if (!status)
        status = dp_module_alloc(be, n, DP_MEM_ACTIVATIONS, "a BatchNorm's normalised input", &s->xhat);
    if (!status)
        status = dp_module_alloc(be, COEF_ROWS * c, DP_MEM_ACTIVATIONS, "a BatchNorm's coefficients", &s->coefs);
    if (status)
        return status;
    s->sums = be->alloc(be, SUM_ROWS * c * sizeof(double), DP_MEM_ACTIVATIONS, "a BatchNorm's column sums");
    s->host_sums = dp_alloc((SUM_ROWS * c + 1) * sizeof(double), "a BatchNorm's column sums");
    s->host_coefs = dp_alloc(COEF_ROWS * c * sizeof(float), "a BatchNorm's coefficients");
    return s->sums && s->host_sums && s->host_coefs ? 0 : DP_ENOMEM;
}

/* The column sums of (a, b) on the host, summed over ranks when sync; with_rows also sums the
 * row count into host_sums[SUM_ROWS * width]. */
static int gather_sums(dp_module *m, const dp_nn_context *ctx, const float *a, const float *b, int rows,
                       int with_rows)
{
    bn_state *s = m->state;
    size_t c = (size_t)m->in_width;
    ctx->be->column_sums(ctx->be, a, b, rows, m->in_width, s->sums);
    ctx->be->download(ctx->be, s->host_sums, s->sums, SUM_ROWS * c * sizeof(double));
    s->host_sums[SUM_ROWS * c] = rows;
    if (!m->options.sync || !ctx->sum_doubles)
        return 0;
    return ctx->sum_doubles(ctx->sum_arg, s->host_sums, (int)(SUM_ROWS * c) + with_rows);
}

static int forward_train(dp_module *m, const dp_nn_context *ctx, const float *x, int rows)
{
    bn_state *s = m->state;
    int c = m->in_width;
    int status = gather_sums(m, ctx, x, x, rows, 1);
    if (status)
        return status;
    double n = s->host_sums[SUM_ROWS * c];
    s->rows_seen = n;
    /* No rows anywhere: nothing to normalise, no statistics to learn from. */
    if (n == 0)
        return 0;
    if (n < 2)
        return dp_fail(DP_EINVAL, "BatchNorm layers.%d: %.0f value%s per feature in a training batch; "
                       "its statistics need at least 2 (PyTorch refuses this too)",
                       m->name_index, n, n == 1 ? "" : "s");
    float *mean = coef(s->host_coefs, m, COEF_MEAN), *invstd = coef(s->host_coefs, m, COEF_INVSTD);
    float *unbiased = coef(s->host_coefs, m, COEF_VAR_UNBIASED);
    for (int i = 0; i < c; i++) {
        double mu = s->host_sums[i] / n, var = s->host_sums[c + i] / n - mu * mu;
        var = var > 0.0 ? var : 0.0;
        mean[i] = (float)mu;
        invstd[i] = (float)(1.0 / sqrt(var + m->options.eps));
        unbiased[i] = (float)(var * n / (n - 1.0));
    }
    const dp_backend *be = ctx->be;
    be->upload(be, s->coefs, s->host_coefs, (size_t)COEF_MEAN_DY * c * sizeof(float));
    const float *gamma = m->weights, *beta = m->weights + c;
    be->bn_normalize(be, x, s->xhat, m->out, rows, c, coef(s->coefs, m, COEF_MEAN), coef(s->coefs, m, COEF_INVSTD),
                     gamma, beta);
    be->bn_update_running(be, m->buffers, m->buffers + c, coef(s->coefs, m, COEF_MEAN),
                          coef(s->coefs, m, COEF_VAR_UNBIASED), c, m->options.momentum);
    m->counters[0]++;
    return 0;
}

static void forward_eval(dp_module *m, const dp_nn_context *ctx, const float *x, int rows)
{
    bn_state *s = m->state;
    int c = m->in_width;
    float *invstd = coef(s->coefs, m, COEF_INVSTD);
    ctx->be->inverse_std(ctx->be, m->buffers + c, invstd, c, m->options.eps);
    ctx->be->bn_normalize(ctx->be, x, NULL, m->out, rows, c, m->buffers, invstd, m->weights, m->weights + c);
}

static int batchnorm_forward(dp_module *m, const dp_nn_context *ctx, const float *x, int rows, const float **y)
{
    *y = m->out;
    if (!ctx->training) {
        forward_eval(m, ctx, x, rows);
        return 0;
    }
    return forward_train(m, ctx, x, rows);
}

/* dgamma (+)= sum dy xhat, dbeta (+)= sum dy, over this rank's rows (DDP sums them over ranks). */
static int batchnorm_backward_params(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy, int rows,
                                     const dp_grad_pieces *pieces)
{
    bn_state *s = m->state;
    (void)x;
    int c = m->in_width;
    ctx->be->column_sums(ctx->be, dy, s->xhat, rows, c, s->sums);
    ctx->be->bn_param_grads(ctx->be, s->sums, c, m->grads, m->grads + c, ctx->accumulate);
    return dp_grad_pieces_ready(pieces, m, 0, m->param_count);
}

/* dx = gamma invstd (dy - mean(dy) - xhat mean(dy xhat)), means over the statistics' rows. */
static int batchnorm_backward_input(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy,
                                    float *dx, int rows, float **dx_out)
{
    bn_state *s = m->state;
    (void)x;
    int c = m->in_width;
    const dp_backend *be = ctx->be;
    be->download(be, s->host_sums, s->sums, SUM_ROWS * (size_t)c * sizeof(double));
    if (m->options.sync && ctx->sum_doubles) {
        int status = ctx->sum_doubles(ctx->sum_arg, s->host_sums, SUM_ROWS * c);
        if (status)
            return status;
    }
    float *mean_dy = coef(s->host_coefs, m, COEF_MEAN_DY), *mean_dy_xhat = coef(s->host_coefs, m, COEF_MEAN_DY_XHAT);
    for (int i = 0; i < c && s->rows_seen > 0; i++) {
        mean_dy[i] = (float)(s->host_sums[i] / s->rows_seen);
        mean_dy_xhat[i] = (float)(s->host_sums[c + i] / s->rows_seen);
    }
    be->upload(be, coef(s->coefs, m, COEF_MEAN_DY), mean_dy, 2 * (size_t)c * sizeof(float));
    be->bn_backward_input(be, dy, s->xhat, dx, rows, c, m->weights, coef(s->coefs, m, COEF_INVSTD),
                          coef(s->coefs, m, COEF_MEAN_DY), coef(s->coefs, m, COEF_MEAN_DY_XHAT));
    *dx_out = dx;
    return 0;
}

static void batchnorm_release(dp_module *m, const dp_backend *be)
{
    bn_state *s = m->state;
    be->free(be, m->out);
    be->free(be, s->xhat);
    be->free(be, s->coefs);
    be->free(be, s->sums);
    free(s->host_sums);
    free(s->host_coefs);
}

const dp_module_type dp_module_batchnorm = {
    .name = "batchnorm",
    .args = batchnorm_args,
    .nargs = DP_COUNT(batchnorm_args),
    .defaults = {.momentum = 0.1f, .eps = 1e-5f},
    .state_size = sizeof(bn_state),
    .normalizes = 1,
    .size = batchnorm_size,
    .describe = batchnorm_describe,
    .configure = batchnorm_configure,
    .declare = batchnorm_declare,
    .init_params = batchnorm_init_params,
    .init_buffers = batchnorm_init_buffers,
    .allocate = batchnorm_allocate,
    .forward = batchnorm_forward,
    .backward_params = batchnorm_backward_params,
    .backward_input = batchnorm_backward_input,
    .release = batchnorm_release,
};
