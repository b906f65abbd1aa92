/* Multi-rank: run under mpirun (tests/mpi-train-wN.sh). THE EQUIVALENCE TEST: W ranks train
 * exactly like one rank with the whole batch, for every all-reduce algorithm. */
#include "dp/comm.h"
#include "dp/data.h"
#include "dp/engine.h"
#include "dp/error.h"
#include "dp/nn.h"
#include "dp/options.h"
#include "dp/sampler.h"
#include "dp/train.h"
#include "src/train/trainer.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SAMPLES = 500, FEATURES = 20, CLASSES = 5, STEPS = 20 };

static int world_rank, world_size;
/* The synthetic samples' shape: [FEATURES], or an image of FEATURES pixels for the CNN cases. */
static dp_dims sample_shape = {.ndim = 1, .dim = {FEATURES}};
/* DP_TEST_DEVICE=cuda runs every case on the GPU (tests/gpu-train-w2.sh); the CPU otherwise. */
static dp_device test_device = DP_DEVICE_CPU;

static void base_options(dp_options *o)
{
    dp_options_defaults(o);
    o->device = test_device;
    o->share_gpu = test_device == DP_DEVICE_CUDA; /* the test's ranks may outnumber the GPUs */
    strcpy(o->layers_spec, "20,32,16,5");
    ck_assert_int_eq(dp_model_spec_from_layers(o->layers_spec, &o->model), 0);
    o->steps = STEPS;
    o->lr = 0.1f;
    o->momentum = 0.9f;
    o->weight_decay = 1e-3f;
    o->quiet = 1;
    o->seed = 1234;
}

static void open_synthetic(dp_dataset *ds, int regression)
{
    char spec[64];
    snprintf(spec, sizeof spec, "synthetic:%d,%d,%d", SAMPLES, FEATURES, CLASSES);
    ck_assert_msg(dp_dataset_open(spec, 0, regression, 77, ds) == 0, "%s", dp_last_error());
    ds->sample = sample_shape;
}

/* The model of o, as the trainer builds it, on the CPU. */
static void build_model(const dp_options *o, const dp_dataset *data, dp_model *m)
{
    ck_assert_msg(dp_model_create_owning(m, dp_backend_cpu(), &o->model, &data->sample, 1, DP_MODEL_OWNS_ALL) == 0, "%s",
                  dp_last_error());
}

/* The initial parameters of o's model (malloc'd); *n gets their count. */
static float *initial_params(const dp_options *o, const dp_dataset *data, size_t *n)
{
    dp_model m;
    build_model(o, data, &m);
    *n = dp_params_floats(&m.params);
    float *params = malloc(*n * sizeof(float)), *buffers = malloc((dp_params_floats(&m.buffers) + 1) * sizeof(float));
    dp_model_init(&m, o->seed, params, buffers, m.counters);
    free(buffers);
    dp_model_free(&m);
    return params;
}

/* Trains with o on comm and returns the final parameters (malloc'd). */
static float *train_on(const dp_options *o, const dp_dataset *data, MPI_Comm mpi_comm)
{
    dp_comm comm;
    ck_assert_msg(dp_comm_init(&comm, mpi_comm, o->allreduce) == 0, "%s", dp_last_error());
    dp_comm_set_grad_dtype(&comm, o->grad_dtype);
    dp_train_result result;
    ck_assert_msg(dp_train(o, data, NULL, &comm, &result, 1) == 0, "%s", dp_last_error());
    ck_assert_int_eq(result.steps, o->steps);
    dp_comm_free(&comm);
    return result.params;
}

/* 1 when every rank's buffer equals rank 0's byte for byte. */
static int replicas_identical(const float *params, size_t n)
{
    return dp_test_same_on_every_rank(params, n * sizeof(float));
}

