/* The arithmetic of every backend operation, written once: what one element (or one row's
 * merge step) computes. The CPU backend's loops (cpu.c), the CUDA kernels (cuda_kernels.cu
 * and cuda_reductions.cu, through kernel_grid.h) and their host emulation
 * (tests/fakecuda/kernels.c) all call these, so `make check` compares the CUDA backend with
 * the CPU backend bit for bit on any machine.
 *
 * Exactness: every float and double operation that must round like the CPU's goes through
 * dp_add/dp_sub/dp_mul/dp_div (and the d-prefixed double forms). On the GPU they are the
 * __f*_rn / __d*_rn intrinsics, which nvcc never fuses into an FMA; on the host they are
 * plain operators, which C11 mode compiles without contraction (-ffp-contract=off, set in
 * Makefile.am). Denormals are kept on both (no --use_fast_math, no -ftz). libm's exp and log
 * are the one exception: CUDA's and glibc's may differ in the last bit (both within 1 ulp),
 * so results that pass through them are compared within a tolerance on a real GPU.
 *
 * Valid C11 and CUDA C++; no state, no allocation. */
#ifndef DP_KERNEL_MATH_H
#define DP_KERNEL_MATH_H

#include "dp/backend.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define DP_HD __host__ __device__
#else
#define DP_HD
#endif

/* Correctly rounded float and double arithmetic, never contracted into an FMA: the GPU's
 * round-to-nearest intrinsics, the plain operator on the host. */
#ifdef __CUDA_ARCH__
#define DP_ROUNDED(name, type, op, intrinsic)                                \
    static inline DP_HD type name(type a, type b) { return intrinsic(a, b); }
#else
#define DP_ROUNDED(name, type, op, intrinsic)                                \
    static inline DP_HD type name(type a, type b) { return a op b; }
#endif
DP_ROUNDED(dp_add, float, +, __fadd_rn)
DP_ROUNDED(dp_sub, float, -, __fsub_rn)
DP_ROUNDED(dp_mul, float, *, __fmul_rn)
DP_ROUNDED(dp_div, float, /, __fdiv_rn)
DP_ROUNDED(dp_dadd, double, +, __dadd_rn)
DP_ROUNDED(dp_dsub, double, -, __dsub_rn)
DP_ROUNDED(dp_dmul, double, *, __dmul_rn)
DP_ROUNDED(dp_ddiv, double, /, __ddiv_rn)
#undef DP_ROUNDED

/* The correctly rounded square roots: the GPU's intrinsic, libm's on the host (IEEE: exact). */
#ifdef __CUDA_ARCH__
#define DP_ROOT(name, type, host, intrinsic)                                 \
    static inline DP_HD type name(type a) { return intrinsic(a); }
#else
#define DP_ROOT(name, type, host, intrinsic)                                 \
    static inline DP_HD type name(type a) { return host(a); }
#endif
DP_ROOT(dp_sqrt, float, sqrtf, __fsqrt_rn)
DP_ROOT(dp_dsqrt, double, sqrt, __dsqrt_rn)
#undef DP_ROOT

/* ---- elementwise operations ---- */

/* ReLU when relu: a negative value becomes +0; -0 and NaN pass unchanged. */
static inline DP_HD float dp_act(float v, int relu)
{
    return relu && v < 0.0f ? 0.0f : v;
}

/* y + bias, then ReLU when relu. */
static inline DP_HD float dp_bias_act(float y, float bias, int relu)
{
    return dp_act(dp_add(y, bias), relu);
}

/* The gradient through a ReLU whose output was y: blocked where y <= 0 (NaN y passes dy). */
static inline DP_HD float dp_relu_grad(float dy, float y)
{
    return y <= 0.0f ? 0.0f : dy;
}

static inline DP_HD int dp_is_nonfinite(float x)
{
    return !isfinite(x);
}

/* What the optimizer pass counts per element, one test as before: without the update a
 * non-finite gradient; with it a non-finite updated parameter, which a non-finite gradient
 * always makes (inf or NaN reaches p in SGD and AdamW, 0 x inf included) and an update that
 * overflows float32 makes too (lr 1e38). */
static inline DP_HD int dp_update_is_bad(float grad, float param, int apply)
{
    return dp_is_nonfinite(apply ? param : grad);
}

/* The optimizer pass on one element, SGD: the gradient finished (*g *= grad_scale, the
 * 1 / global sample count), then with apply PyTorch's update: d = g + wd p; v = momentum v + d
 * (v unused when momentum is 0); p -= lr d. */
