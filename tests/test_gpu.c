/* The CUDA backend on a GPU; exits 77 (skipped) where none is visible or CUDA was not built.
 * Every operation against the CPU backend on random inputs mixed with NaN, +-Inf, +-0 and
 * subnormals (elementwise ones bit for bit, NaN payloads aside; the rest within 1e-5
 * relative), rows holding NaN in the softmax (one argmax rule on both backends), a failing
 * cuBLAS call reported with call, file and rank, and 50 training steps on the GPU against
 * the CPU from the same --init file and data (within 1e-4 relative; on as many ranks as it
 * is started with). Run by tests/gpu.sh on a GPU, and linked with the fake CUDA runtime by
 * tests/fakecuda.sh on any machine. */
#include "dp/backend.h"
#include "dp/comm.h"
#include "dp/data.h"
#include "dp/error.h"
#include "dp/nn.h"
#include "dp/options.h"
#include "dp/rng.h"
#include "dp/safetensors.h"
#include "dp/train.h"
#include "tests/testutil.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EXIT_SKIP = 77 };

static const dp_backend *cpu, *gpu;

static void open_gpu(int tf32)
{
    dp_backend_request request = {.device = DP_DEVICE_CUDA, .share_gpu = 1, .tf32 = tf32, .local_size = 1};
    ck_assert_msg(dp_backend_open(&request, &gpu) == 0, "%s", dp_last_error());
}

static void setup(void)
{
    cpu = dp_backend_cpu();
    open_gpu(0);
}

static void teardown(void)
{
    dp_backend_close(gpu);
}

/* Uniform in [-scale, scale], differing by seed and index. */
static float *random_floats(size_t n, uint64_t seed, float scale)
{
    dp_rng rng;
    dp_rng_seed(&rng, seed);
    float *x = malloc((n ? n : 1) * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < n; i++)
        x[i] = (2.0f * dp_rng_uniform(&rng) - 1.0f) * scale;
    return x;
}

static void *to_gpu(const void *host, size_t bytes)
{
    void *dev = gpu->alloc(bytes, DP_MEM_OTHER, "a test input");
    ck_assert_msg(dev != NULL, "%s", dp_last_error());
    gpu->upload(dev, host, bytes);
    return dev;
}

static void *from_gpu(const void *dev, size_t bytes)
{
    void *host = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(host);
    gpu->download(host, dev, bytes);
    return host;
}

/* C = alpha op(A) op(B) + beta C on both backends, op(A) [m, k], op(B) [k, n]. */
static double gemm_error(int trans_a, int trans_b, int m, int n, int k, float beta, uint64_t seed)
{
    int lda = trans_a ? m : k, ldb = trans_b ? k : n;
    float *a = random_floats((size_t)m * k, seed, 1.0f), *b = random_floats((size_t)k * n, seed + 1, 1.0f);
    float *c = random_floats((size_t)m * n, seed + 2, 1.0f);
    size_t c_bytes = (size_t)m * n * sizeof(float);
    float *da = to_gpu(a, (size_t)m * k * sizeof(float)), *db = to_gpu(b, (size_t)k * n * sizeof(float));
    float *dc = to_gpu(c, c_bytes);
    cpu->gemm(trans_a, trans_b, m, n, k, 0.75f, a, lda, b, ldb, beta, c, n);
    gpu->gemm(trans_a, trans_b, m, n, k, 0.75f, da, lda, db, ldb, beta, dc, n);
    float *from_device = from_gpu(dc, c_bytes);
    double error = dp_test_relative_error(from_device, c, (size_t)m * n);
    gpu->free(da);
    gpu->free(db);
    gpu->free(dc);
    free(a);
    free(b);
    free(c);
    free(from_device);
    return error;
}

START_TEST(gemm_matches_cpu_for_every_transpose_and_beta)
{
    for (int trans_a = 0; trans_a < 2; trans_a++)
        for (int trans_b = 0; trans_b < 2; trans_b++)
            for (int with_beta = 0; with_beta < 2; with_beta++) {
                double error = gemm_error(trans_a, trans_b, 37, 53, 29, with_beta ? 0.5f : 0.0f,
                                          (uint64_t)(4 * trans_a + 2 * trans_b + with_beta));
                ck_assert_msg(error < 1e-5, "gemm(%d, %d, beta %d): relative error %g", trans_a,
                              trans_b, with_beta, error);
            }
    double deep = gemm_error(0, 1, 64, 96, 2048, 1.0f, 99);
    ck_assert_msg(deep < 1e-5, "gemm with k = 2048: relative error %g", deep);
}
END_TEST

