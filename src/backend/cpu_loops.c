/* The CPU backend's loops, one part of an operation each (cpu_loops.h). This file is compiled
 * once per instruction set (Makefile.am: DP_LOOPS_ISA generic, avx2, avx512, each with its -m
 * flags and the vectoriser on), and each compilation exports its table, dp_cpu_loops_ISA.
 *
 * The loops are written for the vectoriser: restrict pointers, coefficients copied into locals,
 * and inner loops with the operation's options fixed (a helper inlined with constant flags),
 * so each inner loop is straight-line arithmetic. Vector instructions round each element as
 * the scalar ones do (IEEE add, mul, div and sqrt are correctly rounded in every lane), and
 * -ffp-contract=off keeps products apart from sums, so every instruction set gives the bits of
 * kernel_math.h's scalar bodies. Reductions keep their order: column sums vectorise across
 * columns, each column still summed row by row; the loss totals stay sequential. */
#include "config.h"

#include "src/backend/cpu_loops.h"
#include "src/backend/kernel_math.h"

#include <stdint.h>
#include <string.h>

#ifndef DP_LOOPS_ISA
#error "compile with -DDP_LOOPS_ISA=generic, avx2 or avx512 (Makefile.am)"
#endif

/* ---- elementwise, over rows ---- */

static inline void bias_act_rows(float *restrict y, const float *restrict bias, size_t rows, size_t cols,
                                 int has_bias, int relu)
{
    for (size_t r = 0; r < rows; r++) {
        float *restrict row = y + r * cols;
        for (size_t c = 0; c < cols; c++)
            row[c] = has_bias ? dp_bias_act(row[c], bias[c], relu) : dp_act(row[c], relu);
    }
}

/* y (+)= bias, then ReLU: rows. */
static size_t bias_act_forward(const dp_loop_args *a, size_t begin, size_t end)
{
    float *y = a->y + begin * a->cols;
    size_t rows = end - begin;
    if (a->bias && a->relu)
        bias_act_rows(y, a->bias, rows, a->cols, 1, 1);
    else if (a->bias)
        bias_act_rows(y, a->bias, rows, a->cols, 1, 0);
    else if (a->relu)
        bias_act_rows(y, NULL, rows, a->cols, 0, 1);
    return 0;
}

/* mask and y = x * mask from (key, row, unit): rows. The hash of (seed, step, sample) is the
 * row's; only the unit's last round runs per element. */
static size_t dropout_forward(const dp_loop_args *a, size_t begin, size_t end)
{
    const dp_dropout_key key = *a->dropout;
    size_t cols = a->cols;
    for (size_t r = begin; r < end; r++) {
        const float *restrict x = a->x + r * cols;
        float *restrict y = a->y + r * cols, *restrict mask = a->mask + r * cols;
        for (size_t c = 0; c < cols; c++) {
            float m = dp_dropout_mask(&key, (uint64_t)r, (uint64_t)c);
            mask[c] = m;
            y[c] = dp_mul(x[c], m);
        }
    }
    return 0;
}

static inline void bn_normalize_row(const float *restrict x, float *restrict xhat, float *restrict y, size_t cols,
                                    const dp_loop_args *a, int keep_xhat)
{
    const float *restrict mean = a->mean, *restrict invstd = a->invstd;
    const float *restrict gamma = a->gamma, *restrict beta = a->beta;
    for (size_t c = 0; c < cols; c++) {
        float normalized = dp_bn_normalized(x[c], mean[c], invstd[c]);
        if (keep_xhat)
            xhat[c] = normalized;
        y[c] = dp_bn_affine(normalized, gamma[c], beta[c]);
    }
}

/* xhat = (x - mean) invstd (xhat NULL: not kept), y = gamma xhat + beta: rows. */
static size_t bn_normalize(const dp_loop_args *a, size_t begin, size_t end)
{
    size_t cols = a->cols;
    for (size_t r = begin; r < end; r++) {
        if (a->xhat)
            bn_normalize_row(a->x + r * cols, a->xhat + r * cols, a->y + r * cols, cols, a, 1);
        else
            bn_normalize_row(a->x + r * cols, NULL, a->y + r * cols, cols, a, 0);
    }
    return 0;
}

