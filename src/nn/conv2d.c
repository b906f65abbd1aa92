/* nn.Conv2d on [C, H, W] samples, square kernels, weight [out, in, k, k] as PyTorch stores it.
 * Lowered to one GEMM per chunk of samples: im2col makes col [C k k, R P] of a chunk's R samples
 * (each of their P windows a column), and W col is the chunk's output [out, R P], written into
 * t, the whole batch's output with channels first [out, rows, P]; one swap of t's outer axes
 * gives PyTorch's layout [rows, out, P], and the bias adds as a rank-1 product with a row of ones.
 * Backward swaps dy into t once, then per chunk: dW (+)= t col^T, db (+)= t ones, dcol = W^T t,
 * which col2im folds back into the chunk's images. A chunk's col is at most CHUNK_BYTES (at least
 * one sample), so batches of any size use bounded memory; every buffer is sized before the first
 * step, and the step allocates nothing. Under a ZeRO budget the weight is read in blocks of
 * out-channel rows (dp_param_pieces), each a band of t's rows, and for dcol in blocks of whole
 * columns, each a band of dcol's rows. */
#include "src/nn/module.h"

#include "dp/error.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* col's bound: memory that does not grow with the batch, GEMMs still wide enough to block well. */
#define CHUNK_BYTES ((size_t)4 << 20)

static const dp_module_arg conv2d_args[] = {
    {"out", DP_ARG_INT, offsetof(dp_module_options, out_features), 1, 1 << 20, 0, "32", "output channels"},
    {"k", DP_ARG_INT, offsetof(dp_module_options, kernel), 1, 1 << 12, 0, "3", "the square kernel's side"},
    {"stride", DP_ARG_INT, offsetof(dp_module_options, stride), 1, 1 << 12, 0, NULL, "step between windows"},
    {"padding", DP_ARG_INT, offsetof(dp_module_options, padding), 0, 1 << 12, 0, NULL, "zeros on each side"},
    {"bias", DP_ARG_BOOL, offsetof(dp_module_options, bias), 0, 1, 0, NULL, "1 adds a learned bias per channel"},
};

typedef struct conv_state {
    dp_window window; /* set by allocate */
    int chunk;        /* samples per col */
    int max_rows;     /* the rows allocate sized for, the same on every rank */
    int col_holds;    /* the first sample of the chunk col holds, -1 for none */
    float *col;       /* a chunk's lowered input [C k k, chunk P]; backward: its gradient */
    float *t;         /* the output, then dy, with channels first: [out, rows, P] */
    float *ones;      /* rows P ones: the bias as a rank-1 product */
} conv_state;

static size_t taps(const dp_window *w)
{
    return (size_t)w->channels * w->kernel_h * w->kernel_w;
}

static size_t positions(const dp_window *w)
{
    return (size_t)w->out_h * w->out_w;
}

static int conv2d_configure(dp_module *m, const char *spec)
{
    dp_window w;
    int status = dp_window_configure(m, spec, "kernel", &w);
    if (!status)
        m->out_shape = (dp_dims){.ndim = 3, .dim = {m->options.out_features, w.out_h, w.out_w}};
    return status;
}

static size_t conv2d_size(const dp_module_options *o, const dp_dims *in, dp_dims *out, int *overflow)
{
    dp_window w;
    if (dp_window_over(o, in, &w)) { /* an unknown or unfitting input: nothing counted */
        *out = dp_dims_features(0);
        return 0;
    }
    *out = (dp_dims){.ndim = 3, .dim = {o->out_features, w.out_h, w.out_w}};
    size_t weights = (size_t)o->out_features * taps(&w);
    *overflow |= taps(&w) > SIZE_MAX / (size_t)o->out_features;
    return weights + (size_t)o->out_features * (size_t)o->bias;
}

static void conv2d_describe(const dp_module *m, char *text, size_t size)
{
    const dp_module_options *o = &m->options;
    snprintf(text, size, "(%d, %dx%d, stride %d, padding %d%s)", o->out_features, o->kernel, o->kernel, o->stride,
             o->padding, o->bias ? "" : ", no bias");
}

