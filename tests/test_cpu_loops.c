/* The CPU backend's vectorised loops (src/backend/cpu_loops.c) on every instruction set this
 * machine runs (generic, AVX2, AVX-512): each operation bit for bit (NaN payloads aside)
 * against the plain scalar loops the backend had before them, over kernel_math.h's bodies,
 * on values mixed with NaN, +-Inf, +-0 and subnormals, with lengths that leave vector tails,
 * the whole range at once and in uneven parts as threads take them; and the backend itself
 * with 2, 3 and 5 threads giving the bits of 1 thread. */
#include "dp/backend.h"
#include "dp/rng.h"
#include "src/backend/cpu_loops.h"
#include "src/backend/cpu_parallel.h"
#include "src/backend/kernel_math.h"
#include "tests/testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 67, COLS = 77, N = ROWS * COLS };

static const char *const isas[] = {"generic", "avx2", "avx512"};

/* Fails naming the first element whose bits differ (NaN equals NaN: payloads are no promise). */
static void check_bits(const char *what, const char *isa, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof *got) != 0 && !(isnan(got[i]) && isnan(want[i])))
            ck_abort_msg("%s (%s): element %zu is %a, the scalar loop gives %a", what, isa, i, got[i], want[i]);
}

static void check_doubles(const char *what, const char *isa, const double *got, const double *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof *got) != 0 && !(isnan(got[i]) && isnan(want[i])))
            ck_abort_msg("%s (%s): value %zu is %a, the scalar loop gives %a", what, isa, i, got[i], want[i]);
}

/* Uniform in [-scale, scale] with every fifth value NaN, an infinity, a signed zero or a subnormal. */
static float *hostile(size_t n, uint64_t seed, float scale)
{
    static const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -3e-39f, 1e-45f};
    dp_rng rng;
    dp_rng_seed(&rng, seed);
    float *x = malloc(n * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < n; i++)
        x[i] = (2.0f * dp_rng_uniform(&rng) - 1.0f) * scale;
    for (size_t i = seed % 5; i < n; i += 5)
        x[i] = specials[(i / 5 + seed) % (sizeof specials / sizeof *specials)];
    return x;
}

static float *copy_of(const float *x, size_t n)
{
    float *y = malloc(n * sizeof *y);
    ck_assert_ptr_nonnull(y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

/* fn over [0, n) in uneven parts, as threads take them: 1, 17, a third, the rest. */
static size_t in_parts(dp_loop_fn fn, const dp_loop_args *a, size_t n)
{
    size_t cuts[] = {0, 1, 18, 18 + n / 3, n}, count = 0;
    for (int i = 0; i + 1 < 5; i++) {
        size_t begin = cuts[i] < n ? cuts[i] : n, end = cuts[i + 1] < n ? cuts[i + 1] : n;
        count += fn(a, begin, end);
    }
    return count;
}

/* ---- the scalar loops of the backend before vectorisation: the reference ---- */

static void reference_bias_act(float *y, const float *bias, int rows, int cols, int relu)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            float *v = &y[(size_t)r * cols + c];
            *v = bias ? dp_bias_act(*v, bias[c], relu) : dp_act(*v, relu);
        }
}

static void reference_bias_grad(const float *dy, int rows, int cols, float *db, int accumulate)
{
    if (!accumulate)
        memset(db, 0, (size_t)cols * sizeof *db);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            db[c] = dp_add(db[c], dy[(size_t)r * cols + c]);
}

static void reference_column_sums(const float *a, const float *b, int rows, int cols, double *out)
{
    for (int c = 0; c < 2 * cols; c++)
        out[c] = 0.0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            size_t i = (size_t)r * cols + c;
            out[c] = dp_dadd(out[c], (double)a[i]);
            out[cols + c] = dp_dadd(out[cols + c], dp_dmul((double)a[i], (double)b[i]));
        }
}

/* ---- each operation, every instruction set, whole and in parts ---- */