/* dx = gamma invstd (dy - mean_dy - xhat mean_dy_xhat), dy in x, xhat in other, dx in y: rows. */
static size_t bn_backward_input(const dp_loop_args *a, size_t begin, size_t end)
{
    size_t cols = a->cols;
    const float *restrict gamma = a->gamma, *restrict invstd = a->invstd;
    const float *restrict mean_dy = a->mean_dy, *restrict mean_dy_xhat = a->mean_dy_xhat;
    for (size_t r = begin; r < end; r++) {
        const float *restrict dy = a->x + r * cols, *restrict xhat = a->other + r * cols;
        float *restrict dx = a->y + r * cols;
        for (size_t c = 0; c < cols; c++)
            dx[c] = dp_bn_input_grad(dy[c], xhat[c], gamma[c], invstd[c], mean_dy[c], mean_dy_xhat[c]);
    }
    return 0;
}

/* ---- elementwise, over elements ---- */

/* y = ReLU(x): elements. */
static size_t relu_forward(const dp_loop_args *a, size_t begin, size_t end)
{
    float *restrict y = a->y;
    const float *restrict x = a->x;
    for (size_t i = begin; i < end; i++)
        y[i] = dp_act(x[i], 1);
    return 0;
}

/* y (the gradient, in place) blocked where the ReLU's output (other) was <= 0: elements. */
static size_t relu_backward(const dp_loop_args *a, size_t begin, size_t end)
{
    float *restrict dy = a->y;
    const float *restrict out = a->other;
    for (size_t i = begin; i < end; i++)
        dy[i] = dp_relu_grad(dy[i], out[i]);
    return 0;
}

/* y = (accumulate ? y + x : x), ZeRO-2's gradient shard: elements. */
static size_t accumulate(const dp_loop_args *a, size_t begin, size_t end)
{
    float *restrict y = a->y;
    const float *restrict x = a->x;
    for (size_t i = begin; i < end; i++)
        y[i] = dp_accumulate(y[i], x[i], a->accumulate);
    return 0;
}

/* y = x * other, in place when y is x (dropout's backward): elements. */
static size_t multiply(const dp_loop_args *a, size_t begin, size_t end)
{
    float *restrict y = a->y;
    const float *restrict mask = a->other;
    if (a->y == a->x) {
        for (size_t i = begin; i < end; i++)
            y[i] = dp_mul(y[i], mask[i]);
        return 0;
    }
    const float *restrict x = a->x;
    for (size_t i = begin; i < end; i++)
        y[i] = dp_mul(x[i], mask[i]);
    return 0;
}

/* Non-finite values among x: elements. */
/* sums[c] = the scaled squares of x[c], x[c + lanes], ... (x has a->rows values, lanes = a->cols),
 * each lane in element order: lanes. Vectorised across the lanes, so every build adds alike. */
static size_t sum_squares(const dp_loop_args *a, size_t begin, size_t end)
{
    const float *restrict x = a->x;
    double *restrict sums = a->sums;
    size_t lanes = a->cols, n = a->rows, full = n / lanes;
    float scale = a->scale;
    for (size_t c = begin; c < end; c++)
        sums[c] = 0.0;
    for (size_t r = 0; r < full; r++) {
        const float *restrict row = x + r * lanes;
        for (size_t c = begin; c < end; c++)
            sums[c] = dp_dadd(sums[c], dp_scaled_square(row[c], scale));
    }
    for (size_t c = begin; c < end && full * lanes + c < n; c++)
        sums[c] = dp_dadd(sums[c], dp_scaled_square(x[full * lanes + c], scale));
    return 0;
}

static size_t count_nonfinite(const dp_loop_args *a, size_t begin, size_t end)
{
    const float *restrict x = a->x;
    size_t bad = 0;
    for (size_t i = begin; i < end; i++)
        bad += (size_t)dp_is_nonfinite(x[i]);
    return bad;
}