static int conv2d_declare(dp_module *m, dp_param_table *params, dp_param_table *buffers, const char *prefix)
{
    (void)buffers;
    dp_window w = dp_module_window(m);
    int64_t weight_shape[4] = {m->options.out_features, w.channels, w.kernel_h, w.kernel_w};
    return dp_module_declare_layer(m, params, prefix, 4, weight_shape);
}

/* PyTorch's default with fan_in = C k k, one draw per parameter in flat order. */
static void conv2d_init(const dp_module *m, dp_rng *rng, size_t first, size_t count, float *params)
{
    (void)first;
    dp_window w = dp_module_window(m);
    dp_module_init_layer(rng, params, count, taps(&w));
}

/* ones[0, n) = 1 in one copy (a device copy per float would take a second on a GPU). */
static int upload_ones(const dp_backend *be, float *ones, size_t n)
{
    float *host = be->alloc_host(be, n * sizeof *host, "a Conv2d's row of ones");
    if (!host)
        return DP_ENOMEM;
    for (size_t i = 0; i < n; i++)
        host[i] = 1.0f;
    be->upload(be, ones, host, n * sizeof *host);
    be->synchronize(be); /* the copy may still read host when it returns */
    be->free_host(be, host);
    return 0;
}

static int conv2d_allocate(dp_module *m, const dp_backend *be, int max_rows)
{
    conv_state *s = m->state;
    s->window = dp_module_window(m);
    size_t sample_col = positions(&s->window) * taps(&s->window) * sizeof(float);
    size_t fit = CHUNK_BYTES / sample_col;
    s->chunk = fit < 1 ? 1 : fit < (size_t)max_rows ? (int)fit : max_rows;
    s->max_rows = max_rows;
    size_t batch = (size_t)max_rows * positions(&s->window);
    int status = dp_module_alloc(be, (size_t)max_rows * m->out_width, DP_MEM_ACTIVATIONS, "a Conv2d's output", &m->out);
    if (!status)
        status = dp_module_alloc(be, (size_t)s->chunk * positions(&s->window) * taps(&s->window), DP_MEM_ACTIVATIONS,
                                 "a Conv2d's lowered input", &s->col);
    if (!status)
        status = dp_module_alloc(be, (size_t)max_rows * m->out_width, DP_MEM_ACTIVATIONS,
                                 "a Conv2d's output by channel", &s->t);
    if (!status && m->options.bias)
        status = dp_module_alloc(be, batch, DP_MEM_ACTIVATIONS, "a Conv2d's row of ones", &s->ones);
    return status || !s->ones ? status : upload_ones(be, s->ones, batch);
}

static const float *bias_of(const dp_module *m, const float *weights)
{
    return m->options.bias ? weights + (size_t)m->options.out_features * taps(&((conv_state *)m->state)->window)
                           : NULL;
}

/* The GEMM sizes of a chunk of `count` samples starting at sample `first` of `rows`. */
typedef struct conv_chunk {
    int first, count;
    int taps, out, positions; /* k, out channels, P */
    int ld_t;                 /* t's row: rows P */
} conv_chunk;

static conv_chunk chunk_at(const dp_module *m, int first, int rows)
{
    const conv_state *s = m->state;
    int left = rows - first;
    return (conv_chunk){.first = first, .count = left < s->chunk ? left : s->chunk, .taps = (int)taps(&s->window),
                        .out = m->options.out_features, .positions = (int)positions(&s->window),
                        .ld_t = rows * (int)positions(&s->window)};
}

/* The chunk's columns of t's output channel `channel`: [out - channel, count P] with rows of ld_t. */
static float *t_of(const conv_state *s, const conv_chunk *c, size_t channel)
{
    return s->t + channel * (size_t)c->ld_t + (size_t)c->first * c->positions;
}