START_TEST(elementwise_loops_equal_the_scalar_loops)
{
    float *x = hostile(N, 1, 3.0f), *other = hostile(N, 2, 1.0f), *bias = hostile(COLS, 3, 1.0f);
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        const dp_cpu_loops *loops = dp_cpu_loops_for(isas[k]);
        if (!loops)
            continue;
        for (int variant = 0; variant < 4; variant++) {
            const float *b = variant & 1 ? bias : NULL;
            int relu = variant >> 1;
            float *want = copy_of(x, N), *got = copy_of(x, N);
            reference_bias_act(want, b, ROWS, COLS, relu);
            in_parts(loops->bias_act_forward, &(dp_loop_args){.y = got, .bias = b, .cols = COLS, .relu = relu}, ROWS);
            check_bits("bias + activation", isas[k], got, want, N);
            free(want);
            free(got);
        }
        float *want = malloc(N * sizeof *want), *got = malloc(N * sizeof *got);
        for (size_t i = 0; i < N; i++)
            want[i] = dp_act(x[i], 1);
        in_parts(loops->relu_forward, &(dp_loop_args){.y = got, .x = x}, N);
        check_bits("ReLU forward", isas[k], got, want, N);
        for (size_t i = 0; i < N; i++)
            want[i] = dp_relu_grad(x[i], other[i]);
        memcpy(got, x, N * sizeof *got);
        in_parts(loops->relu_backward, &(dp_loop_args){.y = got, .other = other}, N);
        check_bits("ReLU backward", isas[k], got, want, N);
        for (size_t i = 0; i < N; i++)
            want[i] = dp_mul(x[i], other[i]);
        in_parts(loops->multiply, &(dp_loop_args){.y = got, .x = x, .other = other}, N);
        check_bits("multiply", isas[k], got, want, N);
        memcpy(got, x, N * sizeof *got);
        in_parts(loops->multiply, &(dp_loop_args){.y = got, .x = got, .other = other}, N);
        check_bits("multiply in place", isas[k], got, want, N);
        for (int add = 0; add <= 1; add++) {
            for (size_t i = 0; i < N; i++)
                want[i] = add ? dp_add(other[i], x[i]) : x[i];
            memcpy(got, other, N * sizeof *got);
            in_parts(loops->accumulate, &(dp_loop_args){.y = got, .x = x, .accumulate = add}, N);
            check_bits(add ? "accumulate (add)" : "accumulate (copy)", isas[k], got, want, N);
        }
        size_t bad = 0;
        for (size_t i = 0; i < N; i++)
            bad += (size_t)dp_is_nonfinite(x[i]);
        ck_assert_uint_eq(in_parts(loops->count_nonfinite, &(dp_loop_args){.x = x}, N), bad);
        ck_assert_uint_gt(bad, 0);
        free(want);
        free(got);
    }
    free(x);
    free(other);
    free(bias);
}
END_TEST