/* The SGD pass with apply and momentum known, so the inner loop is one straight line. The
 * body works on copies in registers: the count reads the new gradient there, not back from
 * memory (a 64-byte load of what was just stored stalls on store forwarding). */
static inline size_t sgd_elements(float *restrict p, float *restrict g, float *restrict v, size_t n,
                                  const dp_sgd_coefs *coefs, int apply, int momentum)
{
    dp_sgd_coefs k = *coefs;
    k.apply = apply;
    /* No momentum: the body leaves v alone. */
    if (!momentum)
        k.momentum = 0.0f;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float param = p[i], grad = g[i], velocity = momentum ? v[i] : 0.0f;
        dp_sgd_element(&param, &grad, &velocity, &k);
        g[i] = grad;
        if (apply)
            p[i] = param;
        if (momentum)
            v[i] = velocity;
        bad += (size_t)dp_update_is_bad(grad, param, apply);
    }
    return bad;
}

/* The SGD pass (params, grads, state1 = velocity or NULL): elements. */
static size_t sgd_step(const dp_loop_args *a, size_t begin, size_t end)
{
    const dp_sgd_coefs *k = a->sgd;
    float *p = a->params + begin, *g = a->grads + begin, *v = a->state1 ? a->state1 + begin : NULL;
    size_t n = end - begin;
    if (!k->apply)
        return sgd_elements(p, g, NULL, n, k, 0, 0);
    if (k->momentum != 0.0f)
        return sgd_elements(p, g, v, n, k, 1, 1);
    return sgd_elements(p, g, NULL, n, k, 1, 0);
}

static inline size_t adamw_elements(float *restrict p, float *restrict g, float *restrict m, float *restrict v,
                                    size_t n, const dp_adamw_coefs *coefs, int apply)
{
    dp_adamw_coefs k = *coefs;
    k.apply = apply;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float param = p[i], grad = g[i], mean = m[i], square = v[i];
        dp_adamw_element(&param, &grad, &mean, &square, &k);
        g[i] = grad;
        if (apply) {
            p[i] = param;
            m[i] = mean;
            v[i] = square;
        }
        bad += (size_t)dp_update_is_bad(grad, param, apply);
    }
    return bad;
}

/* The AdamW pass (params, grads, state1 = exp_avg, state2 = exp_avg_sq): elements. */
static size_t adamw_step(const dp_loop_args *a, size_t begin, size_t end)
{
    float *p = a->params + begin, *g = a->grads + begin, *m = a->state1 + begin, *v = a->state2 + begin;
    if (a->adamw->apply)
        return adamw_elements(p, g, m, v, end - begin, a->adamw, 1);
    return adamw_elements(p, g, m, v, end - begin, a->adamw, 0);
}

/* ---- per column: sums down the rows, in row order ---- */

/* db[c] = (accumulate ? db[c] : 0) + dy[0, c] + dy[1, c] + ..., dy in x, db in y: columns. */
static size_t bias_grad(const dp_loop_args *a, size_t begin, size_t end)
{
    float *restrict db = a->y + begin;
    size_t width = end - begin, cols = a->cols;
    if (!a->accumulate)
        memset(db, 0, width * sizeof *db);
    for (size_t r = 0; r < a->rows; r++) {
        const float *restrict row = a->x + r * cols + begin;
        for (size_t c = 0; c < width; c++)
            db[c] = dp_add(db[c], row[c]);
    }
    return 0;
}

/* sums[c] = sum of x[r, c] and sums[cols + c] = sum of x[r, c] other[r, c], in double: columns. */
static size_t column_sums(const dp_loop_args *a, size_t begin, size_t end)
{
    size_t cols = a->cols, width = end - begin;
    double *restrict sums = a->sums + begin, *restrict products = a->sums + cols + begin;
    for (size_t c = 0; c < width; c++)
        sums[c] = products[c] = 0.0;
    for (size_t r = 0; r < a->rows; r++) {
        const float *restrict x = a->x + r * cols + begin, *restrict b = a->other + r * cols + begin;
        for (size_t c = 0; c < width; c++) {
            sums[c] = dp_dadd(sums[c], (double)x[c]);
            products[c] = dp_dadd(products[c], dp_dmul((double)x[c], (double)b[c]));
        }
    }
    return 0;
}