/* col holds the chunk's lowered input: lowered again only when it holds another's. */
static void lower(dp_module *m, const dp_backend *be, const float *x, const conv_chunk *c)
{
    conv_state *s = m->state;
    if (s->col_holds == c->first)
        return;
    be->im2col(be, x + (size_t)c->first * m->in_width, s->col, c->count, &s->window);
    s->col_holds = c->first;
}

/* t's output channels [first, end) = w (their weight rows) col, chunk by chunk. */
static void forward_rows(dp_module *m, const dp_backend *be, const float *x, int rows, const float *w, size_t first,
                         size_t end)
{
    conv_state *s = m->state;
    for (int at = 0; at < rows; at += s->chunk) {
        conv_chunk c = chunk_at(m, at, rows);
        lower(m, be, x, &c);
        be->gemm(be, 0, 0, (int)(end - first), c.count * c.positions, c.taps, 1.0f, w, c.taps, s->col,
                 c.count * c.positions, 0.0f, t_of(s, &c, first), c.ld_t);
    }
}

/* Under a ZeRO budget the weight is read in blocks of out-channel rows (ascending offsets, as
 * the strategy prefetches them), the same blocks on every rank whatever its rows; a block's
 * rows lower each chunk again unless col still holds it. */
static int forward_in_pieces(dp_module *m, const dp_nn_context *ctx, const float *x, int rows, const float **bias)
{
    size_t k = taps(&((conv_state *)m->state)->window), out = (size_t)m->options.out_features;
    size_t per = dp_module_rows_per_block(m, m->param_pieces->max_floats), first, end;
    int status = 0;
    for (size_t j = dp_module_row_blocks(m, per); !status && j-- > 0;) {
        const float *w;
        dp_module_block_rows(m, per, j, &first, &end);
        if (!(status = dp_module_fetch(m, first * k, (end - first) * k, &w)))
            forward_rows(m, ctx->be, x, rows, w, first, end);
    }
    return status || !m->options.bias ? status : dp_module_fetch(m, out * k, out, bias);
}

static int conv2d_forward(dp_module *m, const dp_nn_context *ctx, const float *x, int rows, const float **y)
{
    conv_state *s = m->state;
    const dp_backend *be = ctx->be;
    const float *bias = bias_of(m, m->weights);
    int status = 0;
    s->col_holds = -1; /* a new input */
    if (dp_module_fetches(m))
        status = forward_in_pieces(m, ctx, x, rows, &bias);
    else
        forward_rows(m, be, x, rows, m->weights, 0, (size_t)m->options.out_features);
    int batch = rows * (int)positions(&s->window);
    if (!status && bias && rows)
        be->gemm(be, 0, 0, m->options.out_features, batch, 1, 1.0f, bias, 1, s->ones, batch, 1.0f, s->t, batch);
    if (!status)
        be->swap_axes(be, s->t, m->out, (size_t)m->options.out_features, (size_t)rows, positions(&s->window));
    *y = m->out;
    return status;
}

/* dy swapped into t once; db (+)= t ones, then dW (+)= t col^T in blocks of out-channel rows
 * when pieces are wanted, the last first (Linear's order), each piece reported as it is final.
 * Chunks run last to first: the last one's col is still the forward's. */
