/* The sliding-window operations: im2col and col2im (convolution as a GEMM), max and average
 * pooling forward and backward. A row's param
 * picks a window from `windows` (+ POOL_AVG for average pooling); its shape's rows are samples.
 * Copies (im2col, max pooling forward) must give the reference's bits; sums are held
 * to the bound of their terms, and every backend adds them in window order, so their bits agree too. */
#include "tests/ops/op_table.h"

#include <math.h>
#include <stdlib.h>

/* Recipe-sized, non-square with stride 2 and padding, kernel 5, kernel 1; pooling 2x2 and an
 * overlapping 3x3 by 2 that leaves an edge out, 2x2 on odd sides (the CPU's 2x2 path, its last
 * row and column uncovered) and on rows of 7 windows (its vectors of 4 overlapping at the end). */
static const dp_window windows[] = {
    {.channels = 1, .height = 28, .width = 28, .kernel_h = 3, .kernel_w = 3, .stride = 1, .padding = 1},
    {.channels = 3, .height = 7, .width = 6, .kernel_h = 3, .kernel_w = 3, .stride = 2, .padding = 1},
    {.channels = 2, .height = 9, .width = 9, .kernel_h = 5, .kernel_w = 5, .stride = 1, .padding = 2},
    {.channels = 4, .height = 5, .width = 5, .kernel_h = 1, .kernel_w = 1, .stride = 1, .padding = 0},
    {.channels = 3, .height = 8, .width = 8, .kernel_h = 2, .kernel_w = 2, .stride = 2, .padding = 0},
    {.channels = 2, .height = 7, .width = 10, .kernel_h = 3, .kernel_w = 3, .stride = 2, .padding = 0},
    {.channels = 3, .height = 7, .width = 9, .kernel_h = 2, .kernel_w = 2, .stride = 2, .padding = 0},
    {.channels = 2, .height = 6, .width = 15, .kernel_h = 2, .kernel_w = 2, .stride = 2, .padding = 0},
    /* issue 36: torchvision's padded 3x3 max pool by 2 (its padding never wins), and the global average */
    {.channels = 3, .height = 9, .width = 8, .kernel_h = 3, .kernel_w = 3, .stride = 2, .padding = 1},
    {.channels = 4, .height = 7, .width = 5, .kernel_h = 7, .kernel_w = 5, .stride = 1, .padding = 0},
};

enum { POOL_AVG = 256 };

static dp_window window_of(const op_run *r)
{
    dp_window w = windows[r->param % POOL_AVG];
    w.out_h = (w.height + 2 * w.padding - w.kernel_h) / w.stride + 1;
    w.out_w = (w.width + 2 * w.padding - w.kernel_w) / w.stride + 1;
    return w;
}

static dp_pool pool_of(const op_run *r)
{
    return r->param >= POOL_AVG ? DP_POOL_AVG : DP_POOL_MAX;
}

static size_t image_floats(const dp_window *w)
{
    return (size_t)w->channels * w->height * w->width;
}

static size_t taps(const dp_window *w)
{
    return (size_t)w->channels * w->kernel_h * w->kernel_w;
}

static size_t col_floats(const dp_window *w)
{
    return (size_t)w->out_h * w->out_w * taps(w);
}

static size_t out_floats(const dp_window *w)
{
    return (size_t)w->channels * w->out_h * w->out_w;
}

/* The col index of window (oh, ow), tap (c, i, j) of sample n; -1 where the tap is padding. */
static long tap_source(const dp_window *w, int oh, int ow, int c, int i, int j)
{
    int h = oh * w->stride - w->padding + i, v = ow * w->stride - w->padding + j;
    if (h < 0 || h >= w->height || v < 0 || v >= w->width)
        return -1;
    return ((long)c * w->height + h) * w->width + v;
}

/* Runs body for every tap of every window of every sample, with col_at its index in col
 * [taps, rows positions] and src its pixel's index in the sample (-1: padding). */
#define FOR_EACH_TAP(w, rows, body)                                                                  \
    for (int n = 0; n < (rows); n++)                                                                 \
        for (int oh = 0; oh < (w).out_h; oh++)                                                       \
            for (int ow = 0; ow < (w).out_w; ow++)                                                   \
                for (int c = 0; c < (w).channels; c++)                                               \
                    for (int i = 0; i < (w).kernel_h; i++)                                           \
                        for (int j = 0; j < (w).kernel_w; j++) {                                     \
                            size_t positions = (size_t)(w).out_h * (w).out_w;                        \
                            size_t tap = ((size_t)c * (w).kernel_h + i) * (w).kernel_w + j;          \
                            size_t col_at = tap * (size_t)(rows) * positions + (size_t)n * positions + \
                                            (size_t)oh * (w).out_w + ow;                             \
                            long src = tap_source(&(w), oh, ow, c, i, j);                            \
                            body                                                                     \
                        }

/* ---- im2col: x (hostile) -> col ---- */

