/* The CUDA backend on a GPU; exits 77 (skipped) where none is visible or CUDA was not built.
 * What the backend test table (tests/test_backend_ops.c: every operation against its
 * reference and the CPU) does not cover: TF32 GEMMs close to FP32, bf16 GEMMs as FP32 arithmetic
 * on the rounded inputs (padded rows too), a Linear's bf16 operands rounded once giving the
 * bits per-GEMM rounding gives, a failing cuBLAS call
 * reported with call, file and rank, and 50 training steps on the GPU against the CPU from
 * the same --init file and data (within 1e-4 relative; on as many ranks as it is started
 * with). Run by tests/gpu.sh on a GPU, and linked with the fake CUDA runtime by
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

static void open_gpu(dp_precision precision)
{
    dp_backend_request request = {.device = DP_DEVICE_CUDA, .share_gpu = 1, .precision = precision, .local_size = 1};
    ck_assert_msg(dp_backend_open(&request, &gpu) == 0, "%s", dp_last_error());
}

static void setup(void)
{
    cpu = dp_backend_cpu();
    open_gpu(DP_PRECISION_FP32);
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
    void *dev = gpu->alloc(gpu, bytes, DP_MEM_OTHER, "a test input");
    ck_assert_msg(dev != NULL, "%s", dp_last_error());
    gpu->upload(gpu, dev, host, bytes);
    return dev;
}

static void *from_gpu(const void *dev, size_t bytes)
{
    void *host = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(host);
    gpu->download(gpu, host, dev, bytes);
    return host;
}

/* The floats rounded to bf16 (nearest even), in place. */
static void round_to_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = dp_bf16_to_float(dp_bf16_from_float(x[i]));
}

/* C = alpha op(A) op(B) + beta C on both backends, op(A) [m, k], op(B) [k, n], A's and B's rows
 * `pad` floats longer than they are wide; the CPU's reference from bf16-rounded A and B where
 * asked. */
static double gemm_error_of(int trans_a, int trans_b, int m, int n, int k, float beta, uint64_t seed, int pad,
                            int bf16_reference)
{
    int lda = (trans_a ? m : k) + pad, ldb = (trans_b ? k : n) + pad;
    size_t a_floats = (size_t)(trans_a ? k : m) * lda, b_floats = (size_t)(trans_b ? n : k) * ldb;
    float *a = random_floats(a_floats, seed, 1.0f), *b = random_floats(b_floats, seed + 1, 1.0f);
    float *c = random_floats((size_t)m * n, seed + 2, 1.0f);
    size_t c_bytes = (size_t)m * n * sizeof(float);
    float *da = to_gpu(a, a_floats * sizeof(float)), *db = to_gpu(b, b_floats * sizeof(float));
    float *dc = to_gpu(c, c_bytes);
    if (bf16_reference) {
        round_to_bf16(a, a_floats);
        round_to_bf16(b, b_floats);
    }
    cpu->gemm(cpu, trans_a, trans_b, m, n, k, 0.75f, a, lda, b, ldb, beta, c, n);
    gpu->gemm(gpu, trans_a, trans_b, m, n, k, 0.75f, da, lda, db, ldb, beta, dc, n);
    float *from_device = from_gpu(dc, c_bytes);
    double error = dp_test_relative_error(from_device, c, (size_t)m * n);
    gpu->free(gpu, da);
    gpu->free(gpu, db);
    gpu->free(gpu, dc);
    free(a);
    free(b);
    free(c);
    free(from_device);
    return error;
}

static double gemm_error(int trans_a, int trans_b, int m, int n, int k, float beta, uint64_t seed)
{
    return gemm_error_of(trans_a, trans_b, m, n, k, beta, seed, 0, 0);
}

