/* nn.BatchNorm1d over the features of [rows, features] activations, and nn.BatchNorm2d over the
 * channels of [rows, C, H, W] ones (statistics per channel over N, H and W). Training normalises
 * with the batch's statistics: this rank's rows, or with sync=1 (SyncBatchNorm) every rank's,
 * from one sum over ranks of (sum, sum of squares, count) per layer; backward sums its two
 * column sums over ranks too, so W ranks compute exactly what one rank computes on the whole
 * batch. Running statistics follow PyTorch: momentum 0.1, unbiased variance, num_batches_tracked
 * counting training forwards. Eval mode normalises with the running statistics. The backend
 * sums each column of [rows, C H W] in double, adds a channel's H W columns, works out the
 * per-channel statistics (a few numbers per channel, kernel_math.h's arithmetic) and spreads
 * them over the channel's columns, which it applies to every element: images need no
 * transposes, and on one rank the host waits for nothing, so a CUDA graph replays the step.
 * SyncBatchNorm on several ranks sums the channel sums over them through the host. */
#include "src/nn/module.h"

#include "dp/error.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static const dp_module_arg batchnorm_args[] = {
    {"momentum", DP_ARG_FLOAT, offsetof(dp_module_options, momentum), 0, 1, 0, NULL,
     "weight of the batch in the running statistics"},
    {"eps", DP_ARG_FLOAT, offsetof(dp_module_options, eps), 1e-30, HUGE_VAL, 0, NULL,
     "added to the variance"},
    {"sync", DP_ARG_BOOL, offsetof(dp_module_options, sync), 0, 1, 0, NULL,
     "1: statistics over every rank's rows (SyncBatchNorm)"},
};

/* What a BatchNorm keeps between its passes. */
typedef struct bn_state {
    float *xhat;                 /* the normalised input */
    double *sums;                /* column sums (backend memory, 2 x width) */
    double *channel_sums;        /* per channel (backend memory, 2 x C) */
    double *host_sums;           /* their host copy summed over ranks (SyncBatchNorm), + the count */
    float *coefs;                /* per-column coefficients (COEF_ROWS x width), then per channel */
    double values_seen;          /* values per channel the statistics came from (every rank's when sync) */
} bn_state;

/* The per-column coefficient rows in coefs, each `width` floats (a channel's value repeated
 * over its columns), then the per-channel rows, C floats each, in the order of the column rows
 * they spread into. */
enum bn_coef { COEF_MEAN, COEF_INVSTD, COEF_GAMMA, COEF_BETA, COEF_MEAN_DY, COEF_MEAN_DY_XHAT, COEF_ROWS };
enum bn_channel_coef { CHANNEL_MEAN, CHANNEL_INVSTD, CHANNEL_MEAN_DY, CHANNEL_MEAN_DY_XHAT, CHANNEL_VAR_UNBIASED,
                       CHANNEL_ROWS };
/* The column and channel sums: of a, then of a b. */
enum { SUM_ROWS = 2 };

/* The features normalised: an image's channels, or every element of a sample. */
static int channels_of(const dp_dims *in)
{
    return (int)(in->ndim == 3 ? in->dim[0] : dp_dims_numel(in));
}

static int channels(const dp_module *m)
{
    return channels_of(&m->in_shape);
}

/* Values per channel per sample: an image's pixels, else 1. */
static int pixels(const dp_module *m)
{
    return m->in_width / channels(m);
}

static float *coef(float *coefs, const dp_module *m, enum bn_coef row)
{
    return coefs + (size_t)row * m->in_width;
}

static float *channel_coef(float *coefs, const dp_module *m, enum bn_channel_coef row)
{
    return coefs + (size_t)COEF_ROWS * m->in_width + (size_t)row * channels(m);
}

static int batchnorm_configure(dp_module *m, const char *spec)
{
    (void)spec;
    m->out_shape = m->in_shape;
    m->statistic_values = pixels(m);
    return 0;
}

static size_t batchnorm_size(const dp_module_options *o, const dp_dims *in, dp_dims *out, int *overflow)
{
    (void)o;
    size_t features = (size_t)channels_of(in);
    *out = *in;
    *overflow |= features > SIZE_MAX / 2;
    return 2 * features;
}

static void batchnorm_describe(const dp_module *m, char *text, size_t size)
{
    snprintf(text, size, "%s", m->options.sync ? "(sync)" : "");
}