/* SGD without and with momentum and weight decay, a counting pass, and AdamW, three steps each. */
START_TEST(optimizer_passes_equal_the_scalar_loops)
{
    float *grad = hostile(N, 4, 1.0f);
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        const dp_cpu_loops *loops = dp_cpu_loops_for(isas[k]);
        if (!loops)
            continue;
        for (int kind = 0; kind < 5; kind++) { /* SGD, SGD + decay, momentum, counting only, AdamW */
            float *p = hostile(N, 5, 1.0f), *s1 = hostile(N, 6, 0.1f), *s2 = hostile(N, 7, 0.1f);
            for (size_t i = 0; i < N; i++)
                s2[i] = fabsf(s2[i]);
            float *gp = copy_of(p, N), *g1 = copy_of(s1, N), *g2 = copy_of(s2, N), *g = malloc(N * sizeof *g);
            float *want_g = malloc(N * sizeof *want_g);
            for (int step = 1; step <= 3; step++) {
                dp_sgd_coefs sgd = {.grad_scale = 1.0f / 3.0f, .lr = 0.05f, .momentum = kind == 2 ? 0.9f : 0.0f,
                                    .weight_decay = kind == 1 || kind == 2 ? 1e-3f : 0.0f, .apply = kind != 3};
                dp_adamw_coefs adamw = {.grad_scale = 1.0f / 3.0f, .decay_factor = 0.999f, .beta1 = 0.9f,
                                        .one_minus_beta1 = 0.1f, .beta2 = 0.999f, .one_minus_beta2 = 1e-3f,
                                        .bias_correction2_sqrt = sqrtf(1.0f - powf(0.999f, (float)step)),
                                        .eps = 1e-8f, .neg_step_size = -1e-3f / (1.0f - powf(0.9f, (float)step)),
                                        .apply = 1};
                size_t want_bad = 0, got_bad;
                memcpy(want_g, grad, N * sizeof *g);
                memcpy(g, grad, N * sizeof *g);
                for (size_t i = 0; i < N; i++) {
                    if (kind == 4)
                        dp_adamw_element(&p[i], &want_g[i], &s1[i], &s2[i], &adamw);
                    else
                        dp_sgd_element(&p[i], &want_g[i], kind == 2 ? &s1[i] : NULL, &sgd);
                    want_bad += (size_t)dp_update_is_bad(want_g[i], p[i], kind == 4 ? adamw.apply : sgd.apply);
                }
                dp_loop_args a = {.params = gp, .grads = g, .state1 = kind == 2 || kind == 4 ? g1 : NULL,
                                  .state2 = g2, .sgd = &sgd, .adamw = &adamw};
                got_bad = in_parts(kind == 4 ? loops->adamw_step : loops->sgd_step, &a, N);
                ck_assert_msg(got_bad == want_bad, "%s: %zu non-finite gradients or results counted, %zu expected", isas[k],
                              got_bad, want_bad);
                check_bits("optimizer's scaled gradient", isas[k], g, want_g, N);
                check_bits("optimizer parameters", isas[k], gp, p, N);
                check_bits("optimizer state", isas[k], g1, s1, N);
                check_bits("AdamW's second moment", isas[k], g2, s2, N);
            }
            free(p);
            free(s1);
            free(s2);
            free(gp);
            free(g1);
            free(g2);
            free(g);
            free(want_g);
        }
    }
    free(grad);
}
END_TEST

/* Column sums keep each column's row order, so they equal the scalar sums exactly. */
START_TEST(column_sums_keep_their_order)
{
    float *x = hostile(N, 8, 2.0f), *other = hostile(N, 9, 1.0f), *db0 = hostile(COLS, 10, 1.0f);
    float *want = malloc(COLS * sizeof *want), *got = malloc(COLS * sizeof *got);
    double want_sums[2 * COLS], got_sums[2 * COLS];
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        const dp_cpu_loops *loops = dp_cpu_loops_for(isas[k]);
        if (!loops)
            continue;
        for (int accumulate = 0; accumulate < 2; accumulate++) {
            memcpy(want, db0, COLS * sizeof *want);
            memcpy(got, db0, COLS * sizeof *got);
            reference_bias_grad(x, ROWS, COLS, want, accumulate);
            dp_loop_args a = {.x = x, .rows = ROWS, .cols = COLS, .y = got, .accumulate = accumulate};
            in_parts(loops->bias_grad, &a, COLS);
            check_bits("bias gradient", isas[k], got, want, COLS);
        }
        reference_column_sums(x, other, ROWS, COLS, want_sums);
        dp_loop_args a = {.x = x, .other = other, .rows = ROWS, .cols = COLS, .sums = got_sums};
        in_parts(loops->column_sums, &a, COLS);
        check_doubles("column sums", isas[k], got_sums, want_sums, 2 * COLS);
    }
    free(x);
    free(other);
    free(db0);
    free(want);
    free(got);
}
END_TEST