START_TEST(tf32_gemm_stays_close_to_fp32)
{
    dp_backend_close(gpu);
    open_gpu(1);
    ck_assert_ptr_nonnull(strstr(gpu->describe(), "TF32"));
    double error = gemm_error(0, 1, 128, 128, 512, 0.0f, 7);
    /* TF32 keeps 10 mantissa bits: errors near 2^-11 per product, averaged down by the sum. */
    ck_assert_msg(error < 1e-2, "TF32 gemm: relative error %g", error);
}
END_TEST

/* Fails naming the first element where the GPU's result differs from the CPU's in any bit;
 * NaN equals NaN (x86 keeps an operand's NaN payload, NVIDIA GPUs return the canonical NaN). */
static void check_bitwise(const char *what, const float *cpu_result, const float *gpu_result, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&cpu_result[i], &gpu_result[i], sizeof(float)) != 0 && !(isnan(cpu_result[i]) && isnan(gpu_result[i])))
            ck_abort_msg("%s: element %zu is %a on the GPU, %a on the CPU", what, i, gpu_result[i], cpu_result[i]);
}

/* Random values with every fifth one NaN, an infinity, a signed zero or a subnormal. */
static float *hostile_floats(size_t n, uint64_t seed, float scale)
{
    static const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -3e-39f, 1e-45f};
    float *x = random_floats(n, seed, scale);
    for (size_t i = seed % 5; i < n; i += 5)
        x[i] = specials[(i / 5 + seed) % (sizeof specials / sizeof *specials)];
    return x;
}

/* The fused optimizer passes: gradient scaling, the update and the non-finite count, as the CPU. */
static void check_optimizer_passes(const float *grad, size_t n)
{
    size_t bytes = n * sizeof(float);
    double *dcount = gpu->alloc(sizeof(double), DP_MEM_OTHER, "a count");
    for (int kind = 0; kind < 3; kind++) { /* SGD, SGD with momentum, AdamW */
        float *params = hostile_floats(n, 16, 1.0f), *g = malloc(bytes), *s1 = hostile_floats(n, 17, 0.1f);
        float *s2 = random_floats(n, 18, 0.1f);
        for (size_t i = 0; i < n; i++)
            s2[i] = fabsf(s2[i]);
        float *dparams = to_gpu(params, bytes), *dg = gpu->alloc(bytes, DP_MEM_OTHER, "gradients");
        float *ds1 = to_gpu(s1, bytes), *ds2 = to_gpu(s2, bytes);
        double count = 0.0, zero = 0.0, got_count;
        gpu->upload(dcount, &zero, sizeof zero);
        for (int step = 1; step <= 3; step++) {
            memcpy(g, grad, bytes);
            gpu->upload(dg, grad, bytes);
            if (kind < 2) {
                dp_sgd_coefs k = {.grad_scale = 1.0f / 3.0f, .lr = 0.05f, .momentum = kind ? 0.9f : 0.0f,
                                  .weight_decay = 1e-3f, .apply = 1};
                cpu->sgd_step(params, g, kind ? s1 : NULL, n, &k, &count);
                gpu->sgd_step(dparams, dg, kind ? ds1 : NULL, n, &k, dcount);
            } else {
                dp_adamw_coefs k = {.grad_scale = 1.0f / 3.0f, .decay_factor = 0.999f, .beta1 = 0.9f,
                                    .one_minus_beta1 = 0.1f, .beta2 = 0.999f, .one_minus_beta2 = 1e-3f,
                                    .bias_correction2_sqrt = sqrtf(1.0f - powf(0.999f, (float)step)),
                                    .eps = 1e-8f, .neg_step_size = -1e-3f / (1.0f - powf(0.9f, (float)step)),
                                    .apply = 1};
                cpu->adamw_step(params, g, s1, s2, n, &k, &count);
                gpu->adamw_step(dparams, dg, ds1, ds2, n, &k, dcount);
            }
        }
        float *got_params = from_gpu(dparams, bytes), *got_g = from_gpu(dg, bytes);
        float *got_s1 = from_gpu(ds1, bytes), *got_s2 = from_gpu(ds2, bytes);
        gpu->download(&got_count, dcount, sizeof got_count);
        check_bitwise("optimizer parameters", params, got_params, n);
        check_bitwise("optimizer's scaled gradient", g, got_g, n);
        if (kind)
            check_bitwise("optimizer state", s1, got_s1, n);
        if (kind == 2)
            check_bitwise("AdamW's second moment", s2, got_s2, n);
        ck_assert_msg(got_count == count, "non-finite count %g on the GPU, %g on the CPU", got_count, count);
        /* A pass that only counts (--on-nan skip): NaN and infinities found alike. */
        g[7] = NAN;
        g[n - 1] = -INFINITY;
        gpu->upload(dg, g, bytes);
        dp_sgd_coefs count_only = {.grad_scale = 0.5f};
        cpu->sgd_step(params, g, NULL, n, &count_only, &count);
        gpu->sgd_step(dparams, dg, NULL, n, &count_only, dcount);
        gpu->download(&got_count, dcount, sizeof got_count);
        ck_assert_msg(got_count == count && count >= 2.0, "non-finite count %g on the GPU, %g on the CPU", got_count,
                      count);
        gpu->free(dparams);
        gpu->free(dg);
        gpu->free(ds1);
        gpu->free(ds2);
        free(params);
        free(g);
        free(s1);
        free(s2);
        free(got_params);
        free(got_g);
        free(got_s1);
        free(got_s2);
    }
    gpu->free(dcount);
}