/* Trains `distributed` on all ranks and `reference` on rank 0 alone; compares. */
static void check_equivalence(const dp_options *distributed, const dp_options *reference, int regression)
{
    dp_dataset data;
    open_synthetic(&data, regression);
    size_t n = 0;
    float *initial = initial_params(distributed, &data, &n);
    float *params = train_on(distributed, &data, MPI_COMM_WORLD);
    ck_assert_msg(replicas_identical(params, n), "replicas differ after %d steps (%s)", STEPS,
                  distributed->allreduce);
    if (world_rank == 0) {
        float *single = train_on(reference, &data, MPI_COMM_SELF);
        double moved = dp_test_relative_error(params, initial, n), error = dp_test_relative_error(params, single, n);
        printf("W=%d %s %s %s batch %ld accum %ld%s%s: relative error vs 1 rank %.3g (training moved %.3g)\n",
               world_size, distributed->model.text, distributed->allreduce, distributed->strategy.name, distributed->batch,
               distributed->accum,
               distributed->drop_last ? " drop-last" : "", regression ? " mse" : "", error, moved);
        ck_assert_msg(moved > 0.05, "training barely moved the parameters (%g)", moved);
        ck_assert_msg(error < 1e-5, "W=%d differs from 1 rank: relative error %g", world_size, error);
        free(single);
    }
    free(initial);
    free(params);
    dp_dataset_free(&data);
}

/* The equivalence check for every algorithm --allreduce accepts. */
static void check_all_algorithms(dp_options *distributed, dp_options *reference, int regression)
{
    char names[256];
    snprintf(names, sizeof names, "%s %s", dp_comm_algorithm_names(),
             test_device == DP_DEVICE_CUDA ? dp_comm_gpu_algorithm_names() : "");
    for (char *name = strtok(names, " "); name; name = strtok(NULL, " ")) {
        strcpy(distributed->allreduce, name);
        check_equivalence(distributed, reference, regression);
    }
}

START_TEST(broadcast_gives_every_rank_rank0s_model)
{
    dp_options o;
    base_options(&o);
    ck_assert_int_eq(dp_model_spec_parse("linear(8),batchnorm,relu,linear(5)", &o.model), 0);
    dp_dataset data;
    open_synthetic(&data, 0);
    dp_comm comm;
    ck_assert_int_eq(dp_comm_init(&comm, MPI_COMM_WORLD, "mpi"), 0);
    dp_engine *e;
    ck_assert_int_eq(dp_engine_open_device(&e, &comm, &(dp_engine_device){.device = DP_DEVICE_CPU}), 0);
    ck_assert_int_eq(dp_engine_build_forward(e, &o.model, &data.sample, 16), 0);
    const dp_model *m = dp_engine_model(e);
    size_t n = dp_params_floats(&m->params), nb = dp_params_floats(&m->buffers);
    float *params = malloc(n * sizeof(float)), *buffers = malloc(nb * sizeof(float)), *got = malloc(n * sizeof(float));
    size_t expected_n = 0;
    float *expected = initial_params(&o, &data, &expected_n);
    /* Rank 0 draws; the others hold values that differ by rank until the broadcast. */
    if (world_rank == 0)
        ck_assert_int_eq(dp_trainer_load_model(&o, m, params, buffers, m->counters), 0);
    else
        for (size_t i = 0; i < n; i++)
            params[i] = (float)(world_rank * 1000 + i);
    m->counters[0] = world_rank == 0 ? 7 : 0;
    ck_assert_int_eq(dp_engine_scatter_state(e, DP_STATE_PARAMETERS, params, 0), 0);
    ck_assert_int_eq(dp_engine_scatter_state(e, DP_STATE_STATISTICS, buffers, 0), 0);
    ck_assert_int_eq(dp_engine_gather_state(e, DP_STATE_PARAMETERS, got, -1), 0);
    ck_assert_mem_eq(got, expected, n * sizeof(float));
    ck_assert_int_eq(dp_engine_gather_state(e, DP_STATE_STATISTICS, buffers, -1), 0);
    ck_assert(replicas_identical(buffers, nb));
    ck_assert_int_eq(m->counters[0], 7);
    dp_engine_close(e);
    dp_comm_free(&comm);
    dp_dataset_free(&data);
    free(params);
    free(buffers);
    free(got);
    free(expected);
}
END_TEST