START_TEST(batchnorm_and_dropout_loops_equal_the_scalar_loops)
{
    float *x = hostile(N, 11, 2.0f), *dy = hostile(N, 12, 1.0f), *c[6];
    for (int i = 0; i < 6; i++)
        c[i] = hostile(COLS, 13 + (uint64_t)i, 1.0f);
    for (int j = 0; j < COLS; j++)
        c[5][j] = fabsf(c[5][j]); /* a variance */
    double sums[2 * COLS];
    for (int j = 0; j < 2 * COLS; j++)
        sums[j] = (double)x[j] * 1e3;
    float *want_xhat = malloc(N * sizeof(float)), *want_y = malloc(N * sizeof(float));
    float *xhat = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float)), *mask = malloc(N * sizeof(float));
    float *want_mask = malloc(N * sizeof(float));
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        const dp_cpu_loops *loops = dp_cpu_loops_for(isas[k]);
        if (!loops)
            continue;
        for (size_t i = 0; i < N; i++) {
            int j = (int)(i % COLS);
            want_xhat[i] = dp_bn_normalized(x[i], c[0][j], c[1][j]);
            want_y[i] = dp_bn_affine(want_xhat[i], c[2][j], c[3][j]);
        }
        dp_loop_args a = {.x = x, .xhat = xhat, .y = y, .cols = COLS, .mean = c[0], .invstd = c[1], .gamma = c[2],
                          .beta = c[3]};
        in_parts(loops->bn_normalize, &a, ROWS);
        check_bits("BatchNorm x-hat", isas[k], xhat, want_xhat, N);
        check_bits("BatchNorm output", isas[k], y, want_y, N);
        a.xhat = NULL;
        memset(y, 0, N * sizeof *y);
        in_parts(loops->bn_normalize, &a, ROWS);
        check_bits("BatchNorm output in eval mode", isas[k], y, want_y, N);
        for (size_t i = 0; i < N; i++) {
            int j = (int)(i % COLS);
            want_y[i] = dp_bn_input_grad(dy[i], want_xhat[i], c[2][j], c[1][j], c[4][j], c[0][j]);
        }
        a = (dp_loop_args){.x = dy, .other = want_xhat, .y = y, .cols = COLS, .gamma = c[2], .invstd = c[1],
                           .mean_dy = c[4], .mean_dy_xhat = c[0]};
        in_parts(loops->bn_backward_input, &a, ROWS);
        check_bits("BatchNorm input gradient", isas[k], y, want_y, N);
        /* The per-feature passes: two rows of COLS values each. */
        float want_f[4][COLS], got_f[4][COLS];
        for (int accumulate = 0; accumulate < 2; accumulate++) {
            for (int j = 0; j < COLS; j++) {
                want_f[0][j] = dp_accumulate_sum(c[2][j], sums[COLS + j], accumulate);
                want_f[1][j] = dp_accumulate_sum(c[3][j], sums[j], accumulate);
            }
            memcpy(got_f[0], c[2], sizeof got_f[0]);
            memcpy(got_f[1], c[3], sizeof got_f[1]);
            a = (dp_loop_args){.sums = sums, .cols = COLS, .dgamma = got_f[0], .dbeta = got_f[1],
                               .accumulate = accumulate};
            in_parts(loops->bn_param_grads, &a, COLS);
            check_bits("BatchNorm parameter gradients", isas[k], got_f[0], want_f[0], 2 * COLS);
        }
        for (int j = 0; j < COLS; j++) {
            want_f[2][j] = dp_running_update(c[0][j], c[1][j], 0.1f);
            want_f[3][j] = dp_running_update(c[4][j], c[5][j], 0.1f);
            want_f[0][j] = dp_inverse_std(c[5][j] - 0.5f, 1e-5f); /* some negative: NaN */
            got_f[1][j] = c[5][j] - 0.5f;
        }
        memcpy(got_f[2], c[0], sizeof got_f[2]);
        memcpy(got_f[3], c[4], sizeof got_f[3]);
        a = (dp_loop_args){.running_mean = got_f[2], .running_var = got_f[3], .mean = c[1], .var = c[5],
                           .momentum = 0.1f};
        in_parts(loops->bn_update_running, &a, COLS);
        check_bits("running statistics", isas[k], got_f[2], want_f[2], 2 * COLS);
        in_parts(loops->inverse_std, &(dp_loop_args){.var = got_f[1], .y = got_f[0], .eps = 1e-5f}, COLS);
        check_bits("inverse standard deviation", isas[k], got_f[0], want_f[0], COLS);
        dp_dropout_key key = {.seed = 9, .step = 4, .first_sample = 123, .p = 0.3f, .scale = 1.0f / 0.7f};
        for (size_t i = 0; i < N; i++) {
            want_mask[i] = dp_dropout_mask(&key, i / COLS, i % COLS);
            want_y[i] = dp_mul(x[i], want_mask[i]);
        }
        a = (dp_loop_args){.y = y, .x = x, .mask = mask, .cols = COLS, .dropout = &key};
        in_parts(loops->dropout_forward, &a, ROWS);
        check_bits("dropout mask", isas[k], mask, want_mask, N);
        check_bits("dropout output", isas[k], y, want_y, N);
    }
    for (int i = 0; i < 6; i++)
        free(c[i]);
    free(x);
    free(dy);
    free(want_xhat);
    free(want_y);
    free(xhat);
    free(y);
    free(mask);
    free(want_mask);
}
END_TEST