START_TEST(elementwise_operations_match_cpu_bit_for_bit)
{
    enum { ROWS = 301, COLS = 77 };
    size_t n = (size_t)ROWS * COLS, bytes = n * sizeof(float);
    float *bias = hostile_floats(COLS, 11, 1.0f), *dbias = to_gpu(bias, COLS * sizeof(float));
    for (int relu = 0; relu < 2; relu++) {
        float *y = hostile_floats(n, 12 + relu, 2.0f), *dy = to_gpu(y, bytes);
        cpu->bias_act_forward(y, bias, ROWS, COLS, relu);
        gpu->bias_act_forward(dy, dbias, ROWS, COLS, relu);
        float *got = from_gpu(dy, bytes);
        check_bitwise(relu ? "bias + ReLU" : "bias", y, got, n);
        gpu->free(dy);
        free(got);
        free(y);
    }
    float *grad = hostile_floats(n, 14, 1.0f), *act = hostile_floats(n, 15, 1.0f);
    float *dgrad = to_gpu(grad, bytes), *dact = to_gpu(act, bytes);
    cpu->relu_backward(grad, act, n);
    gpu->relu_backward(dgrad, dact, n);
    float *got = from_gpu(dgrad, bytes);
    check_bitwise("ReLU backward", grad, got, n);
    free(got);
    float *relu = malloc(bytes), *drelu = gpu->alloc(bytes, DP_MEM_OTHER, "relu output");
    cpu->relu_forward(relu, act, n);
    gpu->relu_forward(drelu, dact, n);
    got = from_gpu(drelu, bytes);
    check_bitwise("ReLU forward", relu, got, n);
    cpu->multiply(relu, relu, grad, n);
    gpu->multiply(drelu, drelu, dgrad, n);
    free(got);
    got = from_gpu(drelu, bytes);
    check_bitwise("multiply", relu, got, n);
    free(got);
    for (int add = 0; add <= 1; add++) { /* a copy, then a sum onto it */
        cpu->accumulate(relu, grad, n, add);
        gpu->accumulate(drelu, dgrad, n, add);
        got = from_gpu(drelu, bytes);
        check_bitwise(add ? "accumulate (add)" : "accumulate (copy)", relu, got, n);
        free(got);
    }
    gpu->free(drelu);
    free(relu);
    check_optimizer_passes(grad, n);
    gpu->free(dbias);
    gpu->free(dgrad);
    gpu->free(dact);
    free(bias);
    free(grad);
    free(act);
}
END_TEST