/* dgamma (+)= (float) sums[cols + c], dbeta (+)= (float) sums[c]: columns. */
static size_t bn_param_grads(const dp_loop_args *a, size_t begin, size_t end)
{
    const double *restrict sums = a->sums;
    float *restrict dgamma = a->dgamma, *restrict dbeta = a->dbeta;
    for (size_t c = begin; c < end; c++) {
        dgamma[c] = dp_accumulate_sum(dgamma[c], sums[a->cols + c], a->accumulate);
        dbeta[c] = dp_accumulate_sum(dbeta[c], sums[c], a->accumulate);
    }
    return 0;
}

/* running = (1 - momentum) running + momentum batch, batch mean in mean, variance in var: columns. */
static size_t bn_update_running(const dp_loop_args *a, size_t begin, size_t end)
{
    float *restrict running_mean = a->running_mean, *restrict running_var = a->running_var;
    const float *restrict mean = a->mean, *restrict var = a->var;
    float momentum = a->momentum;
    for (size_t c = begin; c < end; c++) {
        running_mean[c] = dp_running_update(running_mean[c], mean[c], momentum);
        running_var[c] = dp_running_update(running_var[c], var[c], momentum);
    }
    return 0;
}

/* y = 1 / sqrt(var + eps): columns. */
static size_t inverse_std(const dp_loop_args *a, size_t begin, size_t end)
{
    float *restrict invstd = a->y;
    const float *restrict var = a->var;
    float eps = a->eps;
    for (size_t c = begin; c < end; c++)
        invstd[c] = dp_inverse_std(var[c], eps);
    return 0;
}

/* sums = each channel's pixels' in_sums added: elements of [2, channels] (row s of channel ch
 * is element s channels + ch, its columns start at that times pixels). */
static size_t bn_channel_sums(const dp_loop_args *a, size_t begin, size_t end)
{
    for (size_t k = begin; k < end; k++)
        a->sums[k] = dp_bn_channel_sum(a->in_sums + k * a->pixels, (int)a->pixels);
    return 0;
}

/* The batch's mean, invstd and unbiased variance from in_sums' rows over `values`: channels
 * (cols of them). */
static size_t bn_batch_stats(const dp_loop_args *a, size_t begin, size_t end)
{
    for (size_t c = begin; c < end; c++)
        dp_bn_batch_stats(a->in_sums[c], a->in_sums[a->cols + c], a->values, a->eps, &a->batch_mean[c],
                          &a->batch_invstd[c], &a->batch_var[c]);
    return 0;
}

/* y = in_sums / values, rounded to float: elements. */
static size_t bn_means(const dp_loop_args *a, size_t begin, size_t end)
{
    for (size_t k = begin; k < end; k++)
        a->y[k] = dp_bn_mean(a->in_sums[k], a->values);
    return 0;
}

/* y[k] = x[k / pixels]: elements of the spread rows. */
static size_t bn_spread(const dp_loop_args *a, size_t begin, size_t end)
{
    for (size_t k = begin; k < end; k++)
        a->y[k] = a->x[k / a->pixels];
    return 0;
}

/* ---- the losses: totals in double, added in the order of the elements ---- */

/* Softmax cross-entropy of logits x against labels; gradient into y unless NULL; sums[0] +=
 * the loss, sums[1] += rows whose argmax is the label: rows, the whole matrix at once. */
