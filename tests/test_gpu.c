/* The CUDA backend on a GPU; exits 77 (skipped) where none is visible or CUDA was not built.
 * Every operation against the CPU backend on random inputs (elementwise ones bit for bit, the
 * rest within 1e-5 relative), a failing cuBLAS call reported with call, file and rank, and
 * 50 training steps on the GPU against the CPU from the same --init file and data (within
 * 1e-4 relative). Run under mpirun with one rank (tests/gpu.sh). */
#include "dp/backend.h"
#include "dp/comm.h"
#include "dp/data.h"
#include "dp/error.h"
#include "dp/mlp.h"
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
    void *dev = gpu->alloc(bytes, "a test input");
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

/* Fails naming the first element where the GPU's result differs from the CPU's in any bit. */
static void check_bitwise(const char *what, const float *cpu_result, const float *gpu_result, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&cpu_result[i], &gpu_result[i], sizeof(float)) == 0,
                      "%s: element %zu is %.9g on the GPU, %.9g on the CPU", what, i, gpu_result[i], cpu_result[i]);
}

START_TEST(elementwise_operations_match_cpu_bit_for_bit)
{
    enum { ROWS = 301, COLS = 77 };
    size_t n = (size_t)ROWS * COLS, bytes = n * sizeof(float);
    float *bias = random_floats(COLS, 11, 1.0f), *dbias = to_gpu(bias, COLS * sizeof(float));
    for (int relu = 0; relu < 2; relu++) {
        float *y = random_floats(n, 12 + relu, 2.0f), *dy = to_gpu(y, bytes);
        cpu->bias_act_forward(y, bias, ROWS, COLS, relu);
        gpu->bias_act_forward(dy, dbias, ROWS, COLS, relu);
        float *got = from_gpu(dy, bytes);
        check_bitwise(relu ? "bias + ReLU" : "bias", y, got, n);
        gpu->free(dy);
        free(got);
        free(y);
    }
    float *grad = random_floats(n, 14, 1.0f), *act = random_floats(n, 15, 1.0f);
    float *dgrad = to_gpu(grad, bytes), *dact = to_gpu(act, bytes);
    cpu->relu_backward(grad, act, n);
    gpu->relu_backward(dgrad, dact, n);
    cpu->scale(grad, n, 1.0f / 3.0f);
    gpu->scale(dgrad, n, 1.0f / 3.0f);
    float *got = from_gpu(dgrad, bytes);
    check_bitwise("ReLU backward then scale", grad, got, n);
    free(got);
    for (int momentum = 0; momentum < 2; momentum++) {
        float *params = random_floats(n, 16, 1.0f), *velocity = random_floats(n, 17, 0.1f);
        float *dparams = to_gpu(params, bytes), *dvelocity = to_gpu(velocity, bytes);
        for (int step = 0; step < 3; step++) {
            cpu->sgd_update(params, grad, velocity, n, 0.05f, momentum ? 0.9f : 0.0f, 1e-3f);
            gpu->sgd_update(dparams, dgrad, dvelocity, n, 0.05f, momentum ? 0.9f : 0.0f, 1e-3f);
        }
        float *got_params = from_gpu(dparams, bytes), *got_velocity = from_gpu(dvelocity, bytes);
        check_bitwise("SGD parameters", params, got_params, n);
        check_bitwise("SGD momentum buffer", velocity, got_velocity, n);
        gpu->free(dparams);
        gpu->free(dvelocity);
        free(params);
        free(velocity);
        free(got_params);
        free(got_velocity);
    }
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
    float *expected = malloc(sizeof(float) * ROWS * WIDTH), *drows = gpu->alloc(sizeof(float) * ROWS * WIDTH, "rows");
    ck_assert_ptr_nonnull(drows);
    cpu->gather_rows(expected, features, index, ROWS, WIDTH);
    gpu->gather_rows(drows, dfeatures, dindex, ROWS, WIDTH);
    float *got = from_gpu(drows, sizeof(float) * ROWS * WIDTH);
    ck_assert_mem_eq(got, expected, sizeof(float) * ROWS * WIDTH);
    gpu->zero(drows, (size_t)ROWS * WIDTH);
    gpu->synchronize();
    float *zeros = from_gpu(drows, sizeof(float) * ROWS * WIDTH);
    for (size_t i = 0; i < (size_t)ROWS * WIDTH; i++)
        ck_assert_float_eq(zeros[i], 0.0f);
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
    cpu->bias_grad(dy, ROWS, COLS, db);
    gpu->bias_grad(ddy, ROWS, COLS, ddb);
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

static void check_softmax(int rows, int cols, uint64_t seed)
{
    size_t n = (size_t)rows * cols;
    float *logits = random_floats(n, seed, 8.0f);
    int32_t *labels = malloc((size_t)rows * sizeof *labels);
    for (int r = 0; r < rows; r++)
        labels[r] = (int32_t)((r * 31 + (int)seed) % cols);
    float *dlogits = malloc(n * sizeof(float));
    float *dl = to_gpu(logits, n * sizeof(float)), *ddl = gpu->alloc(n * sizeof(float), "dlogits");
    int32_t *dlabels = to_gpu(labels, (size_t)rows * sizeof *labels);
    double cpu_loss = 0.0, gpu_loss = 0.0, eval_loss = 0.0;
    long cpu_correct = 0, gpu_correct = 0, eval_correct = 0;
    cpu->softmax_xent(logits, labels, rows, cols, dlogits, &cpu_loss, &cpu_correct);
    gpu->softmax_xent(dl, dlabels, rows, cols, ddl, &gpu_loss, &gpu_correct);
    gpu->softmax_xent(dl, dlabels, rows, cols, NULL, &eval_loss, &eval_correct);
    float *got = from_gpu(ddl, n * sizeof(float));
    ck_assert_msg(fabs(gpu_loss - cpu_loss) < 1e-9 * fabs(cpu_loss), "%dx%d: loss %.17g on the GPU, %.17g on the CPU",
                  rows, cols, gpu_loss, cpu_loss);
    ck_assert_int_eq(gpu_correct, cpu_correct);
    ck_assert_double_eq(eval_loss, gpu_loss);
    ck_assert_int_eq(eval_correct, gpu_correct);
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

START_TEST(mse_matches_cpu)
{
    enum { ROWS = 513, COLS = 37 };
    size_t n = (size_t)ROWS * COLS;
    float *pred = random_floats(n, 51, 2.0f), *targets = random_floats(n, 52, 2.0f);
    float *dpred = malloc(n * sizeof(float));
    float *dp = to_gpu(pred, n * sizeof(float)), *dt = to_gpu(targets, n * sizeof(float));
    float *ddpred = gpu->alloc(n * sizeof(float), "dpred");
    double cpu_loss = 1.5, gpu_loss = 1.5;
    cpu->mse(pred, targets, ROWS, COLS, dpred, &cpu_loss);
    gpu->mse(dp, dt, ROWS, COLS, ddpred, &gpu_loss);
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
    float *m = gpu->alloc(16 * sizeof(float), "a matrix");
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
    float *params = malloc(dp_mlp_param_count(o->widths, o->nwidths) * sizeof(float));
    dp_train_result result;
    ck_assert_msg(dp_train(o, train, test, &comm, params, &result) == 0, "%s", dp_last_error());
    ck_assert_int_eq(result.steps, STEPS);
    *test_loss = result.test_loss;
    dp_comm_free(&comm);
    return params;
}

static void check_gpu_trains_like_cpu(int regression)
{
    dp_options o;
    dp_options_defaults(&o);
    strcpy(o.layers_spec, "20,64,32,5");
    ck_assert_int_eq(dp_mlp_parse_widths(o.layers_spec, o.widths, &o.nwidths), 0);
    o.loss = regression ? DP_LOSS_CHOICE_MSE : DP_LOSS_CHOICE_XENT;
    o.steps = STEPS;
    o.batch = 64;
    o.weight_decay = 1e-4f;
    o.quiet = 1;
    size_t n = dp_mlp_param_count(o.widths, o.nwidths);
    float *initial = random_floats(n, 61, 0.2f);
    dp_tensor_ref refs[2 * DP_MLP_MAX_LAYERS];
    dp_mlp_tensor_refs(o.widths, o.nwidths, initial, refs);
    char *init = dp_test_path(regression ? "init-mse.safetensors" : "init-xent.safetensors");
    ck_assert_int_eq(dp_safetensors_write(init, refs, 2 * (o.nwidths - 1), NULL, NULL, 0), 0);
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
    printf("%s: GPU vs CPU after %d steps: parameters relative error %.3g (training moved %.3g); "
           "test loss %.6f vs %.6f\n", regression ? "mse" : "xent", STEPS, error, moved, gpu_test_loss, cpu_test_loss);
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
    check_gpu_trains_like_cpu(0);
}
END_TEST

START_TEST(gpu_training_matches_cpu_for_mse)
{
    check_gpu_trains_like_cpu(1);
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
    tcase_add_test(kernels, softmax_cross_entropy_matches_cpu);
    tcase_add_test(kernels, mse_matches_cpu);
    tcase_add_test(kernels, failed_cublas_call_is_named_with_file_and_rank);
    suite_add_tcase(s, kernels);
    TCase *training = tcase_create("training");
    tcase_set_timeout(training, 120);
    tcase_add_test(training, gpu_training_matches_cpu_for_cross_entropy);
    tcase_add_test(training, gpu_training_matches_cpu_for_mse);
    suite_add_tcase(s, training);
    int failed = dp_test_run_mpi_suite(s);
    MPI_Finalize();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