START_TEST(gather_zero_and_copies_move_exact_bytes)
{
    enum { SAMPLES = 1000, WIDTH = 333, ROWS = 257 };
    float *features = random_floats((size_t)SAMPLES * WIDTH, 21, 1.0f);
    size_t index[ROWS];
    for (int r = 0; r < ROWS; r++)
        index[r] = (size_t)(r * 7919) % SAMPLES;
    float *dfeatures = to_gpu(features, sizeof(float) * SAMPLES * WIDTH);
    size_t *dindex = to_gpu(index, sizeof index);
    float *expected = malloc(sizeof(float) * ROWS * WIDTH), *drows = gpu->alloc(sizeof(float) * ROWS * WIDTH, DP_MEM_OTHER, "rows");
    ck_assert_ptr_nonnull(drows);
    cpu->gather_rows(expected, features, index, ROWS, WIDTH);
    gpu->gather_rows(drows, dfeatures, dindex, ROWS, WIDTH);
    float *got = from_gpu(drows, sizeof(float) * ROWS * WIDTH);
    ck_assert_mem_eq(got, expected, sizeof(float) * ROWS * WIDTH);
    gpu->zero(drows, (size_t)ROWS * WIDTH);
    gpu->synchronize();
    float *zeros = from_gpu(drows, sizeof(float) * ROWS * WIDTH);
    for (size_t i = 0; i < (size_t)ROWS * WIDTH; i++)
        if (zeros[i] != 0.0f)
            ck_abort_msg("zero: element %zu is %g", i, zeros[i]);
    float *pinned = gpu->alloc_host(sizeof(float) * WIDTH, "a page-locked buffer");
    ck_assert_ptr_nonnull(pinned);
    gpu->download(pinned, dfeatures, sizeof(float) * WIDTH);
    ck_assert_mem_eq(pinned, features, sizeof(float) * WIDTH);
    gpu->free_host(pinned);
    gpu->free(dfeatures);
    gpu->free(dindex);
    gpu->free(drows);
    free(features);
    free(expected);
    free(got);
    free(zeros);
}
END_TEST

START_TEST(bias_grad_and_nonfinite_count_match_cpu)
{
    enum { ROWS = 1029, COLS = 70 };
    size_t n = (size_t)ROWS * COLS;
    float *dy = random_floats(n, 31, 1.0f), *db = random_floats(COLS, 32, 1.0f);
    float *ddy = to_gpu(dy, n * sizeof(float)), *ddb = to_gpu(db, COLS * sizeof(float));
    cpu->bias_grad(dy, ROWS, COLS, db, 1);
    gpu->bias_grad(ddy, ROWS, COLS, ddb, 1);
    float *got = from_gpu(ddb, COLS * sizeof(float));
    double error = dp_test_relative_error(got, db, COLS);
    ck_assert_msg(error < 1e-5, "bias gradient: relative error %g", error);
    size_t big = 1000003;
    float *x = random_floats(big, 33, 1e30f);
    x[5] = NAN;
    x[big / 2] = INFINITY;
    x[big - 1] = -INFINITY;
    float *dx = to_gpu(x, big * sizeof(float));
    ck_assert_uint_eq(cpu->count_nonfinite(x, big), 3);
    ck_assert_uint_eq(gpu->count_nonfinite(dx, big), 3);
    ck_assert_uint_eq(gpu->count_nonfinite(dx + 6, 10), 0);
    gpu->free(ddy);
    gpu->free(ddb);
    gpu->free(dx);
    free(dy);
    free(db);
    free(got);
    free(x);
}
END_TEST