static int batchnorm_declare(dp_module *m, dp_param_table *params, dp_param_table *buffers, const char *prefix)
{
    static const char *const affine[] = {"weight", "bias"};
    static const char *const running[] = {"running_mean", "running_var"};
    int64_t shape[1] = {channels(m)};
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
        params[j] = first + j < (size_t)channels(m) ? 1.0f : 0.0f;
}

/* Running mean 0, running variance 1, no batches yet. */
static void batchnorm_init_buffers(const dp_module *m, float *buffers, int64_t *counters)
{
    int c = channels(m);
    for (int i = 0; i < c; i++) {
        buffers[i] = 0.0f;
        buffers[c + i] = 1.0f;
    }
    counters[0] = 0;
}

static int batchnorm_allocate(dp_module *m, const dp_backend *be, int max_rows)
{
    bn_state *s = m->state;
    size_t n = (size_t)max_rows * m->in_width, w = (size_t)m->in_width, c = (size_t)channels(m);
    size_t coefs = COEF_ROWS * w + CHANNEL_ROWS * c;
    int status = dp_module_alloc(be, n, DP_MEM_ACTIVATIONS, "a BatchNorm's output", &m->out);
    if (!status)
        status = dp_module_alloc(be, n, DP_MEM_ACTIVATIONS, "a BatchNorm's normalised input", &s->xhat);
    if (!status)
        status = dp_module_alloc(be, coefs, DP_MEM_ACTIVATIONS, "a BatchNorm's coefficients", &s->coefs);
    if (status)
        return status;
    s->sums = be->alloc(be, SUM_ROWS * w * sizeof(double), DP_MEM_ACTIVATIONS, "a BatchNorm's column sums");
    s->channel_sums = be->alloc(be, SUM_ROWS * c * sizeof(double), DP_MEM_ACTIVATIONS, "a BatchNorm's channel sums");
    s->host_sums = dp_alloc((SUM_ROWS * c + 1) * sizeof(double), "a BatchNorm's channel sums");
    return s->sums && s->channel_sums && s->host_sums ? 0 : DP_ENOMEM;
}

/* SyncBatchNorm on several ranks: channel_sums summed over them through the host, with the
 * count of values per channel in *values when values is given. */
static int sum_over_ranks(dp_module *m, const dp_nn_context *ctx, double *values)
{
    bn_state *s = m->state;
    const dp_backend *be = ctx->be;
    size_t count = SUM_ROWS * (size_t)channels(m);
    be->download(be, s->host_sums, s->channel_sums, count * sizeof(double));
    s->host_sums[count] = values ? *values : 0.0;
    int status = ctx->sum_doubles(ctx->sum_arg, s->host_sums, (int)count + (values != NULL));
    if (status)
        return status;
    be->upload(be, s->channel_sums, s->host_sums, count * sizeof(double));
    if (values)
        *values = s->host_sums[count];
    return 0;
}

/* The per-channel sums of (a, a b) over this rank's rows into channel_sums, *values the values
 * per channel they came from; with over_ranks, summed over ranks when sync. */
static int gather_sums(dp_module *m, const dp_nn_context *ctx, const float *a, const float *b, int rows,
                       int over_ranks, double *values)
{
    bn_state *s = m->state;
    const dp_backend *be = ctx->be;
    be->column_sums(be, a, b, rows, m->in_width, s->sums);
    be->bn_channel_sums(be, s->sums, s->channel_sums, channels(m), pixels(m));
    *values = (double)rows * (double)pixels(m);
    return over_ranks && m->options.sync && ctx->sum_doubles ? sum_over_ranks(m, ctx, values) : 0;
}

/* `count` per-channel rows of backend memory spread over their channels' columns from row `row`. */
static void spread(dp_module *m, const dp_backend *be, const float *per_channel, enum bn_coef row, int count)
{
    be->bn_spread(be, per_channel, coef(((bn_state *)m->state)->coefs, m, row), channels(m), pixels(m), count);
}