/* The losses, their gradients and totals, and the row gather, on every instruction set. */
START_TEST(losses_and_gather_equal_the_scalar_loops)
{
    enum { CLASSES = 10, SAMPLES = 301 };
    float *logits = hostile(ROWS * CLASSES, 20, 8.0f), *targets = hostile(ROWS * CLASSES, 21, 2.0f);
    int32_t labels[ROWS];
    for (int r = 0; r < ROWS; r++)
        labels[r] = (r * 7) % CLASSES;
    float want[ROWS * CLASSES], got[ROWS * CLASSES];
    float *features = hostile((size_t)SAMPLES * COLS, 22, 1.0f), *rows = malloc(N * sizeof(float));
    size_t index[ROWS];
    for (int r = 0; r < ROWS; r++)
        index[r] = (size_t)(r * 7919) % SAMPLES;
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        const dp_cpu_loops *loops = dp_cpu_loops_for(isas[k]);
        if (!loops)
            continue;
        double want_totals[2] = {0.5, 1.0}, got_totals[2] = {0.5, 1.0};
        for (int r = 0; r < ROWS; r++) {
            const float *z = logits + r * CLASSES;
            int best = dp_row_argmax(z, CLASSES);
            double sum = 0.0;
            for (int c = 0; c < CLASSES; c++)
                sum = dp_dadd(sum, dp_xent_exp(z[c], z[best]));
            want_totals[0] += dp_xent_loss(sum, z[labels[r]], z[best]);
            want_totals[1] += best == labels[r];
            for (int c = 0; c < CLASSES; c++)
                want[r * CLASSES + c] = dp_xent_grad(z[c], z[best], sum, c == labels[r]);
        }
        dp_loop_args a = {.x = logits, .labels = labels, .cols = CLASSES, .y = got, .sums = got_totals};
        loops->softmax_xent(&a, 0, ROWS);
        check_bits("softmax cross-entropy gradient", isas[k], got, want, ROWS * CLASSES);
        check_doubles("softmax cross-entropy totals", isas[k], got_totals, want_totals, 2);
        double squares = 0.0;
        for (int i = 0; i < ROWS * CLASSES; i++) {
            float diff = dp_mse_diff(logits[i], targets[i]);
            squares = dp_dadd(squares, dp_mse_square(diff));
            want[i] = dp_mse_grad(diff, CLASSES);
        }
        want_totals[0] = 0.5 + squares / CLASSES;
        got_totals[0] = 0.5;
        a = (dp_loop_args){.x = logits, .other = targets, .cols = CLASSES, .y = got, .sums = got_totals};
        loops->mse(&a, 0, ROWS);
        check_bits("MSE gradient", isas[k], got, want, ROWS * CLASSES);
        check_doubles("MSE total", isas[k], got_totals, want_totals, 1);
        a = (dp_loop_args){.dst = rows, .src = features, .index = index, .cols = COLS};
        in_parts(loops->gather_rows, &a, ROWS);
        for (int r = 0; r < ROWS; r++)
            ck_assert_mem_eq(rows + (size_t)r * COLS, features + index[r] * COLS, COLS * sizeof(float));
    }
    free(logits);
    free(targets);
    free(features);
    free(rows);
}
END_TEST