/* BatchNorm's and dropout's operations: elementwise ones bit for bit, column sums in double to 1e-12. */
START_TEST(batchnorm_and_dropout_operations_match_cpu)
{
    enum { ROWS = 301, COLS = 77 };
    size_t n = (size_t)ROWS * COLS, bytes = n * sizeof(float), cbytes = COLS * sizeof(float);
    float *x = random_floats(n, 71, 2.0f), *dy = random_floats(n, 72, 1.0f);
    float *coefs[6];
    float *dcoefs[6];
    for (int i = 0; i < 6; i++) {
        coefs[i] = random_floats(COLS, 73 + (uint64_t)i, 1.0f);
        for (int c = 0; c < COLS; c++)
            coefs[i][c] = i == 1 || i == 5 ? 0.5f + fabsf(coefs[i][c]) : coefs[i][c]; /* invstd, var > 0 */
        dcoefs[i] = to_gpu(coefs[i], cbytes);
    }
    float *dx = to_gpu(x, bytes), *ddy = to_gpu(dy, bytes);
    float *xhat = malloc(bytes), *y = malloc(bytes), *dxhat = gpu->alloc(bytes, DP_MEM_OTHER, "xhat"), *dyout = gpu->alloc(bytes, DP_MEM_OTHER, "y");
    cpu->bn_normalize(x, xhat, y, ROWS, COLS, coefs[0], coefs[1], coefs[2], coefs[3]);
    gpu->bn_normalize(dx, dxhat, dyout, ROWS, COLS, dcoefs[0], dcoefs[1], dcoefs[2], dcoefs[3]);
    float *got = from_gpu(dxhat, bytes);
    check_bitwise("BatchNorm x-hat", xhat, got, n);
    free(got);
    got = from_gpu(dyout, bytes);
    check_bitwise("BatchNorm output", y, got, n);
    free(got);
    cpu->bn_backward_input(dy, xhat, y, ROWS, COLS, coefs[2], coefs[1], coefs[4], coefs[0]);
    gpu->bn_backward_input(ddy, dxhat, dyout, ROWS, COLS, dcoefs[2], dcoefs[1], dcoefs[4], dcoefs[0]);
    got = from_gpu(dyout, bytes);
    check_bitwise("BatchNorm input gradient", y, got, n);
    free(got);
    double *sums = malloc(2 * COLS * sizeof(double)), *dsums = gpu->alloc(2 * COLS * sizeof(double), DP_MEM_OTHER, "sums");
    cpu->column_sums(dy, xhat, ROWS, COLS, sums);
    gpu->column_sums(ddy, dxhat, ROWS, COLS, dsums);
    double *got_sums = malloc(2 * COLS * sizeof(double));
    gpu->download(got_sums, dsums, 2 * COLS * sizeof(double));
    for (int i = 0; i < 2 * COLS; i++)
        ck_assert_msg(fabs(got_sums[i] - sums[i]) <= 1e-12 * (1.0 + fabs(sums[i])), "column sum %d: %.17g vs %.17g", i,
                      got_sums[i], sums[i]);
    gpu->upload(dsums, sums, 2 * COLS * sizeof(double)); /* the same sums for the parameter gradients */
    cpu->bn_param_grads(sums, COLS, coefs[2], coefs[3], 1);
    gpu->bn_param_grads(dsums, COLS, dcoefs[2], dcoefs[3], 1);
    cpu->bn_update_running(coefs[4], coefs[5], coefs[0], coefs[1], COLS, 0.1f);
    gpu->bn_update_running(dcoefs[4], dcoefs[5], dcoefs[0], dcoefs[1], COLS, 0.1f);
    cpu->inverse_std(coefs[5], coefs[1], COLS, 1e-5f);
    gpu->inverse_std(dcoefs[5], dcoefs[1], COLS, 1e-5f);
    for (int i = 1; i < 6; i++) {
        got = from_gpu(dcoefs[i], cbytes);
        check_bitwise("BatchNorm per-feature values", coefs[i], got, COLS);
        free(got);
    }
    dp_dropout_key key = {.seed = 9, .step = 4, .first_sample = 123, .p = 0.3f, .scale = 1.0f / 0.7f};
    float *mask = malloc(bytes), *dmask = gpu->alloc(bytes, DP_MEM_OTHER, "mask");
    cpu->dropout_forward(y, x, mask, ROWS, COLS, &key);
    gpu->dropout_forward(dyout, dx, dmask, ROWS, COLS, &key);
    got = from_gpu(dmask, bytes);
    check_bitwise("dropout mask", mask, got, n);
    free(got);
    got = from_gpu(dyout, bytes);
    check_bitwise("dropout output", y, got, n);
    free(got);
    for (int i = 0; i < 6; i++) {
        free(coefs[i]);
        gpu->free(dcoefs[i]);
    }
    gpu->free(dx);
    gpu->free(ddy);
    gpu->free(dxhat);
    gpu->free(dyout);
    gpu->free(dsums);
    gpu->free(dmask);
    free(x);
    free(dy);
    free(xhat);
    free(y);
    free(sums);
    free(got_sums);
    free(mask);
}
END_TEST