static int forward_train(dp_module *m, const dp_nn_context *ctx, const float *x, int rows)
{
    bn_state *s = m->state;
    const dp_backend *be = ctx->be;
    int c = channels(m);
    double n;
    int status = gather_sums(m, ctx, x, x, rows, 1, &n);
    if (status)
        return status;
    s->values_seen = n;
    /* No rows anywhere: nothing to normalise, no statistics to learn from. */
    if (n == 0)
        return 0;
    if (n < 2)
        return dp_fail(DP_EINVAL, "BatchNorm %s: %.0f value%s per feature in a training batch; "
                       "its statistics need at least 2 (PyTorch refuses this too)",
                       m->name, n, n == 1 ? "" : "s");
    float *mean = channel_coef(s->coefs, m, CHANNEL_MEAN);
    float *unbiased = channel_coef(s->coefs, m, CHANNEL_VAR_UNBIASED);
    be->bn_batch_stats(be, s->channel_sums, c, n, m->options.eps, mean, channel_coef(s->coefs, m, CHANNEL_INVSTD),
                       unbiased);
    spread(m, be, mean, COEF_MEAN, 2);         /* the mean and invstd */
    spread(m, be, m->weights, COEF_GAMMA, 2);  /* gamma and beta */
    be->bn_normalize(be, x, s->xhat, m->out, rows, m->in_width, coef(s->coefs, m, COEF_MEAN),
                     coef(s->coefs, m, COEF_INVSTD), coef(s->coefs, m, COEF_GAMMA), coef(s->coefs, m, COEF_BETA));
    if (ctx->keep_running)
        return 0;
    be->bn_update_running(be, m->buffers, m->buffers + c, mean, unbiased, c, m->options.momentum);
    m->counters[0]++;
    return 0;
}

/* The running statistics: invstd from the running variance, then spread. */
static void forward_eval(dp_module *m, const dp_nn_context *ctx, const float *x, int rows)
{
    bn_state *s = m->state;
    const dp_backend *be = ctx->be;
    int c = channels(m);
    float *invstd = channel_coef(s->coefs, m, CHANNEL_INVSTD);
    be->inverse_std(be, m->buffers + c, invstd, c, m->options.eps);
    spread(m, be, m->buffers, COEF_MEAN, 1);
    spread(m, be, invstd, COEF_INVSTD, 1);
    spread(m, be, m->weights, COEF_GAMMA, 2);
    be->bn_normalize(be, x, NULL, m->out, rows, m->in_width, coef(s->coefs, m, COEF_MEAN),
                     coef(s->coefs, m, COEF_INVSTD), coef(s->coefs, m, COEF_GAMMA), coef(s->coefs, m, COEF_BETA));
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

/* dgamma (+)= sum dy xhat, dbeta (+)= sum dy, over this rank's rows (DDP sums them over ranks),
 * from the channel sums. */
static int batchnorm_backward_params(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy, int rows,
                                     const dp_grad_pieces *pieces)
{
    bn_state *s = m->state;
    (void)x;
    const dp_backend *be = ctx->be;
    int c = channels(m);
    double values;
    gather_sums(m, ctx, dy, s->xhat, rows, 0, &values); /* backward_input sums them over ranks */
    be->bn_param_grads(be, s->channel_sums, c, m->grads, m->grads + c, ctx->accumulate);
    return dp_grad_pieces_ready(pieces, m, 0, m->param_count);
}

/* dx = gamma invstd (dy - mean(dy) - xhat mean(dy xhat)), means over the statistics' values;
 * after backward_params, which left this rank's channel sums of (dy, dy xhat). */
static int batchnorm_backward_input(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy,
                                    float *dx, int rows, float **dx_out)
{
    bn_state *s = m->state;
    (void)x;
    const dp_backend *be = ctx->be;
    if (m->options.sync && ctx->sum_doubles) {
        int status = sum_over_ranks(m, ctx, NULL);
        if (status)
            return status;
    }
    /* No values anywhere: forward normalised nothing, so no means either (the 0-row case). */
    if (s->values_seen > 0) {
        float *means = channel_coef(s->coefs, m, CHANNEL_MEAN_DY);
        be->bn_means(be, s->channel_sums, SUM_ROWS * channels(m), s->values_seen, means);
        spread(m, be, means, COEF_MEAN_DY, 2); /* the means of dy and dy xhat */
    }
    be->bn_backward_input(be, dy, s->xhat, dx, rows, m->in_width, coef(s->coefs, m, COEF_GAMMA),
                          coef(s->coefs, m, COEF_INVSTD), coef(s->coefs, m, COEF_MEAN_DY),
                          coef(s->coefs, m, COEF_MEAN_DY_XHAT));
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
    be->free(be, s->channel_sums);
    free(s->host_sums);
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