static int conv2d_backward_params(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy, int rows,
                                  const dp_grad_pieces *pieces)
{
    conv_state *s = m->state;
    const dp_backend *be = ctx->be;
    size_t k = taps(&s->window), out = (size_t)m->options.out_features;
    int batch = rows * (int)positions(&s->window);
    float *into;
    int status = 0;
    be->swap_axes(be, dy, s->t, (size_t)rows, out, positions(&s->window));
    if (m->options.bias && !(status = dp_grad_pieces_place(pieces, m, out * k, out, &into))) {
        if (rows)
            be->gemm(be, 0, 0, (int)out, 1, batch, 1.0f, s->t, batch, s->ones, 1, ctx->accumulate ? 1.0f : 0.0f,
                     into, 1);
        else if (!ctx->accumulate) /* a rank without rows contributes zeros */
            be->zero(be, into, out);
        status = dp_grad_pieces_ready(pieces, m, out * k, out);
    }
    size_t per = dp_module_rows_per_block(m, pieces->max_floats), first, end;
    int last = rows == 0 ? 0 : (rows - 1) / s->chunk * s->chunk;
    for (size_t j = 0; !status && j < dp_module_row_blocks(m, per); j++) {
        dp_module_block_rows(m, per, j, &first, &end);
        size_t at = first * k, count = (end - first) * k;
        if ((status = dp_grad_pieces_place(pieces, m, at, count, &into)))
            break;
        if (rows == 0 && !ctx->accumulate)
            be->zero(be, into, count);
        for (int c_first = last; rows && c_first >= 0; c_first -= s->chunk) {
            conv_chunk c = chunk_at(m, c_first, rows);
            lower(m, be, x, &c);
            be->gemm(be, 0, 1, (int)(end - first), c.taps, c.count * c.positions, 1.0f, t_of(s, &c, first), c.ld_t,
                     s->col, c.count * c.positions, c_first < last || ctx->accumulate ? 1.0f : 0.0f, into, c.taps);
        }
        status = dp_grad_pieces_ready(pieces, m, at, count);
    }
    return status;
}

/* dcol = W^T t for the chunk, from W whole or, under a budget, from its blocks of whole
 * columns (each dcol row's sum over the out-channels one GEMM's, as unsharded); then col2im
 * folds it into the chunk's images. Under a budget every rank fetches the blocks for every
 * chunk of max_rows (chunks beyond its rows compute nothing), so the ranks' gathers match
 * whatever their rows. */
static int conv2d_backward_input(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy,
                                 float *dx, int rows, float **dx_out)
{
    (void)x;
    (void)dy; /* backward_params left it in t */
    conv_state *s = m->state;
    const dp_backend *be = ctx->be;
    int pieces = dp_module_fetches(m), status = 0;
    s->col_holds = -1; /* dcol overwrites it */
    for (int at = 0; !status && at < (pieces ? s->max_rows : rows); at += s->chunk) {
        conv_chunk c = chunk_at(m, at, rows);
        size_t cols = (size_t)c.count * c.positions;
        for (size_t first = 0, end = (size_t)c.taps; !status && first < (size_t)c.taps; first = end) {
            const float *w = m->weights;
            if (pieces)
                status = dp_module_fetch_columns(m, first, &end, &w);
            if (!status && c.count > 0)
                be->gemm(be, 1, 0, (int)(end - first), (int)cols, c.out, 1.0f, w, (int)(end - first),
                         t_of(s, &c, 0), c.ld_t, 0.0f, s->col + first * cols, (int)cols);
        }
        if (!status && c.count > 0)
            be->col2im(be, s->col, dx + (size_t)at * m->in_width, c.count, &s->window);
    }
    *dx_out = dx;
    return status;
}

static void conv2d_release(dp_module *m, const dp_backend *be)
{
    conv_state *s = m->state;
    be->free(be, m->out);
    be->free(be, s->col);
    be->free(be, s->t);
    be->free(be, s->ones);
}

const dp_module_type dp_module_conv2d = {
    .name = "conv2d",
    .args = conv2d_args,
    .nargs = DP_COUNT(conv2d_args),
    .defaults = {.bias = 1, .stride = 1},
    .state_size = sizeof(conv_state),
    .structural = 1,
    .spatial = 1,
    .weight_rows = 1,
    .size = conv2d_size,
    .describe = conv2d_describe,
    .configure = conv2d_configure,
    .declare = conv2d_declare,
    .init_params = conv2d_init,
    .draws = 1,
    .allocate = conv2d_allocate,
    .forward = conv2d_forward,
    .backward_params = conv2d_backward_params,
    .backward_input = conv2d_backward_input,
    .release = conv2d_release,
};