static void check_softmax(int rows, int cols, uint64_t seed)
{
    size_t n = (size_t)rows * cols;
    float *logits = random_floats(n, seed, 8.0f);
    int32_t *labels = malloc((size_t)rows * sizeof *labels);
    for (int r = 0; r < rows; r++)
        labels[r] = (int32_t)((r * 31 + (int)seed) % cols);
    float *dlogits = malloc(n * sizeof(float));
    float *dl = to_gpu(logits, n * sizeof(float)), *ddl = gpu->alloc(n * sizeof(float), DP_MEM_OTHER, "dlogits");
    int32_t *dlabels = to_gpu(labels, (size_t)rows * sizeof *labels);
    double cpu_totals[2] = {0.0, 0.0}, gpu_totals[2], eval_totals[2], zeros[2] = {0.0, 0.0};
    double *dtotals = to_gpu(zeros, sizeof zeros), *deval = to_gpu(zeros, sizeof zeros);
    cpu->softmax_xent(logits, labels, rows, cols, dlogits, cpu_totals);
    gpu->softmax_xent(dl, dlabels, rows, cols, ddl, dtotals);
    gpu->softmax_xent(dl, dlabels, rows, cols, NULL, deval);
    gpu->download(gpu_totals, dtotals, sizeof gpu_totals);
    gpu->download(eval_totals, deval, sizeof eval_totals);
    float *got = from_gpu(ddl, n * sizeof(float));
    ck_assert_msg(fabs(gpu_totals[0] - cpu_totals[0]) < 1e-9 * fabs(cpu_totals[0]),
                  "%dx%d: loss %.17g on the GPU, %.17g on the CPU", rows, cols, gpu_totals[0], cpu_totals[0]);
    ck_assert(gpu_totals[1] == cpu_totals[1]);
    ck_assert_double_eq(eval_totals[0], gpu_totals[0]);
    ck_assert(eval_totals[1] == gpu_totals[1]);
    gpu->free(dtotals);
    gpu->free(deval);
    double error = dp_test_relative_error(got, dlogits, n);
    ck_assert_msg(error < 1e-5, "%dx%d: dlogits relative error %g", rows, cols, error);
    gpu->free(dl);
    gpu->free(ddl);
    gpu->free(dlabels);
    free(logits);
    free(labels);
    free(dlogits);
    free(got);
}

START_TEST(softmax_cross_entropy_matches_cpu)
{
    check_softmax(1000, 10, 41);   /* fewer classes than a warp's lanes */
    check_softmax(77, 1000, 42);   /* many columns per lane */
    check_softmax(3, 33, 43);      /* one more column than lanes */
}
END_TEST

/* Rows holding NaN (and ties, infinities, zeros): the loss is NaN on both backends, and the
 * argmax, hence the correct count, follows one rule: the first NaN, else the first largest. */
START_TEST(softmax_rows_with_nan_follow_one_argmax_rule)
{
    static const float pool[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 2.0f, 2.0f, -1.0f, 1e-45f};
    enum { ROWS = 2000 };
    static const int widths[] = {10, 33, 100};
    for (size_t w = 0; w < sizeof widths / sizeof *widths; w++) {
        int cols = widths[w];
        size_t n = (size_t)ROWS * cols;
        float *logits = random_floats(n, 90 + w, 3.0f);
        int32_t *labels = malloc(ROWS * sizeof *labels);
        for (size_t i = 0; i < n; i++)
            if ((i * 2654435761u) % 7 == 0)
                logits[i] = pool[(i / 7) % (sizeof pool / sizeof *pool)];
        for (int r = 0; r < ROWS; r++) {
            logits[(size_t)r * cols + (size_t)(r * 13) % cols] = NAN; /* every row has one */
            labels[r] = (r * 7) % cols;
        }
        float *dl = to_gpu(logits, n * sizeof(float));
        int32_t *dlabels = to_gpu(labels, ROWS * sizeof *labels);
        double cpu_totals[2] = {0.0, 0.0}, gpu_totals[2];
        double *dtotals = to_gpu(cpu_totals, sizeof cpu_totals);
        cpu->softmax_xent(logits, labels, ROWS, cols, NULL, cpu_totals);
        gpu->softmax_xent(dl, dlabels, ROWS, cols, NULL, dtotals);
        gpu->download(gpu_totals, dtotals, sizeof gpu_totals);
        gpu->free(dtotals);
        ck_assert_msg(isnan(cpu_totals[0]) && isnan(gpu_totals[0]), "loss %g on the CPU, %g on the GPU", cpu_totals[0],
                      gpu_totals[0]);
        ck_assert_msg(gpu_totals[1] == cpu_totals[1] && cpu_totals[1] > 0, "%d columns: %g correct on the GPU, %g on the CPU",
                      cols, gpu_totals[1], cpu_totals[1]);
        gpu->free(dl);
        gpu->free(dlabels);
        free(logits);
        free(labels);
    }
}
END_TEST