static void im2col_prepare(op_run *r)
{
    dp_window w = window_of(r);
    op_input_f32(r, (size_t)r->shape.rows * image_floats(&w), FILL_HOSTILE, 2.0f);
    op_output_f32(r, (size_t)r->shape.rows * col_floats(&w), FILL_FINITE, 1.0f, SAME_BITS_EVERYWHERE);
}

static void im2col_run(const dp_backend *be, op_run *r)
{
    dp_window w = window_of(r);
    be->im2col(be, OP_DEV(r, 0), OP_DEV(r, 1), r->shape.rows, &w);
}

static void im2col_reference(op_run *r)
{
    dp_window w = window_of(r);
    const float *x = OP_HOST(r, 0);
    float *col = OP_HOST(r, 1);
    FOR_EACH_TAP(w, r->shape.rows, { col[col_at] = src < 0 ? 0.0f : x[(size_t)n * image_floats(&w) + (size_t)src]; })
}

const op_impl op_im2col = {im2col_prepare, im2col_run, im2col_reference};

/* ---- col2im: col -> dx (overwritten), each pixel the sum of its taps ---- */

static void col2im_prepare(op_run *r)
{
    dp_window w = window_of(r);
    op_input_f32(r, (size_t)r->shape.rows * col_floats(&w), FILL_FINITE, 1.0f);
    op_output_f32(r, (size_t)r->shape.rows * image_floats(&w), FILL_HOSTILE, 1.0f, SAME_BITS_EVERYWHERE);
}

static void col2im_run(const dp_backend *be, op_run *r)
{
    dp_window w = window_of(r);
    be->col2im(be, OP_DEV(r, 0), OP_DEV(r, 1), r->shape.rows, &w);
}

static void col2im_reference(op_run *r)
{
    dp_window w = window_of(r);
    const float *col = OP_HOST(r, 0);
    float *dx = OP_HOST(r, 1);
    size_t n_out = (size_t)r->shape.rows * image_floats(&w);
    long double *sum = calloc(n_out + 1, sizeof *sum), *magnitude = calloc(n_out + 1, sizeof *magnitude);
    int *terms = calloc(n_out + 1, sizeof *terms);
    FOR_EACH_TAP(w, r->shape.rows, {
        if (src >= 0) {
            size_t at = (size_t)n * image_floats(&w) + (size_t)src;
            sum[at] += col[col_at];
            magnitude[at] += fabsf(col[col_at]);
            terms[at]++;
        }
    })
    double *scale = op_scaled(r, 1);
    for (size_t i = 0; i < n_out; i++) {
        dx[i] = (float)sum[i];
        scale[i] = (double)(terms[i] * magnitude[i]);
    }
    free(sum);
    free(magnitude);
    free(terms);
}

const op_impl op_col2im = {col2im_prepare, col2im_run, col2im_reference};

/* ---- pooling: one window's maximum (NaN wins, the first among equals) or mean ---- */

/* The plane index of window (oh, ow)'s tap (i, j), or -1 in the padding. */
static int window_tap(const dp_window *w, int oh, int ow, int i, int j)
{
    int h = oh * w->stride - w->padding + i, v = ow * w->stride - w->padding + j;
    return h >= 0 && h < w->height && v >= 0 && v < w->width ? h * w->width + v : -1;
}

/* The plane index of window (oh, ow)'s maximum under that rule (the padding never wins). */
static int window_max_at(const float *plane, const dp_window *w, int oh, int ow)
{
    int best = -1;
    for (int i = 0; i < w->kernel_h; i++)
        for (int j = 0; j < w->kernel_w; j++) {
            int at = window_tap(w, oh, ow, i, j);
            if (at < 0)
                continue;
            float v = plane[at];
            if (best < 0 || (isnan(v) && !isnan(plane[best])) || (!isnan(plane[best]) && v > plane[best]))
                best = at;
        }
    return best;
}

static void pool_forward_prepare(op_run *r)
{
    dp_window w = window_of(r);
    op_input_f32(r, (size_t)r->shape.rows * image_floats(&w), pool_of(r) == DP_POOL_MAX ? FILL_HOSTILE : FILL_FINITE,
                 2.0f);
    op_output(r, OP_F32, (size_t)r->shape.rows * out_floats(&w), SAME_BITS_EVERYWHERE);
}

static void pool_forward_run(const dp_backend *be, op_run *r)
{
    dp_window w = window_of(r);
    be->pool_forward(be, OP_DEV(r, 0), OP_DEV(r, 1), r->shape.rows, &w, pool_of(r));
}