START_TEST(tf32_gemm_stays_close_to_fp32)
{
    dp_backend_close(gpu);
    open_gpu(DP_PRECISION_TF32);
    ck_assert_ptr_nonnull(strstr(gpu->describe(gpu), "TF32"));
    double error = gemm_error(0, 1, 128, 128, 512, 0.0f, 7);
    /* TF32 keeps 10 mantissa bits: errors near 2^-11 per product, averaged down by the sum. */
    ck_assert_msg(error < 1e-2, "TF32 gemm: relative error %g", error);
}
END_TEST

/* bf16 inputs keep 7 mantissa bits: products off by up to 2^-8, averaged down by the sum;
 * more than FP32's error, so the inputs were rounded (cuBLAS may also pick TF32: still so). */
START_TEST(bf16_gemm_stays_close_to_fp32_and_rounds_its_inputs)
{
    dp_backend_close(gpu);
    open_gpu(DP_PRECISION_BF16);
    ck_assert_ptr_nonnull(strstr(gpu->describe(gpu), "bf16"));
    ck_assert_int_eq(dp_backend_require(gpu, "gemm", DP_DTYPE_BF16), 0);
    for (int t = 0; t < 4; t++) {
        double error = gemm_error(t & 1, t >> 1, 96, 80, 512, 0.5f, 11 + t);
        ck_assert_msg(error < 2e-2 && error > 1e-5, "bf16 gemm %c%c: relative error %g", t & 1 ? 'T' : 'N',
                      t >> 1 ? 'T' : 'N', error);
    }
}
END_TEST

/* A bf16 GEMM is FP32 arithmetic on the bf16-rounded inputs: against the CPU's sgemm of those
 * it differs by the order of the FP32 sums alone, also where rows are longer than the matrix
 * (the bf16 copies of the operands keep their leading dimensions). */
START_TEST(bf16_gemm_is_fp32_arithmetic_on_rounded_inputs)
{
    dp_backend_close(gpu);
    open_gpu(DP_PRECISION_BF16);
    for (int t = 0; t < 4; t++) {
        double error = gemm_error_of(t & 1, t >> 1, 96, 80, 512, 0.5f, 31 + t, 5, 1);
        ck_assert_msg(error < 1e-5, "bf16 gemm %c%c against FP32 of the rounded inputs: relative error %g",
                      t & 1 ? 'T' : 'N', t >> 1 ? 'T' : 'N', error);
    }
}
END_TEST

enum { HELD_FEATURES = 20, HELD_CLASSES = 5, HELD_ROWS = 48, HELD_MICRO_BATCHES = 2 };

/* One training step's gradients of `model` on backend be, from the given parameters: forward,
 * loss and backward over two micro-batches of fixed inputs, the second accumulating. */