START_TEST(mse_matches_cpu)
{
    enum { ROWS = 513, COLS = 37 };
    size_t n = (size_t)ROWS * COLS;
    float *pred = random_floats(n, 51, 2.0f), *targets = random_floats(n, 52, 2.0f);
    float *dpred = malloc(n * sizeof(float));
    float *dp = to_gpu(pred, n * sizeof(float)), *dt = to_gpu(targets, n * sizeof(float));
    float *ddpred = gpu->alloc(n * sizeof(float), DP_MEM_OTHER, "dpred");
    double cpu_totals[2] = {1.5, 0.0}, gpu_totals[2];
    double *dtotals = to_gpu(cpu_totals, sizeof cpu_totals);
    cpu->mse(pred, targets, ROWS, COLS, dpred, cpu_totals);
    gpu->mse(dp, dt, ROWS, COLS, ddpred, dtotals);
    gpu->download(gpu_totals, dtotals, sizeof gpu_totals);
    gpu->free(dtotals);
    double cpu_loss = cpu_totals[0], gpu_loss = gpu_totals[0];
    float *got = from_gpu(ddpred, n * sizeof(float));
    ck_assert_msg(fabs(gpu_loss - cpu_loss) < 1e-9 * cpu_loss, "loss %.17g on the GPU, %.17g on the CPU",
                  gpu_loss, cpu_loss);
    check_bitwise("MSE gradient", dpred, got, n);
    gpu->free(dp);
    gpu->free(dt);
    gpu->free(ddpred);
    free(pred);
    free(targets);
    free(dpred);
    free(got);
}
END_TEST

static jmp_buf after_failure;

static void return_to_test(void)
{
    longjmp(after_failure, 1);
}

START_TEST(failed_cublas_call_is_named_with_file_and_rank)
{
    float *m = gpu->alloc(16 * sizeof(float), DP_MEM_OTHER, "a matrix");
    ck_assert_ptr_nonnull(m);
    dp_backend_set_fatal_handler(return_to_test);
    volatile int failed = 0;
    if (setjmp(after_failure) == 0)
        gpu->gemm(0, 0, 4, 4, 4, 1.0f, m, 4, m, 1, 0.0f, m, 4); /* ldb 1 < 4 columns: rejected */
    else
        failed = 1;
    dp_backend_set_fatal_handler(NULL);
    ck_assert_msg(failed, "an invalid leading dimension was accepted");
    const char *message = dp_last_error();
    ck_assert_msg(strstr(message, "cublasGemmEx") && strstr(message, "cuda.c:") && strstr(message, "rank 0"),
                  "%s", message);
    gpu->free(m);
}
END_TEST

enum { SAMPLES = 1000, FEATURES = 20, CLASSES = 5, STEPS = 50 };

/* 50 steps on the given device from the init file; returns the parameters and test loss. */
static float *train_on(dp_options *o, dp_device device, const dp_dataset *train, const dp_dataset *test,
                       double *test_loss)
{
    o->device = device;
    dp_comm comm;
    ck_assert_int_eq(dp_comm_init(&comm, MPI_COMM_WORLD, "mpi"), 0);
    dp_train_result result;
    ck_assert_msg(dp_train(o, train, test, &comm, &result, 1) == 0, "%s", dp_last_error());
    ck_assert_int_eq(result.steps, STEPS);
    *test_loss = result.test_loss;
    dp_comm_free(&comm);
    return result.params;
}

/* Writes the model's tensors with random parameters (and its initial buffers) as an --init file;
 * returns the parameters (malloc'd) and sets *n. */
static float *write_init_file(const dp_options *o, const char *path, size_t *n)
{
    dp_model m;
    ck_assert_int_eq(dp_model_create(&m, cpu, &o->model, FEATURES, 1), 0);
    *n = dp_params_floats(&m.params);
    float *initial = random_floats(*n, 61, 0.2f), *params = malloc(*n * sizeof(float));
    dp_model_init(&m, 1, params, m.buffer_values, m.counters);
    dp_tensor_ref refs[32];
    int count = dp_params_refs(&m.params, initial, NULL, refs);
    count += dp_params_refs(&m.buffers, m.buffer_values, m.counters, refs + count);
    ck_assert_int_eq(dp_safetensors_write(path, refs, count, NULL, NULL, 0), 0);
    free(params);
    dp_model_free(&m);
    return initial;
}