START_TEST(sampler_order_is_the_same_on_every_rank)
{
    dp_sampler s;
    ck_assert_int_eq(dp_sampler_init(&s, 1000, 5), 0);
    dp_sampler_set_epoch(&s, 2);
    unsigned long hash = 1469598103934665603UL, lowest, highest;
    for (size_t i = 0; i < s.count; i++)
        hash = (hash ^ s.order[i]) * 1099511628211UL;
    MPI_Allreduce(&hash, &lowest, 1, MPI_UNSIGNED_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&hash, &highest, 1, MPI_UNSIGNED_LONG, MPI_MAX, MPI_COMM_WORLD);
    ck_assert_uint_eq(lowest, highest);
    dp_sampler_free(&s);
}
END_TEST

START_TEST(equivalence_with_even_and_uneven_slices)
{
    dp_options o;
    base_options(&o);
    for (long batch = 60; batch <= 67; batch += 7) { /* 60 splits evenly over 2, 3, 4; 67 over none */
        o.batch = batch;
        check_all_algorithms(&o, &o, 0);
    }
}
END_TEST

START_TEST(equivalence_with_accumulation_matches_one_big_batch)
{
    dp_options distributed, reference;
    base_options(&distributed);
    distributed.batch = 31;
    distributed.accum = 2;
    reference = distributed;
    reference.batch = 62;
    reference.accum = 1;
    check_all_algorithms(&distributed, &reference, 0);
}
END_TEST

START_TEST(equivalence_for_regression_and_drop_last)
{
    dp_options o;
    base_options(&o);
    o.batch = 45;
    o.lr_schedule = DP_LR_COSINE;
    check_all_algorithms(&o, &o, 1);
    o.drop_last = 1;
    o.batch = 64;
    check_all_algorithms(&o, &o, 0);
}
END_TEST

/* The version-2 modules: SyncBatchNorm, Dropout and AdamW train on W ranks exactly as on one. */
static void modules_options(dp_options *o)
{
    base_options(o);
    /* No bias before BatchNorm: its gradient is zero in exact arithmetic, and Adam would turn the
     * rounding noise in it into full-size steps that differ with the order of additions. */
    ck_assert_int_eq(dp_model_spec_parse("linear(32,bias=0),batchnorm(sync=1),relu,dropout(0.2),linear(16),relu,linear(5)",
                                         &o->model), 0);
    o->optimizer = DP_OPTIMIZER_ADAMW;
    o->lr = 3e-3f;
    o->momentum = 0.0f;
    o->weight_decay = 0.01f;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
}

START_TEST(equivalence_with_sync_batchnorm_dropout_and_adamw)
{
    dp_options o;
    modules_options(&o);
    /* 497: every other step has 3 samples, so on 4 ranks one slice is empty and still takes
     * part in SyncBatchNorm's sums (2-sample steps would test conditioning, not ranks:
     * BatchNorm over 2 samples amplifies rounding 100-fold). */
    static const long batches[] = {60, 67, 497};
    for (size_t i = 0; i < sizeof batches / sizeof *batches; i++) {
        o.batch = batches[i];
        check_all_algorithms(&o, &o, 0);
    }
    o.batch = 31; /* accumulation: the same micro-batches on one rank */
    o.accum = 2;
    check_all_algorithms(&o, &o, 0);
}
END_TEST

/* The documents' exception: plain BatchNorm normalises each rank's slice with its own
 * statistics, so W ranks do NOT equal one rank (the replicas still agree: rank 0's running
 * statistics are broadcast). */