/* The backend's operations on a problem large enough to split, with 2, 3 and 5 threads,
 * against 1 thread: the same bits, the same counts. */
START_TEST(threads_never_change_a_bit)
{
    enum { BIG_ROWS = 4099, BIG_COLS = 301, RESULTS = 11 }; /* 4 grains each way */
    size_t n = (size_t)BIG_ROWS * BIG_COLS;
    const dp_backend *cpu = dp_backend_cpu();
    float *x = hostile(n, 30, 2.0f), *other = hostile(n, 31, 1.0f), *bias = hostile(BIG_COLS, 32, 1.0f);
    float *results[2];
    double *sums[2], nonfinite[2];
    static const int thread_counts[] = {1, 2, 3, 5};
    for (size_t t = 0; t < sizeof thread_counts / sizeof *thread_counts; t++) {
        int slot = t > 0;
        dp_backend_cpu_set_threads(thread_counts[t], "the test");
        float *y = copy_of(x, n), *dy = copy_of(other, n), *p = copy_of(x, n), *v = copy_of(other, n);
        float *out = calloc(RESULTS * n, sizeof *out); /* 7 results, then y, dy, p and v */
        sums[slot] = malloc(2 * BIG_COLS * sizeof(double));
        cpu->bias_act_forward(y, bias, BIG_ROWS, BIG_COLS, 1);
        cpu->relu_backward(dy, y, n);
        cpu->bias_grad(dy, BIG_ROWS, BIG_COLS, out, 0);
        cpu->column_sums(x, dy, BIG_ROWS, BIG_COLS, sums[slot]);
        cpu->multiply(out + n, x, other, n);
        cpu->bn_normalize(x, out + 2 * n, out + 3 * n, BIG_ROWS, BIG_COLS, bias, bias, bias, bias);
        cpu->bn_backward_input(dy, x, out + 4 * n, BIG_ROWS, BIG_COLS, bias, bias, bias, bias);
        cpu->dropout_forward(out + 5 * n, x, out + 6 * n, BIG_ROWS, BIG_COLS,
                             &(dp_dropout_key){.seed = 1, .step = 2, .p = 0.4f, .scale = 1.0f / 0.6f});
        nonfinite[slot] = (double)cpu->count_nonfinite(x, n);
        dp_sgd_coefs k = {.grad_scale = 0.25f, .lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-2f, .apply = 1};
        cpu->sgd_step(p, dy, v, n, &k, &nonfinite[slot]);
        float *in_place[] = {y, dy, p, v};
        for (int i = 0; i < 4; i++)
            memcpy(out + (7 + (size_t)i) * n, in_place[i], n * sizeof *out);
        results[slot] = out;
        if (slot) {
            check_bits("the operations' results", "threads", out, results[0], RESULTS * n);
            check_doubles("column sums", "threads", sums[1], sums[0], 2 * BIG_COLS);
            ck_assert_msg(nonfinite[1] == nonfinite[0], "%d threads counted %g non-finite values, 1 thread %g",
                          thread_counts[t], nonfinite[1], nonfinite[0]);
            free(out);
            free(sums[1]);
        }
        ck_assert_msg(memcmp(p, x, n * sizeof *p) != 0, "the SGD pass changed nothing");
        free(y);
        free(dy);
        free(p);
        free(v);
    }
    dp_backend_cpu_set_threads(1, NULL);
    free(results[0]);
    free(sums[0]);
    free(x);
    free(other);
    free(bias);
}
END_TEST