static size_t softmax_xent(const dp_loop_args *a, size_t begin, size_t end)
{
    size_t cols = a->cols;
    for (size_t r = begin; r < end; r++) {
        const float *z = a->x + r * cols;
        int label = a->labels[r];
        int best = dp_row_argmax(z, (int)cols);
        /* Subtracting the max keeps exp() finite for any logits. */
        double sum = 0.0;
        for (size_t c = 0; c < cols; c++)
            sum = dp_dadd(sum, dp_xent_exp(z[c], z[best]));
        a->sums[0] += dp_xent_loss(sum, z[label], z[best]);
        a->sums[1] += best == label;
        if (a->y) {
            float *d = a->y + r * cols;
            for (size_t c = 0; c < cols; c++)
                d[c] = dp_xent_grad(z[c], z[best], sum, (int)c == label);
        }
    }
    return 0;
}

/* MSE of predictions x against targets other; gradient into y unless NULL; sums[0] += the
 * per-sample loss: rows, the whole matrix at once. */
static size_t mse(const dp_loop_args *a, size_t begin, size_t end)
{
    size_t cols = a->cols;
    const float *pred = a->x + begin * cols, *targets = a->other + begin * cols;
    size_t n = (end - begin) * cols;
    double squares = 0.0;
    for (size_t i = 0; i < n; i++) {
        float diff = dp_mse_diff(pred[i], targets[i]);
        squares = dp_dadd(squares, dp_mse_square(diff));
        if (a->y)
            a->y[begin * cols + i] = dp_mse_grad(diff, (int)cols);
    }
    a->sums[0] += squares / (double)cols;
    return 0;
}

/* ---- sliding windows, over samples ---- */

static size_t window_pixels(const dp_window *w)
{
    return (size_t)w->channels * w->height * w->width;
}

/* The windows [first, last) whose column j of the kernel lands inside the image's width. */
static inline void inside_columns(const dp_window *w, int j, int *first, int *last)
{
    int before = w->padding - j, until = w->width + w->padding - j; /* ow s must reach these */
    int lo = before <= 0 ? 0 : (before + w->stride - 1) / w->stride;
    int hi = until <= 0 ? 0 : (until + w->stride - 1) / w->stride;
    *first = lo < w->out_w ? lo : w->out_w;
    *last = hi < *first ? *first : hi < w->out_w ? hi : w->out_w;
}

/* Tap (c, i, j)'s row of one sample: out[oh, ow] = plane[oh s - p + i, ow s - p + j], 0 outside. */
static inline void im2col_tap(const float *restrict plane, float *restrict out, const dp_window *w, int i, int j)
{
    int first, last;
    inside_columns(w, j, &first, &last);
    for (int oh = 0; oh < w->out_h; oh++, out += w->out_w) {
        int h = oh * w->stride - w->padding + i;
        if (h < 0 || h >= w->height) {
            memset(out, 0, (size_t)w->out_w * sizeof *out);
            continue;
        }
        const float *restrict row = plane + (size_t)h * w->width;
        int shift = j - w->padding; /* the pixel under window ow is row[ow s + shift] */
        for (int ow = 0; ow < first; ow++)
            out[ow] = 0.0f;
        if (w->stride == 1)
            memcpy(out + first, row + first + shift, (size_t)(last - first) * sizeof *out);
        else
            for (int ow = first; ow < last; ow++)
                out[ow] = row[ow * w->stride + shift];
        for (int ow = last; ow < w->out_w; ow++)
            out[ow] = 0.0f;
    }
}

/* col [(c, i, j), (r, oh, ow)] from x [r, c, h, w] (a->rows samples in all): samples. */
static size_t im2col(const dp_loop_args *a, size_t begin, size_t end)
{
    const dp_window *w = a->window;
    size_t positions = (size_t)w->out_h * w->out_w, ld = a->rows * positions;
    for (size_t r = begin; r < end; r++) {
        float *col = a->y + r * positions;
        for (int c = 0; c < w->channels; c++) {
            const float *plane = a->x + (r * w->channels + c) * (size_t)w->height * w->width;
            for (int i = 0; i < w->kernel_h; i++)
                for (int j = 0; j < w->kernel_w; j++, col += ld)
                    im2col_tap(plane, col, w, i, j);
        }
    }
    return 0;
}