START_TEST(plain_batchnorm_differs_from_one_rank_but_replicas_agree)
{
    if (world_size == 1)
        return;
    dp_options o, single;
    modules_options(&o);
    ck_assert_int_eq(dp_model_spec_parse("linear(32),batchnorm,relu,linear(5)", &o.model), 0);
    o.batch = 60;
    single = o;
    dp_dataset data;
    open_synthetic(&data, 0);
    size_t n = 0;
    free(initial_params(&o, &data, &n));
    float *params = train_on(&o, &data, MPI_COMM_WORLD);
    ck_assert(replicas_identical(params, n));
    if (world_rank == 0) {
        float *one = train_on(&single, &data, MPI_COMM_SELF);
        double error = dp_test_relative_error(params, one, n);
        printf("W=%d plain batchnorm: relative error vs 1 rank %.3g (expected to differ)\n", world_size, error);
        ck_assert_msg(error > 1e-4, "plain BatchNorm on %d ranks matched 1 rank (%g): per-rank statistics unused?",
                      world_size, error);
        free(one);
    }
    free(params);
    dp_dataset_free(&data);
}
END_TEST

/* Buckets reduced during backward give the same training as one all-reduce after backward
 * (--no-overlap) and as one rank: tiny buckets (262 floats: each Linear cut into several, its
 * weight gradient computed and reported in row blocks), accumulation (only the last
 * micro-batch communicates), every algorithm. */
START_TEST(overlapped_buckets_equal_no_overlap_and_one_rank)
{
    dp_options overlapped, whole;
    base_options(&overlapped);
    overlapped.batch = 31;
    overlapped.accum = 2;
    overlapped.bucket_mb = 1e-3; /* 262 floats: buckets cut the 672- and 528-float Linears */
    whole = overlapped;
    whole.no_overlap = 1;
    char names[256];
    snprintf(names, sizeof names, "%s", dp_comm_algorithm_names());
    dp_dataset data;
    open_synthetic(&data, 0);
    size_t n = 0;
    free(initial_params(&overlapped, &data, &n));
    for (char *name = strtok(names, " "); name; name = strtok(NULL, " ")) {
        strcpy(overlapped.allreduce, name);
        strcpy(whole.allreduce, name);
        float *a = train_on(&overlapped, &data, MPI_COMM_WORLD), *b = train_on(&whole, &data, MPI_COMM_WORLD);
        ck_assert(replicas_identical(a, n));
        double error = dp_test_relative_error(a, b, n);
        if (world_rank == 0)
            printf("W=%d %s: buckets during backward vs --no-overlap: relative error %.3g\n", world_size, name, error);
        ck_assert_msg(error < 1e-5, "%s: overlapped buckets differ from --no-overlap by %g", name, error);
        free(a);
        free(b);
    }
    check_all_algorithms(&overlapped, &overlapped, 0);
    dp_dataset_free(&data);
}
END_TEST

/* A CNN on images [1, 4, 5] (non-square): convolutions, SyncBatchNorm over channels, pooling
 * and flatten train on W ranks as on one, for every algorithm, even and uneven slices (497: an
 * empty slice on 4 ranks every other step) and every ZeRO stage. */
START_TEST(equivalence_for_a_cnn_with_sync_batchnorm_every_algorithm_and_zero)
{
    dp_options o;
    modules_options(&o);
    ck_assert_int_eq(dp_model_spec_parse("conv2d(4,3,padding=1,bias=0),batchnorm(sync=1),relu,maxpool(2),"
                                         "conv2d(6,2,bias=0),batchnorm(sync=1),relu,avgpool(1),flatten,linear(5)",
                                         &o.model), 0);
    sample_shape = (dp_dims){.ndim = 3, .dim = {1, 4, 5}};
    static const long batches[] = {60, 67, 497};
    for (size_t i = 0; i < sizeof batches / sizeof *batches; i++) {
        o.batch = batches[i];
        check_all_algorithms(&o, &o, 0);
    }
    o.batch = 67;
    strcpy(o.allreduce, "mpi"); /* the reference rank alone runs it too: nccl's fake spans the world only */
    for (int stage = 1; stage <= 3; stage++) {
        dp_test_strategy(&o, "zero-%d", stage);
        check_equivalence(&o, &o, 0);
    }
    sample_shape = dp_dims_features(FEATURES);
}
END_TEST