static inline DP_HD void dp_sgd_element(float *p, float *g, float *v, const dp_sgd_coefs *k)
{
    float grad = dp_mul(*g, k->grad_scale);
    *g = grad;
    if (!k->apply)
        return;
    float d = dp_add(grad, dp_mul(k->weight_decay, *p));
    if (k->momentum != 0.0f) {
        *v = dp_add(dp_mul(k->momentum, *v), d);
        d = *v;
    }
    *p = dp_sub(*p, dp_mul(k->lr, d));
}

/* The same for AdamW, in torch.optim.AdamW's order of roundings: p *= decay; m = beta1 m +
 * (1 - beta1) g; v = beta2 v + ((1 - beta2) g) g; p += neg_step (m / (sqrt(v) / bc2 + eps)). */
static inline DP_HD void dp_adamw_element(float *p, float *g, float *m, float *v, const dp_adamw_coefs *k)
{
    float grad = dp_mul(*g, k->grad_scale);
    *g = grad;
    if (!k->apply)
        return;
    float param = dp_mul(*p, k->decay_factor);
    float mean = dp_add(dp_mul(*m, k->beta1), dp_mul(k->one_minus_beta1, grad));
    float square = dp_add(dp_mul(*v, k->beta2), dp_mul(dp_mul(k->one_minus_beta2, grad), grad));
    float denom = dp_add(dp_div(dp_sqrt(square), k->bias_correction2_sqrt), k->eps);
    *m = mean;
    *v = square;
    *p = dp_add(param, dp_mul(k->neg_step_size, dp_div(mean, denom)));
}

/* ---- dropout and BatchNorm ---- */

/* splitmix64's finaliser: every input bit reaches every output bit. */
static inline DP_HD uint64_t dp_mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A unit's dropout mask: 24 hashed bits of (seed, step, sample, unit) as a uniform in [0, 1),
 * kept (scale) when >= p, else 0. */
static inline DP_HD float dp_dropout_mask(const dp_dropout_key *k, uint64_t row, uint64_t unit)
{
    uint64_t h = dp_mix64(dp_mix64(dp_mix64(k->seed ^ *k->step) ^ (k->first_sample + row)) ^ unit);
    float u = dp_mul((float)(int32_t)(h >> 40), 1.0f / 16777216.0f); /* 24 bits: exact through int32 */
    return u >= k->p ? k->scale : 0.0f;
}

static inline DP_HD float dp_bn_normalized(float x, float mean, float invstd)
{
    return dp_mul(dp_sub(x, mean), invstd);
}

static inline DP_HD float dp_bn_affine(float xhat, float gamma, float beta)
{
    return dp_add(dp_mul(gamma, xhat), beta);
}

/* A channel's sum of its pixels' column sums, added in the pixels' order. */
static inline DP_HD double dp_bn_channel_sum(const double *column_sums, int pixels)
{
    double sum = 0.0;
    for (int q = 0; q < pixels; q++)
        sum = dp_dadd(sum, column_sums[q]);
    return sum;
}

/* A mean over the statistics' n values, worked out in double and rounded once. */
static inline DP_HD float dp_bn_mean(double sum, double n)
{
    return (float)dp_ddiv(sum, n);
}

/* A channel's batch statistics from the sum and the sum of squares of its n values, in double:
 * the mean, 1 / sqrt(biased variance + eps) and the unbiased variance (the running one's). */
static inline DP_HD void dp_bn_batch_stats(double sum, double sum_squares, double n, float eps, float *mean,
                                           float *invstd, float *var_unbiased)
{
    double mu = dp_ddiv(sum, n), var = dp_dsub(dp_ddiv(sum_squares, n), dp_dmul(mu, mu));
    var = var > 0.0 ? var : 0.0;
    *mean = (float)mu;
    *invstd = (float)dp_ddiv(1.0, dp_dsqrt(dp_dadd(var, (double)eps)));
    *var_unbiased = (float)dp_ddiv(dp_dmul(var, n), dp_dsub(n, 1.0));
}

/* BatchNorm's input gradient: gamma invstd (dy - mean(dy) - xhat mean(dy xhat)). */
static inline DP_HD float dp_bn_input_grad(float dy, float xhat, float gamma, float invstd, float mean_dy,
                                           float mean_dy_xhat)
{
    float centred = dp_sub(dp_sub(dy, mean_dy), dp_mul(xhat, mean_dy_xhat));
    return dp_mul(dp_mul(gamma, invstd), centred);
}

/* A gradient sum: added to what the buffer holds, or replacing it (a step's first micro-batch). */
static inline DP_HD float dp_accumulate(float into, float sum, int accumulate)
{
    return accumulate ? dp_add(into, sum) : sum;
}