/* plane[oh s - p + i, ow s - p + j] += tap (c, i, j)'s row, where inside. */
static inline void col2im_tap(const float *restrict in, float *restrict plane, const dp_window *w, int i, int j)
{
    int first, last;
    inside_columns(w, j, &first, &last);
    for (int oh = 0; oh < w->out_h; oh++, in += w->out_w) {
        int h = oh * w->stride - w->padding + i;
        if (h < 0 || h >= w->height)
            continue;
        float *restrict row = plane + (size_t)h * w->width;
        int shift = j - w->padding;
        if (w->stride == 1)
            for (int ow = first; ow < last; ow++)
                row[ow + shift] = dp_add(row[ow + shift], in[ow]);
        else
            for (int ow = first; ow < last; ow++)
                row[ow * w->stride + shift] = dp_add(row[ow * w->stride + shift], in[ow]);
    }
}

/* dx [r, c, h, w] (y) from col (x, a->rows samples in all): samples. The taps run backwards, so
 * each pixel adds its entries in window order, dp_col2im_value's (the GPU gathers them). */
static size_t col2im(const dp_loop_args *a, size_t begin, size_t end)
{
    const dp_window *w = a->window;
    size_t positions = (size_t)w->out_h * w->out_w, ld = a->rows * positions, plane_floats = (size_t)w->height * w->width;
    for (size_t r = begin; r < end; r++) {
        float *dx = a->y + r * window_pixels(w);
        memset(dx, 0, window_pixels(w) * sizeof *dx);
        for (int c = 0; c < w->channels; c++)
            for (int i = w->kernel_h - 1; i >= 0; i--)
                for (int j = w->kernel_w - 1; j >= 0; j--) {
                    size_t tap = ((size_t)c * w->kernel_h + i) * w->kernel_w + j;
                    col2im_tap(a->x + tap * ld + r * positions, dx + c * plane_floats, w, i, j);
                }
    }
    return 0;
}

/* y [middle, outer, inner] from x [outer, middle, inner] (a->rows outer, a->cols middle): y's
 * blocks of the middle axis. */
static size_t swap_axes(const dp_loop_args *a, size_t begin, size_t end)
{
    size_t inner = a->inner;
    for (size_t m = begin; m < end; m++)
        for (size_t o = 0; o < a->rows; o++)
            memcpy(a->y + (m * a->rows + o) * inner, a->x + (o * a->cols + m) * inner, inner * sizeof *a->y);
    return 0;
}

/* Rows of y are rows a->index[r] of x, a->cols 4-byte words each (bytes moved whole). */
static size_t gather_rows(const dp_loop_args *a, size_t begin, size_t end)
{
    size_t words = a->cols;
    for (size_t r = begin; r < end; r++)
        memcpy(a->y + r * words, a->x + (size_t)a->index[r] * words, words * sizeof *a->y);
    return 0;
}

/* The recipe's max pooling, 2x2 windows by 2, on rows of 4 windows or more: 4 windows at a time
 * in vectors of 4 lanes (GCC's vector types, which every instruction set has), a row's last 4
 * overlapping the block before when the row is no multiple of 4. The vectoriser leaves rows of
 * 7 or 14 windows scalar, and scalar comparisons branch on the data. */