static void check_gpu_trains_like_cpu(int regression, const char *model)
{
    dp_options o;
    dp_options_defaults(&o);
    ck_assert_int_eq(model ? dp_model_spec_parse(model, &o.model) : dp_model_spec_from_layers("20,64,32,5", &o.model), 0);
    o.loss = regression ? DP_LOSS_CHOICE_MSE : DP_LOSS_CHOICE_XENT;
    o.steps = STEPS;
    o.batch = 64;
    o.weight_decay = 1e-4f;
    o.quiet = 1;
    if (model) {
        o.optimizer = DP_OPTIMIZER_ADAMW;
        o.lr = 1e-3f;
        o.momentum = 0.0f;
    }
    size_t n = 0;
    char *init = dp_test_path(regression ? "init-mse.safetensors" : "init-xent.safetensors");
    float *initial = write_init_file(&o, init, &n);
    strcpy(o.init_path, init);
    char spec[64];
    snprintf(spec, sizeof spec, "synthetic:%d,%d,%d", SAMPLES, FEATURES, CLASSES);
    dp_dataset train, test;
    ck_assert_int_eq(dp_dataset_open(spec, 0, regression, 77, &train), 0);
    ck_assert_int_eq(dp_dataset_open(spec, 1, regression, 77, &test), 0);
    double cpu_test_loss, gpu_test_loss;
    float *on_cpu = train_on(&o, DP_DEVICE_CPU, &train, &test, &cpu_test_loss);
    float *on_gpu = train_on(&o, DP_DEVICE_CUDA, &train, &test, &gpu_test_loss);
    double moved = dp_test_relative_error(on_cpu, initial, n), error = dp_test_relative_error(on_gpu, on_cpu, n);
    printf("%s %s: GPU vs CPU after %d steps: parameters relative error %.3g (training moved %.3g); "
           "test loss %.6f vs %.6f\n", model ? model : "MLP", regression ? "mse" : "xent", STEPS, error, moved,
           gpu_test_loss, cpu_test_loss);
    ck_assert_msg(moved > 0.05, "training barely moved the parameters (%g)", moved);
    ck_assert_msg(error < 1e-4, "GPU parameters differ from the CPU's: relative error %g", error);
    ck_assert_msg(fabs(gpu_test_loss - cpu_test_loss) < 1e-4 * cpu_test_loss, "test loss %g vs %g",
                  gpu_test_loss, cpu_test_loss);
    dp_dataset_free(&train);
    dp_dataset_free(&test);
    free(on_cpu);
    free(on_gpu);
    free(initial);
    free(init);
}

START_TEST(gpu_training_matches_cpu_for_cross_entropy)
{
    check_gpu_trains_like_cpu(0, NULL);
}
END_TEST

START_TEST(gpu_training_matches_cpu_for_mse)
{
    check_gpu_trains_like_cpu(1, NULL);
}
END_TEST

START_TEST(gpu_training_matches_cpu_with_batchnorm_dropout_and_adamw)
{
    check_gpu_trains_like_cpu(0, "linear(64,bias=0),batchnorm,relu,dropout(0.2),linear(32),relu,linear(5)");
}
END_TEST

int main(int argc, char **argv)
{
    int rank, size;
    dp_test_mpi_init(&argc, &argv, &rank, &size);
    if (dp_backend_gpu_count() == 0) {
        printf("test_gpu: no CUDA GPU visible (or dptrain built without CUDA): skipped\n");
        MPI_Finalize();
        return EXIT_SKIP;
    }
    Suite *s = suite_create("gpu");
    TCase *kernels = tcase_create("operations");
    tcase_add_checked_fixture(kernels, setup, teardown);
    tcase_add_test(kernels, gemm_matches_cpu_for_every_transpose_and_beta);
    tcase_add_test(kernels, tf32_gemm_stays_close_to_fp32);
    tcase_add_test(kernels, elementwise_operations_match_cpu_bit_for_bit);
    tcase_add_test(kernels, gather_zero_and_copies_move_exact_bytes);
    tcase_add_test(kernels, bias_grad_and_nonfinite_count_match_cpu);
    tcase_add_test(kernels, batchnorm_and_dropout_operations_match_cpu);
    tcase_add_test(kernels, softmax_cross_entropy_matches_cpu);
    tcase_add_test(kernels, softmax_rows_with_nan_follow_one_argmax_rule);
    tcase_add_test(kernels, mse_matches_cpu);
    tcase_add_test(kernels, failed_cublas_call_is_named_with_file_and_rank);
    suite_add_tcase(s, kernels);
    TCase *training = tcase_create("training");
    tcase_set_timeout(training, 120);
    tcase_add_test(training, gpu_training_matches_cpu_for_cross_entropy);
    tcase_add_test(training, gpu_training_matches_cpu_for_mse);
    tcase_add_test(training, gpu_training_matches_cpu_with_batchnorm_dropout_and_adamw);
    suite_add_tcase(s, training);
    int failed = dp_test_run_mpi_suite(s);
    MPI_Finalize();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