/* Conv2d under a ZeRO budget whose blocks (30 floats) are smaller than each conv's weight:
 * gathered and its gradient reduce-scattered in blocks of out-channel rows (C k k floats each),
 * the bias a unit of its own, as Linear's: stages 2 and 3 train as --zero 0 on one rank. */
START_TEST(cnn_under_a_budget_smaller_than_a_conv_trains_as_one_rank)
{
    dp_options o;
    modules_options(&o);
    ck_assert_int_eq(dp_model_spec_parse("conv2d(4,3,padding=1),relu,maxpool(2),conv2d(6,2),relu,flatten,linear(5)",
                                         &o.model), 0);
    sample_shape = (dp_dims){.ndim = 3, .dim = {1, 4, 5}};
    o.batch = 67;
    strcpy(o.allreduce, "ring");
    dp_options reference = o;
    for (int stage = 2; stage <= 3; stage++) {
        dp_test_strategy(&o, "zero-%d:live-mb=%.17g", stage, 30.0 * sizeof(float) * (stage == 3 ? 4 : 2) / (1 << 20));
        check_equivalence(&o, &reference, 0);
    }
    sample_shape = dp_dims_features(FEATURES);
}
END_TEST

/* A small ResNet on images [1, 4, 5]: a stem, an identity BasicBlock and one whose projection
 * shortcut (1x1 conv2d with stride 2 and SyncBatchNorm) halves the image, global average pooling.
 * W ranks train it as one rank for every algorithm, every ZeRO stage, under a ZeRO budget
 * (60 floats: a row of the widest conv) smaller than any block and every conv but the stem, and with buckets cut inside the blocks
 * (communication overlapping a nested model's backward) as without overlap. */
#define RESNET_SPEC                                                                                            \
    "conv2d(4,3,padding=1,bias=0),batchnorm(sync=1),relu,"                                                     \
    "residual{conv2d(4,3,padding=1,bias=0),batchnorm(sync=1),relu,conv2d(4,3,padding=1,bias=0),batchnorm(sync=1)}," \
    "residual{conv2d(6,3,stride=2,padding=1,bias=0),batchnorm(sync=1),relu,conv2d(6,3,padding=1,bias=0),"       \
    "batchnorm(sync=1)|conv2d(6,1,stride=2,bias=0),batchnorm(sync=1)},globalavgpool,flatten,linear(5)"

START_TEST(equivalence_for_a_resnet_every_algorithm_zero_budget_and_buckets)
{
    dp_options o;
    modules_options(&o);
    ck_assert_int_eq(dp_model_spec_parse(RESNET_SPEC, &o.model), 0);
    sample_shape = (dp_dims){.ndim = 3, .dim = {1, 4, 5}};
    o.batch = 67;
    check_all_algorithms(&o, &o, 0);
    dp_options reference = o;
    strcpy(o.allreduce, "ring");
    for (int stage = 1; stage <= 3; stage++) {
        dp_test_strategy(&o, "zero-%d", stage);
        check_equivalence(&o, &reference, 0);
    }
    for (int stage = 2; stage <= 3; stage++) {
        dp_test_strategy(&o, "zero-%d:live-mb=%.17g", stage, 60.0 * sizeof(float) * (stage == 3 ? 4 : 2) / (1 << 20));
        check_equivalence(&o, &reference, 0);
    }
    dp_test_strategy(&o, "ddp");
    o.bucket_mb = 1e-3; /* 262 floats: every block's gradient is cut into several buckets */
    o.accum = 2;
    reference.accum = 2;
    check_equivalence(&o, &reference, 0);
    sample_shape = dp_dims_features(FEATURES);
}
END_TEST

/* Base options at batch 67 (uneven slices for W = 2, 3, 4) on the classification data; returns
 * the parameter count. */