/* What the parts of one operation were: their ranges, the threads that ran them. */
static struct {
    pthread_mutex_t lock;
    int count;
    size_t begin[64], end[64];
    pthread_t thread[64];
} seen = {PTHREAD_MUTEX_INITIALIZER, 0, {0}, {0}, {0}};

static size_t record_part(const dp_loop_args *a, size_t begin, size_t end)
{
    (void)a;
    pthread_mutex_lock(&seen.lock);
    ck_assert_int_lt(seen.count, 64);
    seen.begin[seen.count] = begin;
    seen.end[seen.count] = end;
    seen.thread[seen.count++] = pthread_self();
    pthread_mutex_unlock(&seen.lock);
    return end - begin;
}

/* The parts tile [0, n) on 64-byte boundaries, one per thread at most, none below the grain,
 * each run once, by distinct threads, the caller among them; their counts add up. */
START_TEST(parts_tile_the_range_on_distinct_threads)
{
    static const struct { int threads; size_t n, grain; int parts; } cases[] = {
        {1, 1000000, 1000, 1}, {4, 1000000, 1000, 4}, {4, 2500, 1000, 2}, {4, 999, 1000, 1},
        {3, 100003, 1, 3}, {5, 4099, 870, 4},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        dp_cpu_parallel_set_threads(cases[c].threads);
        seen.count = 0;
        size_t total = dp_cpu_parallel(record_part, &(dp_loop_args){0}, cases[c].n, cases[c].grain);
        ck_assert_uint_eq(total, cases[c].n);
        ck_assert_int_eq(seen.count, cases[c].parts);
        size_t covered = 0;
        int caller_ran = 0;
        for (int p = 0; p < seen.count; p++) {
            /* parts may run in any order: find the one starting where coverage stands */
            int at = -1;
            for (int q = 0; q < seen.count; q++)
                if (seen.begin[q] == covered && seen.end[q] > covered)
                    at = q;
            ck_assert_msg(at >= 0, "case %zu: no part begins at %zu", c, covered);
            ck_assert_uint_eq(seen.begin[at] % 16, 0);
            covered = seen.end[at];
            caller_ran |= pthread_equal(seen.thread[at], pthread_self());
            for (int q = 0; q < at; q++)
                ck_assert_msg(!pthread_equal(seen.thread[q], seen.thread[at]), "case %zu: a thread ran two parts", c);
        }
        ck_assert_uint_eq(covered, cases[c].n);
        ck_assert(caller_ran);
    }
    dp_cpu_parallel_set_threads(1);
}
END_TEST

/* The best instruction set is one this CPU runs, and the generic build exists everywhere. */
START_TEST(the_best_loops_are_ones_this_cpu_runs)
{
    const dp_cpu_loops *best = dp_cpu_loops_best();
    ck_assert_ptr_nonnull(dp_cpu_loops_for("generic"));
    ck_assert_ptr_eq(dp_cpu_loops_for(best->isa), best);
    ck_assert_ptr_null(dp_cpu_loops_for("sse9"));
    ck_assert_ptr_nonnull(strstr(dp_backend_cpu()->describe(), best->isa));
    printf("CPU loops: %s (of", best->isa);
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++)
        printf(" %s%s", isas[k], dp_cpu_loops_for(isas[k]) ? "" : " (not run here)");
    printf(")\n");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cpu-loops");
    TCase *tc = tcase_create("loops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, elementwise_loops_equal_the_scalar_loops);
    tcase_add_test(tc, optimizer_passes_equal_the_scalar_loops);
    tcase_add_test(tc, column_sums_keep_their_order);
    tcase_add_test(tc, batchnorm_and_dropout_loops_equal_the_scalar_loops);
    tcase_add_test(tc, losses_and_gather_equal_the_scalar_loops);
    tcase_add_test(tc, parts_tile_the_range_on_distinct_threads);
    tcase_add_test(tc, threads_never_change_a_bit);
    tcase_add_test(tc, the_best_loops_are_ones_this_cpu_runs);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