static void pool_forward_reference(op_run *r)
{
    dp_window w = window_of(r);
    const float *x = OP_HOST(r, 0);
    float *y = OP_HOST(r, 1);
    double *scale = pool_of(r) == DP_POOL_AVG ? op_scaled(r, 1) : NULL;
    double area = (double)w.kernel_h * w.kernel_w;
    for (size_t plane = 0; plane < (size_t)r->shape.rows * w.channels; plane++)
        for (int oh = 0; oh < w.out_h; oh++)
            for (int ow = 0; ow < w.out_w; ow++) {
                const float *p = x + plane * w.height * w.width;
                size_t at = (plane * w.out_h + oh) * w.out_w + ow;
                if (!scale) {
                    y[at] = p[window_max_at(p, &w, oh, ow)];
                    continue;
                }
                long double sum = 0.0L, magnitude = 0.0L;
                for (int i = 0; i < w.kernel_h; i++)
                    for (int j = 0; j < w.kernel_w; j++) {
                        int at_tap = window_tap(&w, oh, ow, i, j);
                        float v = at_tap < 0 ? 0.0f : p[at_tap]; /* the padding counts as zeros */
                        sum += v;
                        magnitude += fabsf(v);
                    }
                y[at] = (float)(sum / area);
                scale[at] = (double)((area + 1.0) * magnitude / area); /* the terms and the division */
            }
}

const op_impl op_pool_forward = {pool_forward_prepare, pool_forward_run, pool_forward_reference};

/* ---- pooling backward: x, dy -> dx (overwritten) ---- */

static void pool_backward_prepare(op_run *r)
{
    dp_window w = window_of(r);
    op_input_f32(r, (size_t)r->shape.rows * image_floats(&w), FILL_FINITE, 2.0f);
    op_input_f32(r, (size_t)r->shape.rows * out_floats(&w), FILL_FINITE, 1.0f);
    op_output_f32(r, (size_t)r->shape.rows * image_floats(&w), FILL_HOSTILE, 1.0f, SAME_BITS_EVERYWHERE);
}

static void pool_backward_run(const dp_backend *be, op_run *r)
{
    dp_window w = window_of(r);
    be->pool_backward(be, OP_DEV(r, 0), OP_DEV(r, 1), OP_DEV(r, 2), r->shape.rows, &w, pool_of(r));
}

static void pool_backward_reference(op_run *r)
{
    dp_window w = window_of(r);
    const float *x = OP_HOST(r, 0), *dy = OP_HOST(r, 1);
    float *dx = OP_HOST(r, 2);
    size_t plane_floats = (size_t)w.height * w.width, n_out = (size_t)r->shape.rows * image_floats(&w);
    long double *sum = calloc(n_out + 1, sizeof *sum), *magnitude = calloc(n_out + 1, sizeof *magnitude);
    double area = (double)w.kernel_h * w.kernel_w;
    for (size_t plane = 0; plane < (size_t)r->shape.rows * w.channels; plane++)
        for (int oh = 0; oh < w.out_h; oh++)
            for (int ow = 0; ow < w.out_w; ow++) {
                float g = dy[(plane * w.out_h + oh) * w.out_w + ow];
                for (int i = 0; i < w.kernel_h; i++)
                    for (int j = 0; j < w.kernel_w; j++) {
                        int at = window_tap(&w, oh, ow, i, j);
                        if (at < 0)
                            continue;
                        int passes = pool_of(r) == DP_POOL_AVG || at == window_max_at(x + plane * plane_floats, &w, oh, ow);
                        long double share = pool_of(r) == DP_POOL_AVG ? (long double)g / area : g;
                        sum[plane * plane_floats + (size_t)at] += passes ? share : 0.0L;
                        magnitude[plane * plane_floats + (size_t)at] += passes ? fabsl(share) : 0.0L;
                    }
            }
    double *scale = op_scaled(r, 2);
    for (size_t i = 0; i < n_out; i++) {
        dx[i] = (float)sum[i];
        scale[i] = (double)(2.0 * area * magnitude[i]); /* each share's division and sum */
    }
    free(sum);
    free(magnitude);
}

const op_impl op_pool_backward = {pool_backward_prepare, pool_backward_run, pool_backward_reference};

/* ---- swap_axes: x [outer, middle, inner] -> y [middle, outer, inner]; the row's shape is
 * (outer, middle) and its param the inner run ---- */

static void swap_axes_prepare(op_run *r)
{
    size_t n = op_elements(r) * (size_t)r->param;
    op_input_f32(r, n, FILL_HOSTILE, 1.0f);
    op_output_f32(r, n, FILL_HOSTILE, 1.0f, SAME_BITS_EVERYWHERE);
}

static void swap_axes_run(const dp_backend *be, op_run *r)
{
    be->swap_axes(be, OP_DEV(r, 0), OP_DEV(r, 1), (size_t)r->shape.rows, (size_t)r->shape.cols, (size_t)r->param);
}

static void swap_axes_reference(op_run *r)
{
    const float *x = OP_HOST(r, 0);
    float *y = OP_HOST(r, 1);
    size_t outer = (size_t)r->shape.rows, middle = (size_t)r->shape.cols, inner = (size_t)r->param;
    for (size_t o = 0; o < outer; o++)
        for (size_t m = 0; m < middle; m++)
            for (size_t q = 0; q < inner; q++)
                y[(m * outer + o) * inner + q] = x[(o * middle + m) * inner + q];
}

const op_impl op_swap_axes = {swap_axes_prepare, swap_axes_run, swap_axes_reference};