static size_t open_batch67_case(dp_options *o, dp_dataset *data)
{
    base_options(o);
    o->batch = 67;
    open_synthetic(data, 0);
    size_t n = 0;
    free(initial_params(o, data, &n));
    return n;
}

START_TEST(training_is_bitwise_deterministic_run_to_run)
{
    dp_options o;
    dp_dataset data;
    size_t n = open_batch67_case(&o, &data);
    float *first = train_on(&o, &data, MPI_COMM_WORLD);
    float *second = train_on(&o, &data, MPI_COMM_WORLD);
    ck_assert_mem_eq(first, second, n * sizeof(float));
    free(first);
    free(second);
    dp_dataset_free(&data);
}
END_TEST

/* --precision bf16 (GPU only: tests/fakecuda-bf16.sh, tests/gpu-train-w2.sh): GEMM inputs
 * rounded to bfloat16, the hidden layers' activations written in bf16, FP32 everywhere else. After STEPS steps its parameters stay within
 * BF16_TOLERANCE of FP32 training's (relative, over all parameters) yet differ from them (the
 * rounding happened); W ranks stay within the same tolerance of one rank at bf16, and agree
 * with each other bitwise. */
#define BF16_TOLERANCE 1e-2
START_TEST(bf16_training_stays_near_fp32_and_one_rank)
{
    if (test_device != DP_DEVICE_CUDA)
        return;
    dp_options exact, bf16;
    base_options(&exact);
    exact.batch = 60;
    bf16 = exact;
    bf16.precision = DP_PRECISION_BF16;
    dp_dataset data;
    open_synthetic(&data, 0);
    size_t n = 0;
    float *initial = initial_params(&bf16, &data, &n);
    float *params = train_on(&bf16, &data, MPI_COMM_WORLD);
    ck_assert_msg(replicas_identical(params, n), "bf16 replicas differ after %d steps", STEPS);
    if (world_rank == 0) {
        float *single = train_on(&bf16, &data, MPI_COMM_SELF), *fp32 = train_on(&exact, &data, MPI_COMM_SELF);
        double moved = dp_test_relative_error(fp32, initial, n), rounding = dp_test_relative_error(single, fp32, n),
               ranks = dp_test_relative_error(params, single, n);
        printf("W=%d bf16: relative error vs FP32 %.3g, vs 1 rank at bf16 %.3g (training moved %.3g; tolerance %g)\n",
               world_size, rounding, ranks, moved, BF16_TOLERANCE);
        ck_assert_msg(moved > 0.05, "training barely moved the parameters (%g)", moved);
        ck_assert_msg(rounding < BF16_TOLERANCE && rounding > 1e-6, "bf16 vs FP32: relative error %g", rounding);
        ck_assert_msg(ranks < BF16_TOLERANCE, "W=%d bf16 vs 1 rank: relative error %g", world_size, ranks);
        free(single);
        free(fp32);
    }
    free(initial);
    free(params);
    dp_dataset_free(&data);
}
END_TEST

/* --grad-dtype bf16: every bucket's reduction rounds to bfloat16. After STEPS steps the
 * parameters stay within GRAD_BF16_TOLERANCE of FP32 reductions' (relative, over all
 * parameters) yet differ from them, for every algorithm (on the GPU nccl too, rounding on the
 * device; tests/fakecuda-grad-dtype.sh), overlapped buckets cut inside modules, and ZeRO 1-3
 * (reduce-scatter in bf16); the replicas agree bitwise. */
#define GRAD_BF16_TOLERANCE 1e-2
static void check_grad_bf16(dp_options *o, const dp_dataset *data, size_t n)
{
    o->grad_dtype = DP_DTYPE_BF16;
    float *bf16 = train_on(o, data, MPI_COMM_WORLD);
    o->grad_dtype = DP_DTYPE_F32;
    float *fp32 = train_on(o, data, MPI_COMM_WORLD);
    ck_assert_msg(replicas_identical(bf16, n), "%s %s: bf16-gradient replicas differ", o->allreduce, o->strategy.name);
    double error = dp_test_relative_error(bf16, fp32, n);
    if (world_rank == 0)
        printf("W=%d %s %s bucket %g MiB: --grad-dtype bf16 vs fp32: relative error %.3g (tolerance %g)\n",
               world_size, o->allreduce, o->strategy.name, o->bucket_mb, error, GRAD_BF16_TOLERANCE);
    ck_assert_msg(error < GRAD_BF16_TOLERANCE && error > 1e-7, "%s %s: bf16 gradients vs fp32: relative error %g",
                  o->allreduce, o->strategy.name, error);
    free(bf16);
    free(fp32);
}