static int max_pool_2x2(const dp_window *w, dp_pool pool)
{
    return pool == DP_POOL_MAX && w->kernel_h == 2 && w->kernel_w == 2 && w->stride == 2 && !w->padding &&
           w->out_w >= 4;
}

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f load4(const float *p)
{
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store4(float *p, v4f v)
{
    memcpy(p, &v, sizeof v);
}

/* dp_argmax_beats(v, later, best, earlier) in each lane: v is a NaN where best is not, or larger. */
static inline v4i later_beats(v4f v, v4f best)
{
    return (v > best) | ((v != v) & (best == best));
}

static inline v4f select4(v4i take, v4f a, v4f b)
{
    return (v4f)(((v4i)a & take) | ((v4i)b & ~take));
}

/* Windows ow..ow + 3 of a row pair: a, b (top left, right), c, d (bottom), in window order. */
typedef struct windows4 {
    v4f a, b, c, d;
} windows4;

static inline windows4 windows_at(const float *top, const float *bottom, int ow)
{
    v4f t0 = load4(top + 2 * ow), t1 = load4(top + 2 * ow + 4);
    v4f b0 = load4(bottom + 2 * ow), b1 = load4(bottom + 2 * ow + 4);
    v4i even = {0, 2, 4, 6}, odd = {1, 3, 5, 7};
    return (windows4){__builtin_shuffle(t0, t1, even), __builtin_shuffle(t0, t1, odd),
                      __builtin_shuffle(b0, b1, even), __builtin_shuffle(b0, b1, odd)};
}

/* The first of ow0, ow0 + 4, ... and, for a row no multiple of 4, its last 4. */
#define FOR_BLOCKS_OF_4(ow, out_w) \
    for (int ow = 0, next_ = 0; next_ < (out_w); next_ = ow + 4, ow = next_ + 4 <= (out_w) ? next_ : (out_w) - 4)

static void max_pool_2x2_plane(const float *x, float *y, const dp_window *w)
{
    for (int oh = 0; oh < w->out_h; oh++, y += w->out_w) {
        const float *top = x + (size_t)2 * oh * w->width, *bottom = top + w->width;
        FOR_BLOCKS_OF_4(ow, w->out_w) {
            windows4 q = windows_at(top, bottom, ow);
            v4f best = select4(later_beats(q.b, q.a), q.b, q.a);
            best = select4(later_beats(q.c, best), q.c, best);
            store4(y + ow, select4(later_beats(q.d, best), q.d, best));
        }
    }
}

/* dx over its whole plane: each window's gradient at its first maximum (0 + g, as a sum from 0
 * gives), zeros elsewhere and in the rows and columns no window covers. */
static void max_pool_2x2_plane_backward(const float *x, const float *dy, float *dx, const dp_window *w)
{
    const v4f zero = {0.0f, 0.0f, 0.0f, 0.0f};
    const v4i low = {0, 4, 1, 5}, high = {2, 6, 3, 7}; /* the lanes of (left, right) interleaved */
    memset(dx, 0, (size_t)w->height * w->width * sizeof *dx);
    for (int oh = 0; oh < w->out_h; oh++, dy += w->out_w) {
        const float *top = x + (size_t)2 * oh * w->width, *bottom = top + w->width;
        float *dtop = dx + (size_t)2 * oh * w->width, *dbottom = dtop + w->width;
        FOR_BLOCKS_OF_4(ow, w->out_w) {
            windows4 q = windows_at(top, bottom, ow);
            v4i take_b = later_beats(q.b, q.a);
            v4f best = select4(take_b, q.b, q.a);
            v4i take_c = later_beats(q.c, best);
            v4i take_d = later_beats(q.d, select4(take_c, q.c, best));
            v4i is_c = take_c & ~take_d, is_b = take_b & ~take_c & ~take_d, is_a = ~(take_b | take_c | take_d);
            v4f g = load4(dy + ow) + zero;
            v4f ga = select4(is_a, g, zero), gb = select4(is_b, g, zero);
            v4f gc = select4(is_c, g, zero), gd = select4(take_d, g, zero);
            store4(dtop + 2 * ow, __builtin_shuffle(ga, gb, low));
            store4(dtop + 2 * ow + 4, __builtin_shuffle(ga, gb, high));
            store4(dbottom + 2 * ow, __builtin_shuffle(gc, gd, low));
            store4(dbottom + 2 * ow + 4, __builtin_shuffle(gc, gd, high));
        }
    }
}

/* y [r, c, oh, ow] from x [r, c, h, w]: rows. */
static size_t pool_forward(const dp_loop_args *a, size_t begin, size_t end)
{
    const dp_window *w = a->window;
    size_t plane = (size_t)w->height * w->width;
    for (size_t r = begin; r < end; r++)
        for (int c = 0; c < w->channels; c++) {
            const float *x = a->x + (r * w->channels + c) * plane;
            float *y = a->y + (r * w->channels + c) * (size_t)w->out_h * w->out_w;
            if (max_pool_2x2(w, a->pool)) {
                max_pool_2x2_plane(x, y, w);
                continue;
            }
            for (int oh = 0; oh < w->out_h; oh++)
                for (int ow = 0; ow < w->out_w; ow++)
                    *y++ = dp_pool_value(x, w, oh, ow, a->pool);
        }
    return 0;
}

/* dx (y) from x and dy (other): rows. Scattered window by window in ascending order, so each
 * pixel adds in dp_pool_grad_value's order (the GPU gathers) with each argmax found once. */
static size_t pool_backward(const dp_loop_args *a, size_t begin, size_t end)
{
    const dp_window *w = a->window;
    size_t plane = (size_t)w->height * w->width, out_plane = (size_t)w->out_h * w->out_w;
    float area = (float)(w->kernel_h * w->kernel_w);
    for (size_t r = begin; r < end; r++)
        for (int c = 0; c < w->channels; c++) {
            size_t at = r * w->channels + c;
            const float *x = a->x + at * plane, *dy = a->other + at * out_plane;
            float *dx = a->y + at * plane;
            if (max_pool_2x2(w, a->pool)) {
                max_pool_2x2_plane_backward(x, dy, dx, w);
                continue;
            }
            memset(dx, 0, plane * sizeof *dx);
            for (int oh = 0; oh < w->out_h; oh++)
                for (int ow = 0; ow < w->out_w; ow++) {
                    float g = dy[oh * w->out_w + ow];
                    if (a->pool == DP_POOL_MAX) {
                        int best = dp_window_argmax(x, w, oh, ow);
                        dx[best] = dp_add(dx[best], g);
                        continue;
                    }
                    for (int i = 0; i < w->kernel_h; i++)
                        for (int j = 0; j < w->kernel_w; j++) {
                            int h = oh * w->stride - w->padding + i, v = ow * w->stride - w->padding + j;
                            if (h >= 0 && h < w->height && v >= 0 && v < w->width)
                                dx[h * w->width + v] = dp_add(dx[h * w->width + v], dp_div(g, area));
                        }
                }
        }
    return 0;
}

#define DP_LOOPS_NAME_(isa) dp_cpu_loops_##isa
#define DP_LOOPS_NAME(isa) DP_LOOPS_NAME_(isa)
#define DP_LOOPS_STRING_(isa) #isa
#define DP_LOOPS_STRING(isa) DP_LOOPS_STRING_(isa)

extern const dp_cpu_loops DP_LOOPS_NAME(DP_LOOPS_ISA);
const dp_cpu_loops DP_LOOPS_NAME(DP_LOOPS_ISA) = {
    .isa = DP_LOOPS_STRING(DP_LOOPS_ISA),
    .bias_act_forward = bias_act_forward,
    .relu_forward = relu_forward,
    .relu_backward = relu_backward,
    .bias_grad = bias_grad,
    .dropout_forward = dropout_forward,
    .multiply = multiply,
    .accumulate = accumulate,
    .column_sums = column_sums,
    .bn_normalize = bn_normalize,
    .bn_backward_input = bn_backward_input,
    .bn_param_grads = bn_param_grads,
    .bn_update_running = bn_update_running,
    .inverse_std = inverse_std,
    .bn_channel_sums = bn_channel_sums,
    .bn_batch_stats = bn_batch_stats,
    .bn_means = bn_means,
    .bn_spread = bn_spread,
    .softmax_xent = softmax_xent,
    .mse = mse,
    .count_nonfinite = count_nonfinite,
    .sum_squares = sum_squares,
    .sgd_step = sgd_step,
    .adamw_step = adamw_step,
    .im2col = im2col,
    .col2im = col2im,
    .swap_axes = swap_axes,
    .pool_forward = pool_forward,
    .pool_backward = pool_backward,
    .gather_rows = gather_rows,
};