static float *step_gradients(const dp_backend *be, const dp_model_spec *spec, const float *params, size_t *n)
{
    dp_model m;
    ck_assert_msg(dp_model_create(&m, be, spec, HELD_FEATURES, HELD_ROWS) == 0, "%s", dp_last_error());
    *n = dp_params_floats(&m.params);
    size_t buffers = dp_params_floats(&m.buffers);
    float *initial_buffers = calloc(buffers + 1, sizeof(float)), *unused = malloc(*n * sizeof(float));
    ck_assert_ptr_nonnull(initial_buffers);
    ck_assert_ptr_nonnull(unused);
    dp_model_init(&m, 1, unused, initial_buffers, m.counters);
    be->upload(be, m.weights, params, *n * sizeof(float));
    be->upload(be, m.buffer_values, initial_buffers, buffers * sizeof(float));
    float *x = random_floats((size_t)HELD_ROWS * HELD_FEATURES, 23, 1.0f);
    int32_t labels[HELD_ROWS];
    for (int r = 0; r < HELD_ROWS; r++)
        labels[r] = (r * 7) % HELD_CLASSES;
    float *x_dev = be->alloc(be, sizeof(float) * HELD_ROWS * HELD_FEATURES, DP_MEM_OTHER, "test rows");
    int32_t *labels_dev = be->alloc(be, sizeof labels, DP_MEM_OTHER, "test labels");
    double *totals = be->alloc(be, 2 * sizeof(double), DP_MEM_OTHER, "test totals");
    /* Dropout reads the step number from backend memory, as a replayed graph does. */
    const uint64_t step = 1;
    uint64_t *step_dev = be->alloc(be, sizeof step, DP_MEM_OTHER, "test step number");
    be->upload(be, step_dev, &step, sizeof step);
    be->upload(be, labels_dev, labels, sizeof labels);
    be->zero(be, (float *)totals, 4);
    for (int mb = 0; mb < HELD_MICRO_BATCHES; mb++) {
        for (size_t i = 0; i < (size_t)HELD_ROWS * HELD_FEATURES; i++)
            x[i] = -x[i] * 0.75f; /* another micro-batch's rows in the same buffer, as the engine's */
        be->upload(be, x_dev, x, sizeof(float) * HELD_ROWS * HELD_FEATURES);
        dp_nn_context ctx = {.be = be, .training = 1, .accumulate = mb > 0, .seed = 9, .step = step_dev,
                             .first_sample = (uint64_t)mb * HELD_ROWS};
        const float *out;
        ck_assert_int_eq(dp_model_forward(&m, &ctx, x_dev, HELD_ROWS, &out), 0);
        dp_model_loss(&m, DP_LOSS_XENT, out, labels_dev, NULL, HELD_ROWS, m.delta[0], totals);
        ck_assert_int_eq(dp_model_backward(&m, &ctx, m.delta[0], HELD_ROWS, NULL), 0);
    }
    float *grads = malloc(*n * sizeof(float));
    ck_assert_ptr_nonnull(grads);
    be->download(be, grads, m.grads, *n * sizeof(float));
    be->free(be, x_dev);
    be->free(be, labels_dev);
    be->free(be, totals);
    be->free(be, step_dev);
    free(x);
    free(unused);
    free(initial_buffers);
    dp_model_free(&m);
    return grads;
}

/* At bf16 a Linear rounds X, W and dY once per micro-batch and its three GEMMs read those copies
 * (gemm_rounded); without gemm_rounded each GEMM rounds its own two operands. The gradients
 * must be the same bits: the same backend with gemm_rounded taken away is the reference, over
 * BatchNorm, dropout, a ReLU's backward fused into the next GEMM and --accum's second
 * micro-batch, with cuBLASLt's epilogues and without (--fuse off). Both without bf16
 * activations (gemm_rounded_bf16), whose GEMMs add a bf16 copy of the bias: test_epilogues. */
static void check_held_operands_equal_per_gemm_rounding(int unfused)
{
    dp_backend_close(gpu);
    dp_backend_request request = {.device = DP_DEVICE_CUDA, .share_gpu = 1, .precision = DP_PRECISION_BF16,
                                  .unfused = unfused, .local_size = 1};
    ck_assert_msg(dp_backend_open(&request, &gpu) == 0, "%s", dp_last_error());
    ck_assert_int_eq(dp_backend_require(gpu, "gemm_rounded", DP_DTYPE_BF16), 0);
    dp_backend held_copies = *gpu, per_gemm = *gpu; /* their state is gpu's, so gpu's operations serve them */
    held_copies.gemm_rounded_bf16 = NULL;
    per_gemm.round_operand = NULL;
    per_gemm.gemm_rounded = NULL;
    dp_model_spec spec;
    ck_assert_int_eq(dp_model_spec_parse("linear(32),relu,linear(24,bias=0),batchnorm,relu,dropout(0.25),"
                                         "linear(16),relu,linear(5)", &spec), 0);
    size_t n = 0, n_ref = 0;
    dp_model probe;
    ck_assert_int_eq(dp_model_create(&probe, cpu, &spec, HELD_FEATURES, 1), 0);
    float *params = random_floats(dp_params_floats(&probe.params), 19, 0.3f);
    dp_model_free(&probe);
    float *held = step_gradients(&held_copies, &spec, params, &n);
    float *reference = step_gradients(&per_gemm, &spec, params, &n_ref);
    ck_assert_uint_eq(n, n_ref);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++)
        differ += memcmp(&held[i], &reference[i], sizeof(float)) != 0;
    ck_assert_msg(differ == 0, "%zu of %zu gradients differ from per-GEMM rounding (fuse %s)", differ, n,
                  unfused ? "off" : "auto");
    ck_assert_msg(dp_test_relative_error(held, params, n) > 0.0, "the gradients are all zero");
    free(held);
    free(reference);
    free(params);
}