START_TEST(bf16_gradients_stay_near_fp32_every_algorithm_and_zero_stage)
{
    dp_options o;
    dp_dataset data;
    size_t n = open_batch67_case(&o, &data);
    int gpu = test_device == DP_DEVICE_CUDA;
    char names[256];
    snprintf(names, sizeof names, "%s %s", dp_comm_algorithm_names(), gpu ? dp_comm_gpu_algorithm_names() : "");
    for (char *name = strtok(names, " "); name; name = strtok(NULL, " ")) {
        strcpy(o.allreduce, name);
        check_grad_bf16(&o, &data, n);
    }
    o.bucket_mb = 1e-3; /* 262 floats: buckets cut the Linears, several in flight */
    check_grad_bf16(&o, &data, n);
    const char *zero_algorithms[] = {"ring", gpu && *dp_comm_gpu_algorithm_names() ? "nccl" : NULL};
    for (size_t a = 0; a < 2 && zero_algorithms[a]; a++) {
        strcpy(o.allreduce, zero_algorithms[a]);
        for (int stage = 1; stage <= 3; stage++) {
            dp_test_strategy(&o, "zero-%d", stage);
            check_grad_bf16(&o, &data, n);
        }
        dp_test_strategy(&o, "ddp");
    }
    dp_dataset_free(&data);
}
END_TEST

int main(int argc, char **argv)
{
    dp_test_mpi_init(&argc, &argv, &world_rank, &world_size);
    test_device = dp_test_device(world_rank);
    Suite *s = suite_create("mpi-train");
    TCase *tc = tcase_create("equivalence");
    tcase_add_test(tc, broadcast_gives_every_rank_rank0s_model);
    tcase_add_test(tc, sampler_order_is_the_same_on_every_rank);
    tcase_add_test(tc, equivalence_with_even_and_uneven_slices);
    tcase_add_test(tc, equivalence_with_accumulation_matches_one_big_batch);
    tcase_add_test(tc, equivalence_for_regression_and_drop_last);
    tcase_add_test(tc, equivalence_with_sync_batchnorm_dropout_and_adamw);
    tcase_add_test(tc, plain_batchnorm_differs_from_one_rank_but_replicas_agree);
    tcase_add_test(tc, overlapped_buckets_equal_no_overlap_and_one_rank);
    tcase_add_test(tc, equivalence_for_a_cnn_with_sync_batchnorm_every_algorithm_and_zero);
    tcase_add_test(tc, cnn_under_a_budget_smaller_than_a_conv_trains_as_one_rank);
    tcase_add_test(tc, equivalence_for_a_resnet_every_algorithm_zero_budget_and_buckets);
    tcase_add_test(tc, training_is_bitwise_deterministic_run_to_run);
    suite_add_tcase(s, tc);
    TCase *bf16 = tcase_create("bf16");
    tcase_add_test(bf16, bf16_training_stays_near_fp32_and_one_rank);
    suite_add_tcase(s, bf16);
    TCase *grad_dtype = tcase_create("grad-dtype");
    tcase_add_test(grad_dtype, bf16_gradients_stay_near_fp32_every_algorithm_and_zero_stage);
    suite_add_tcase(s, grad_dtype);
    int failed_anywhere = dp_test_run_mpi_suite(s);
    MPI_Finalize();
    return failed_anywhere ? EXIT_FAILURE : EXIT_SUCCESS;
}