/* A column sum in double, as a parameter gradient: added to the float, or replacing it. */
static inline DP_HD float dp_accumulate_sum(float into, double sum, int accumulate)
{
    return dp_accumulate(into, (float)sum, accumulate);
}

/* --grad-dtype bf16: a float's bfloat16 bits, rounded to nearest even (a NaN stays a quiet NaN,
 * a finite value beyond bf16's range becomes infinity), and a bf16 value as a float (exact).
 * The comm layer's host sums round with these too (src/comm/elements.c). */
static inline DP_HD uint16_t dp_bf16_bits(float x)
{
#ifdef __CUDA_ARCH__
    uint32_t bits = __float_as_uint(x);
#else
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
#endif
    /* Half an ulp of bf16, less one when the kept bit is even: ties go to the even neighbour.
     * A select rather than a branch, so the host's loops vectorise. */
    uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16, quiet_nan = (bits >> 16) | 0x40u;
    return (uint16_t)((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

static inline DP_HD float dp_bf16_value(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
#ifdef __CUDA_ARCH__
    return __uint_as_float(bits);
#else
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
#endif
}

/* running = (1 - momentum) running + momentum batch. */
static inline DP_HD float dp_running_update(float running, float batch, float momentum)
{
    return dp_add(dp_mul(dp_sub(1.0f, momentum), running), dp_mul(momentum, batch));
}

static inline DP_HD float dp_inverse_std(float var, float eps)
{
    return dp_div(1.0f, dp_sqrt(dp_add(var, eps)));
}

/* MSE on one element: the difference, its square (added in double) and the gradient
 * 2 (pred - target) / cols. */
static inline DP_HD float dp_mse_diff(float pred, float target)
{
    return dp_sub(pred, target);
}

/* A gradient value as the update scales it (rounded to float), squared exactly: a float's 24-bit
 * significand squared fits double's 53 (--clip-grad-norm's sum of squares). */
static inline DP_HD double dp_scaled_square(float x, float scale)
{
    float v = dp_mul(x, scale);
    return dp_dmul((double)v, (double)v);
}

static inline DP_HD double dp_mse_square(float diff)
{
    return dp_dmul((double)diff, (double)diff);
}

static inline DP_HD float dp_mse_grad(float diff, int cols)
{
    return dp_div(dp_mul(2.0f, diff), (float)cols);
}

/* ---- softmax cross-entropy, one row ---- */

/* The argmax rule of both backends (PyTorch's and NumPy's): NaN counts as larger than every
 * number, and among equal values the first index wins (-0 equals +0, NaN equals NaN). 1 when
 * (v, at) comes before (best, best_at) in that order. A total order on (value, index) pairs,
 * so any merge tree (a warp's butterfly, a loop) finds the same winner. */
static inline DP_HD int dp_argmax_beats(float v, int at, float best, int best_at)
{
    int v_nan = isnan(v), best_nan = isnan(best);
    if (v_nan != best_nan)
        return v_nan;
    if (!v_nan && v != best)
        return v > best;
    return at < best_at;
}

/* The predicted class of a row of cols values: the first one no other beats. */
static inline DP_HD int dp_row_argmax(const float *z, int cols)
{
    int best = 0;
    for (int c = 1; c < cols; c++)
        if (dp_argmax_beats(z[c], c, z[best], best))
            best = c;
    return best;
}

/* exp(z - top) in double, the row's max subtracted so exp stays finite. */
static inline DP_HD double dp_xent_exp(float z, float top)
{
    return exp(dp_dsub((double)z, (double)top));
}

/* One row's loss: log(sum of exps) - (z_label - top). */
static inline DP_HD double dp_xent_loss(double exp_sum, float z_label, float top)
{
    return dp_dsub(log(exp_sum), dp_dsub((double)z_label, (double)top));
}

/* d loss / d z: softmax(z) - onehot(label). */
static inline DP_HD float dp_xent_grad(float z, float top, double exp_sum, int is_label)
{
    return dp_sub((float)dp_ddiv(dp_xent_exp(z, top), exp_sum), is_label ? 1.0f : 0.0f);
}

/* ---- sliding windows: convolution lowering and pooling (dp_window) ---- */

/* The window positions o in [*first, *last] that cover input coordinate at along one axis of
 * `size_out` positions (o stride - padding <= at <= o stride - padding + kernel - 1); empty
 * when *first > *last. */
static inline DP_HD void dp_window_cover(int at, int size_out, int kernel, int stride, int padding, int *first,
                                         int *last)
{
    int high = at + padding, low = high - kernel + 1;
    *first = low <= 0 ? 0 : (low + stride - 1) / stride;
    *last = high / stride < size_out - 1 ? high / stride : size_out - 1;
}

/* What im2col puts at window (oh, ow), tap (c, i, j) of one sample x: the pixel, or 0 in the padding. */
static inline DP_HD float dp_im2col_value(const float *x, const dp_window *w, int oh, int ow, int c, int i, int j)
{
    int h = oh * w->stride - w->padding + i, v = ow * w->stride - w->padding + j;
    int inside = h >= 0 && h < w->height && v >= 0 && v < w->width;
    return inside ? x[((size_t)c * w->height + h) * w->width + v] : 0.0f;
}

/* col2im at pixel (c, h, v) of one sample: its col entries summed in window order. col points at
 * the sample's first window in tap row 0; tap rows are ld floats apart. */
static inline DP_HD float dp_col2im_value(const float *col, size_t ld, const dp_window *w, int c, int h, int v)
{
    int oh0, oh1, ow0, ow1;
    dp_window_cover(h, w->out_h, w->kernel_h, w->stride, w->padding, &oh0, &oh1);
    dp_window_cover(v, w->out_w, w->kernel_w, w->stride, w->padding, &ow0, &ow1);
    float sum = 0.0f;
    for (int oh = oh0; oh <= oh1; oh++)
        for (int ow = ow0; ow <= ow1; ow++) {
            int i = h + w->padding - oh * w->stride, j = v + w->padding - ow * w->stride;
            size_t tap = ((size_t)c * w->kernel_h + i) * w->kernel_w + j;
            sum = dp_add(sum, col[tap * ld + (size_t)oh * w->out_w + ow]);
        }
    return sum;
}

/* The flat index in its plane of window (oh, ow)'s first maximum, over the pixels inside the
 * image (padding never wins: PyTorch pads max pooling with -inf; every window holds a pixel,
 * padding being at most half the window). */
static inline DP_HD int dp_window_argmax(const float *plane, const dp_window *w, int oh, int ow)
{
    int top = oh * w->stride - w->padding, left = ow * w->stride - w->padding, best = -1;
    for (int i = 0; i < w->kernel_h; i++)
        for (int j = 0; j < w->kernel_w; j++) {
            int h = top + i, v = left + j, at = h * w->width + v;
            if (h >= 0 && h < w->height && v >= 0 && v < w->width &&
                (best < 0 || dp_argmax_beats(plane[at], at, plane[best], best)))
                best = at;
        }
    return best;
}

/* One pooling output of a [height, width] plane: its window's first maximum or its mean, the
 * padding counted as zeros (count_include_pad). */
static inline DP_HD float dp_pool_value(const float *plane, const dp_window *w, int oh, int ow, dp_pool pool)
{
    if (pool == DP_POOL_MAX)
        return plane[dp_window_argmax(plane, w, oh, ow)];
    int top = oh * w->stride - w->padding, left = ow * w->stride - w->padding;
    float sum = 0.0f;
    for (int i = 0; i < w->kernel_h; i++)
        for (int j = 0; j < w->kernel_w; j++) {
            int h = top + i, v = left + j;
            if (h >= 0 && h < w->height && v >= 0 && v < w->width)
                sum = dp_add(sum, plane[h * w->width + v]);
        }
    return dp_div(sum, (float)(w->kernel_h * w->kernel_w));
}

/* A pooling's input gradient at pixel (h, v) of a plane: what each covering window passes it,
 * added in window order. */
static inline DP_HD float dp_pool_grad_value(const float *plane, const float *dy_plane, const dp_window *w, int h,
                                             int v, dp_pool pool)
{
    int oh0, oh1, ow0, ow1;
    dp_window_cover(h, w->out_h, w->kernel_h, w->stride, w->padding, &oh0, &oh1);
    dp_window_cover(v, w->out_w, w->kernel_w, w->stride, w->padding, &ow0, &ow1);
    float sum = 0.0f, area = (float)(w->kernel_h * w->kernel_w);
    for (int oh = oh0; oh <= oh1; oh++)
        for (int ow = ow0; ow <= ow1; ow++) {
            float g = dy_plane[oh * w->out_w + ow];
            if (pool == DP_POOL_AVG)
                sum = dp_add(sum, dp_div(g, area));
            else if (dp_window_argmax(plane, w, oh, ow) == h * w->width + v)
                sum = dp_add(sum, g);
        }
    return sum;
}

#endif