START_TEST(bf16_held_operands_equal_per_gemm_rounding)
{
    check_held_operands_equal_per_gemm_rounding(0);
}
END_TEST

START_TEST(bf16_held_operands_equal_per_gemm_rounding_unfused)
{
    check_held_operands_equal_per_gemm_rounding(1);
}
END_TEST

static jmp_buf after_failure;

static void return_to_test(void)
{
    longjmp(after_failure, 1);
}

START_TEST(failed_cublas_call_is_named_with_file_and_rank)
{
    float *m = gpu->alloc(gpu, 16 * sizeof(float), DP_MEM_OTHER, "a matrix");
    ck_assert_ptr_nonnull(m);
    dp_backend_set_fatal_handler(return_to_test);
    volatile int failed = 0;
    if (setjmp(after_failure) == 0)
        gpu->gemm(gpu, 0, 0, 4, 4, 4, 1.0f, m, 4, m, 1, 0.0f, m, 4); /* ldb 1 < 4 columns: rejected */
    else
        failed = 1;
    dp_backend_set_fatal_handler(NULL);
    ck_assert_msg(failed, "an invalid leading dimension was accepted");
    const char *message = dp_last_error();
    ck_assert_msg(strstr(message, "cublasGemmEx") && strstr(message, "cuda_gemm.c:") && strstr(message, "rank 0"),
                  "%s", message);
    gpu->free(gpu, m);
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

/* Issue 36: residuals (the sum's gradient kept for the body, the shortcut's for the input) on the GPU. */
START_TEST(gpu_training_matches_cpu_for_residual_blocks)
{
    check_gpu_trains_like_cpu(0, "linear(32,bias=0),batchnorm,relu,residual{linear(32,bias=0),batchnorm,relu,"
                                 "linear(32)},residual(relu=0){linear(16)|linear(16,bias=0)},linear(5)");
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
    TCase *kernels = tcase_create("gemm and errors");
    tcase_add_checked_fixture(kernels, setup, teardown);
    tcase_add_test(kernels, tf32_gemm_stays_close_to_fp32);
    tcase_add_test(kernels, bf16_gemm_stays_close_to_fp32_and_rounds_its_inputs);
    tcase_add_test(kernels, bf16_gemm_is_fp32_arithmetic_on_rounded_inputs);
    tcase_add_test(kernels, bf16_held_operands_equal_per_gemm_rounding);
    tcase_add_test(kernels, bf16_held_operands_equal_per_gemm_rounding_unfused);
    tcase_add_test(kernels, failed_cublas_call_is_named_with_file_and_rank);
    suite_add_tcase(s, kernels);
    TCase *training = tcase_create("training");
    tcase_set_timeout(training, 120);
    tcase_add_test(training, gpu_training_matches_cpu_for_cross_entropy);
    tcase_add_test(training, gpu_training_matches_cpu_for_mse);
    tcase_add_test(training, gpu_training_matches_cpu_with_batchnorm_dropout_and_adamw);
    tcase_add_test(training, gpu_training_matches_cpu_for_residual_blocks);
    suite_add_tcase(s, training);
    int failed = dp_test_run_mpi_suite(s);
    MPI_Finalize();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
