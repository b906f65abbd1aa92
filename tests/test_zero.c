/* Multi-rank (tests/zero-w{2,3,4}.sh): the ZeRO stages against DDP and one rank. Every stage
 * trains as --zero 0 and as one rank does (SGD with momentum and AdamW, uneven slices,
 * accumulation, a layer with fewer elements than ranks), replicas bitwise identical; with the
 * ring every stage is bitwise ring DDP; checkpoints move between stages and world sizes,
 * whole or sharded; the replica and non-finite checks work in every stage. */
#include "dp/checkpoint.h"
#include "dp/comm.h"
#include "dp/data.h"
#include "dp/error.h"
#include "dp/nn.h"
#include "dp/options.h"
#include "dp/train.h"
#include "tests/blas_probe.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STEPS = 20, HALF = STEPS / 2 };

static int world_rank, world_size;
static dp_dataset data;
/* DP_TEST_DEVICE=cuda runs the cases on the GPU backend (tests/fakecuda-train-w2.sh: the fake
 * CUDA runtime), where gradients are staged through host memory or, with nccl, stay there. */
static dp_device test_device = DP_DEVICE_CPU;

/* An MLP; a model whose middle layer has 2 parameters (fewer than the ranks); SyncBatchNorm
 * (its parameters gathered too) and dropout. */
static const char *const models[] = {"layers:20,32,16,5", "linear(2),relu,linear(1,bias=0),linear(5)",
                                     "linear(16,bias=0),batchnorm(sync=1),relu,dropout(0.2),linear(5)"};
enum { MODELS = sizeof models / sizeof *models };

static void base_options(dp_options *o, dp_optimizer_kind optimizer, const char *model)
{
    dp_options_defaults(o);
    o->device = test_device;
    o->share_gpu = test_device == DP_DEVICE_CUDA;
    if (strncmp(model, "layers:", 7) == 0)
        ck_assert_int_eq(dp_model_spec_from_layers(model + 7, &o->model), 0);
    else
        ck_assert_int_eq(dp_model_spec_parse(model, &o->model), 0);
    o->steps = STEPS;
    o->batch = 67; /* uneven over 2, 3 and 4 ranks */
    o->quiet = 1;
    o->seed = 4321;
    o->optimizer = optimizer;
    o->lr = optimizer == DP_OPTIMIZER_SGD ? 0.1f : 3e-3f;
    o->momentum = optimizer == DP_OPTIMIZER_SGD ? 0.9f : 0.0f;
    o->weight_decay = optimizer == DP_OPTIMIZER_SGD ? 1e-3f : 0.01f;
    o->bucket_mb = 1e-3; /* 262 floats: several in flight (cutting modules under DDP and stage 1) */
}

/* o trains under --zero stage (0: DDP). */
static void set_stage(dp_options *o, int stage)
{
    dp_test_strategy(o, "%s", dp_strategy_name_for_zero(stage));
}

/* o trains under --zero stage with a budget of live_mb MiB (0: unlimited). */
static void set_budget(dp_options *o, int stage, double live_mb)
{
    if (live_mb > 0.0)
        dp_test_strategy(o, "zero-%d:live-mb=%.17g", stage, live_mb);
    else
        dp_test_strategy(o, "zero-%d:live-mb=unlimited", stage);
}

static size_t param_count(const dp_options *o)
{
    return dp_test_param_count(o, data.dim);
}

/* The initial parameters of o's model (malloc'd). */
static float *initial_params(const dp_options *o)
{
    dp_model m;
    ck_assert_int_eq(dp_model_create(&m, dp_backend_cpu(), &o->model, data.dim, 1), 0);
    size_t n = dp_params_floats(&m.params);
    float *params = malloc(n * sizeof(float)), *buffers = malloc((dp_params_floats(&m.buffers) + 1) * sizeof(float));
    dp_model_init(&m, o->seed, params, buffers, m.counters);
    free(buffers);
    dp_model_free(&m);
    return params;
}

static int train_status(const dp_options *o, MPI_Comm mpi_comm, dp_train_result *result)
{
    return dp_test_train(o, &data, mpi_comm, result);
}

/* Trains o on mpi_comm; every rank gets the whole final parameters (malloc'd). */
static float *train_on(const dp_options *o, MPI_Comm mpi_comm)
{
    dp_train_result result;
    ck_assert_msg(train_status(o, mpi_comm, &result) == 0, "--strategy %s: %s", o->strategy.name, dp_last_error());
    return result.params;
}

static void expect_close(const char *what, const float *got, const float *reference, size_t n)
{
    double error = dp_test_relative_error(got, reference, n);
    ck_assert_msg(error <= 1e-5, "%s: relative error %g", what, error);
}

/* z trained on all ranks: replicas identical, close to --zero 0 (ddp) and to one rank (single,
 * rank 0's). */
static void expect_trains_as(const dp_options *z, const char *label, const float *ddp, const float *single, size_t n)
{
    float *params = train_on(z, MPI_COMM_WORLD);
    ck_assert_msg(dp_test_same_on_every_rank(params, n * sizeof(float)), "%s: replicas differ", label);
    expect_close(label, params, ddp, n);
    if (world_rank == 0) {
        expect_close(label, params, single, n);
        printf("%s: relative error vs 1 rank %.3g, vs --zero 0 %.3g\n", label, dp_test_relative_error(params, single, n),
               dp_test_relative_error(params, ddp, n));
    }
    free(params);
}

/* Every stage on all ranks against --zero 0 on all ranks and against one rank. */
static void check_stages(const dp_options *o, const char *what)
{
    size_t n = param_count(o);
    float *single = NULL;
    if (world_rank == 0)
        single = train_on(o, MPI_COMM_SELF);
    float *ddp = train_on(o, MPI_COMM_WORLD), *initial = initial_params(o);
    double moved = dp_test_relative_error(ddp, initial, n);
    ck_assert_msg(moved > 0.05, "%s: training barely moved the parameters (%g)", what, moved);
    free(initial);
    for (int stage = 1; stage < 4; stage++) {
        dp_options z = *o;
        set_stage(&z, stage);
        char label[256];
        snprintf(label, sizeof label, "W=%d --zero %d %s (%s, batch %ld x %ld)", world_size, stage, what,
                 o->allreduce, o->batch, o->accum);
        expect_trains_as(&z, label, ddp, single, n);
    }
    free(ddp);
    free(single);
}

START_TEST(every_stage_trains_as_ddp_and_as_one_rank)
{
    static const dp_optimizer_kind optimizers[] = {DP_OPTIMIZER_SGD, DP_OPTIMIZER_ADAMW};
    for (int k = 0; k < 2; k++)
        for (int m = 0; m < MODELS; m++) {
            dp_options o;
            base_options(&o, optimizers[k], models[m]);
            char what[192];
            snprintf(what, sizeof what, "%s %s", k ? "adamw" : "sgd", models[m]);
            check_stages(&o, what);
            o.batch = 31; /* accumulation: stages 2 and 3 reduce every micro-batch */
            o.accum = 2;
            strcpy(o.allreduce, "ring");
            check_stages(&o, what);
            if (test_device == DP_DEVICE_CUDA && *dp_comm_gpu_algorithm_names()) {
                strcpy(o.allreduce, dp_comm_gpu_algorithm_names()); /* on GPU memory, not staged */
                check_stages(&o, what);
            }
        }
}
END_TEST

/* The ring's all-reduce is its reduce-scatter then its all-gather, element by element in the
 * same order whichever bucket carries it: every stage's gradients and so its parameters are
 * ring DDP's bit for bit (without accumulation: stages 2 and 3 add reduced micro-batches). */
START_TEST(with_the_ring_every_stage_is_bitwise_ring_ddp)
{
    static const dp_optimizer_kind optimizers[] = {DP_OPTIMIZER_SGD, DP_OPTIMIZER_ADAMW};
    for (int k = 0; k < 2; k++)
        for (int overlap = 0; overlap < 2; overlap++) {
            dp_options o;
            base_options(&o, optimizers[k], models[0]);
            strcpy(o.allreduce, "ring");
            o.no_overlap = !overlap;
            size_t n = param_count(&o);
            float *ddp = train_on(&o, MPI_COMM_WORLD);
            for (int stage = 1; stage < 4; stage++) {
                dp_options z = o;
                set_stage(&z, stage);
                float *params = train_on(&z, MPI_COMM_WORLD);
                ck_assert_msg(memcmp(params, ddp, n * sizeof(float)) == 0, "ring --zero %d (%s%s) differs from ring DDP",
                              stage, k ? "adamw" : "sgd", overlap ? "" : ", --no-overlap");
                free(params);
            }
            free(ddp);
        }
}
END_TEST

/* --zero-live-mb giving blocks of `floats` floats to stage's working buffers (with overlap two
 * gradient slots, and in stage 3 two gathers; one of each without). */
static double live_mb_for_blocks(const dp_options *o, int stage, size_t floats)
{
    return (double)floats * sizeof(float) * (stage == 3 ? 2 : 1) * (o->no_overlap ? 1 : 2) / (1 << 20);
}

/* Budgets with blocks under one layer (its weight gathered and its gradient reduced in row
 * blocks, the bias on its own, and in stage 3 gathered in blocks of columns for backward),
 * equal to the first layer, and unlimited: stages 2 and 3 train as --zero 0 and as one rank,
 * with accumulation, with and without overlap (prefetching the next block or not). */
START_TEST(every_budget_trains_as_ddp_and_as_one_rank)
{
    static const struct {
        int model;
        size_t first_layer, smaller;
    } cases[] = {{0, 20 * 32 + 32, 150}, {2, 20 * 16, 100}};
    static const struct {
        int accum, overlap;
    } runs[] = {{1, 1}, {2, 1}, {2, 0}};
    for (int c = 0; c < 2; c++)
        for (int r = 0; r < 3; r++) {
            dp_options o;
            int accum = runs[r].accum;
            base_options(&o, DP_OPTIMIZER_ADAMW, models[cases[c].model]);
            o.accum = accum;
            o.no_overlap = !runs[r].overlap;
            o.batch = accum == 1 ? 67 : 31;
            size_t n = param_count(&o);
            float *single = NULL;
            if (world_rank == 0)
                single = train_on(&o, MPI_COMM_SELF);
            float *ddp = train_on(&o, MPI_COMM_WORLD);
            size_t blocks[] = {cases[c].smaller, cases[c].first_layer, 0};
            for (int stage = 2; stage < 4; stage++)
                for (int b = 0; b < 3; b++) {
                    dp_options z = o;
                    set_stage(&z, stage);
                    double live_mb = live_mb_for_blocks(&z, stage, blocks[b]);
                    set_budget(&z, stage, live_mb);
                    char label[256];
                    snprintf(label, sizeof label,
                             "W=%d --zero %d --zero-live-mb %g (blocks of %zu floats) %s, accum %d%s", world_size,
                             stage, live_mb, blocks[b], models[cases[c].model], accum,
                             o.no_overlap ? ", --no-overlap" : "");
                    expect_trains_as(&z, label, ddp, single, n);
                }
            free(ddp);
            free(single);
        }
}
END_TEST

/* Stage 2 reduce-scatters its buckets over the parent buffer's partition, so a block of rows
 * is summed in the ring order of the whole layer's elements. Stage 3 also computes a cut
 * layer's forward in blocks of its weight's rows (each output's sum over the inputs whole) and
 * its input gradient in blocks of columns (each sum over the outputs whole): on the CPU every
 * budget, even blocks smaller than a layer, is ring DDP bit for bit, with and without overlap,
 * where the BLAS gives an element the same bits whatever the block of the product it is
 * computed in (OpenBLAS's SkylakeX and Cooperlake kernels at these shapes; not its Haswell and
 * Zen ones, docs/RELIABILITY.md). The test asks the BLAS (tests/blas_probe.c, at every layer's
 * shape and each rank's rows) and asserts bitwise where it says yes, DDP's 1e-5 otherwise, and
 * says which. Whole-layer budgets cut nothing: they are bitwise on any BLAS. On a GPU (cuBLAS
 * picks kernels by shape and alignment) only those are run here, and smaller blocks train as DDP
 * within every_budget_trains_as_ddp_and_as_one_rank's tolerance. */
static int blas_keeps_cut_bits(const dp_options *o, char *why, size_t size)
{
    static const int widths[] = {20, 32, 16, 5}; /* models[0]'s layers */
    int keeps = 1;
    for (int rank = 0; keeps && rank < world_size; rank++) {
        int rows = (int)dp_range_size(dp_partition((size_t)o->batch, world_size, rank));
        for (size_t l = 0; keeps && l + 1 < sizeof widths / sizeof *widths; l++)
            keeps = dp_blas_probe_cuts(dp_backend_cpu(), rows, widths[l], widths[l + 1], why, size);
    }
    return keeps;
}

START_TEST(with_the_ring_budgets_are_bitwise_ring_ddp)
{
    for (int overlap = 0; overlap < 2; overlap++) {
        dp_options o;
        base_options(&o, DP_OPTIMIZER_ADAMW, models[0]);
        strcpy(o.allreduce, "ring");
        o.threads = 1;
        o.no_overlap = !overlap;
        size_t n = param_count(&o);
        char why[256];
        int bitwise_cuts = test_device == DP_DEVICE_CPU && blas_keeps_cut_bits(&o, why, sizeof why);
        if (world_rank == 0 && overlap == 0)
            printf("ring DDP under ZeRO budgets smaller than a layer: %s here (%s)\n",
                   bitwise_cuts ? "asserting bitwise" : "asserting within 1e-5", why);
        float *ddp = train_on(&o, MPI_COMM_WORLD);
        size_t blocks[] = {150, 20 * 32 + 32, 0}; /* under one layer, the first layer, unlimited */
        for (int stage = 2; stage < 4; stage++)
            for (int b = test_device == DP_DEVICE_CUDA; b < 3; b++) {
                dp_options z = o;
                set_stage(&z, stage);
                double live_mb = live_mb_for_blocks(&z, stage, blocks[b]);
                set_budget(&z, stage, live_mb);
                float *params = train_on(&z, MPI_COMM_WORLD);
                if (b > 0 || bitwise_cuts)
                    ck_assert_msg(memcmp(params, ddp, n * sizeof(float)) == 0, "ring --zero %d --zero-live-mb %g%s "
                                  "differs from ring DDP", stage, live_mb, overlap ? "" : " --no-overlap");
                else
                    ck_assert_msg(dp_test_relative_error(params, ddp, n) < 1e-5, "ring --zero %d --zero-live-mb %g%s "
                                  "is %g from ring DDP", stage, live_mb, overlap ? "" : " --no-overlap",
                                  dp_test_relative_error(params, ddp, n));
                free(params);
            }
        free(ddp);
    }
}
END_TEST

/* Trains the first HALF steps of o, checkpointing into dir at the end. */
static void train_first_half(const dp_options *o, const char *dir, int shards)
{
    dp_options half = *o;
    half.steps = HALF;
    half.checkpoint_shards = shards;
    snprintf(half.checkpoint_dir, sizeof half.checkpoint_dir, "%s", dir);
    free(train_on(&half, MPI_COMM_WORLD));
}

/* Continues o (stage `stage`) from dir on comm (NULL: this rank is not in it). */
static float *resume_on(const dp_options *o, int stage, const char *dir, MPI_Comm comm)
{
    dp_options resumed = *o;
    set_stage(&resumed, stage);
    snprintf(resumed.resume, sizeof resumed.resume, "%s", dir);
    return comm == MPI_COMM_NULL ? NULL : train_on(&resumed, comm);
}

START_TEST(checkpoints_resume_into_any_stage_and_world_size)
{
    dp_options o;
    base_options(&o, DP_OPTIMIZER_ADAMW, models[0]);
    size_t n = param_count(&o);
    MPI_Comm fewer;
    MPI_Comm_split(MPI_COMM_WORLD, world_size == 1 || world_rank < world_size - 1 ? 0 : MPI_UNDEFINED, world_rank,
                   &fewer);
    for (int shards = 0; shards < 2; shards++)
        for (int written = 1; written < 4; written += 2) {
            dp_options w = o;
            set_stage(&w, written);
            char dir[512], name[64];
            snprintf(name, sizeof name, "ckpt-%d-%d", shards, written);
            dp_test_shared_path(name, dir, sizeof dir);
            float *uninterrupted = train_on(&w, MPI_COMM_WORLD);
            train_first_half(&w, dir, shards);
            /* The same stage and world: bit-exact. */
            float *same = resume_on(&w, written, dir, MPI_COMM_WORLD);
            ck_assert_msg(memcmp(same, uninterrupted, n * sizeof(float)) == 0,
                          "--zero %d%s resumed on the same stage and world differs", written, shards ? " (shards)" : "");
            free(same);
            /* Other stages, and one rank fewer: to rounding. */
            for (int stage = 0; stage < 4; stage++) {
                float *moved = resume_on(&w, stage, dir, stage % 2 ? fewer : MPI_COMM_WORLD);
                char label[128];
                snprintf(label, sizeof label, "--zero %d%s resumed as --zero %d on %d ranks", written,
                         shards ? " (shards)" : "", stage, stage % 2 && world_size > 1 ? world_size - 1 : world_size);
                if (moved)
                    expect_close(label, moved, uninterrupted, n);
                free(moved);
            }
            free(uninterrupted);
        }
    if (fewer != MPI_COMM_NULL)
        MPI_Comm_free(&fewer);
}
END_TEST

/* The data section of a safetensors file (after its 8-byte length and header), malloc'd. */
static unsigned char *data_section(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s", path);
    unsigned char length[8];
    ck_assert_int_eq(fread(length, 1, 8, f), 8);
    uint64_t header = 0;
    for (int i = 7; i >= 0; i--)
        header = header << 8 | length[i];
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f) - 8 - (size_t)header;
    fseek(f, (long)(8 + header), SEEK_SET);
    unsigned char *bytes = malloc(*size);
    ck_assert_uint_eq(fread(bytes, 1, *size, f), *size);
    fclose(f);
    return bytes;
}

/* A ZeRO run's checkpoint is DDP's file: the same tensors, gathered, byte for byte (ring). */
START_TEST(a_zero_checkpoint_holds_ddp_s_tensors)
{
    dp_options o;
    base_options(&o, DP_OPTIMIZER_ADAMW, models[0]);
    strcpy(o.allreduce, "ring");
    char dirs[2][512], path[2][600];
    for (int i = 0; i < 2; i++) {
        dp_options w = o;
        set_stage(&w, i ? 3 : 0);
        char name[32];
        snprintf(name, sizeof name, "same-file-%d", i);
        dp_test_shared_path(name, dirs[i], sizeof dirs[i]);
        train_first_half(&w, dirs[i], 0);
        snprintf(path[i], sizeof path[i], "%s/step-%09d.safetensors", dirs[i], HALF);
    }
    if (world_rank == 0) {
        size_t sizes[2];
        unsigned char *a = data_section(path[0], &sizes[0]), *b = data_section(path[1], &sizes[1]);
        ck_assert_uint_eq(sizes[0], sizes[1]);
        ck_assert_msg(memcmp(a, b, sizes[0]) == 0, "--zero 3's checkpoint tensors differ from DDP's");
        free(a);
        free(b);
    }
}
END_TEST

START_TEST(replica_checks_catch_a_flipped_bit_in_every_stage)
{
    if (world_size == 1)
        return;
    for (int stage = 1; stage < 4; stage++) {
        dp_options o;
        base_options(&o, DP_OPTIMIZER_SGD, models[0]);
        set_stage(&o, stage);
        o.check_replicas = 7;
        o.corrupt_rank = world_size - 1;
        o.corrupt_step = 7;
        dp_train_result result;
        ck_assert_int_eq(train_status(&o, MPI_COMM_WORLD, &result), DP_ENUMERIC);
        char expected[128];
        snprintf(expected, sizeof expected, stage < 3 ? "the model state of rank(s) %d differs"
                                                      : "the parameters rank(s) %d gathered differ", world_size - 1);
        ck_assert_msg(strstr(dp_last_error(), expected), "--zero %d: %s", stage, dp_last_error());
        o.corrupt_rank = -1; /* and none without the flip */
        free(train_on(&o, MPI_COMM_WORLD));
    }
}
END_TEST

START_TEST(non_finite_gradients_are_caught_in_every_stage)
{
    dp_dataset poisoned = data;
    size_t bytes = data.count * (size_t)data.dim * sizeof(float);
    poisoned.features = malloc(bytes);
    memcpy(poisoned.features, data.features, bytes);
    poisoned.features[3 * (size_t)data.dim] = NAN; /* every step that draws sample 3 */
    for (int stage = 1; stage < 4; stage++) {
        dp_options o;
        base_options(&o, DP_OPTIMIZER_SGD, models[0]);
        set_stage(&o, stage);
        o.steps = 16; /* 2 epochs of 8 steps: one poisoned step each */
        dp_comm comm;
        ck_assert_int_eq(dp_comm_init(&comm, MPI_COMM_WORLD, "mpi"), 0);
        dp_train_result result;
        ck_assert_int_eq(dp_train(&o, &poisoned, NULL, &comm, &result, 0), DP_ENUMERIC);
        ck_assert_msg(strstr(dp_last_error(), "non-finite gradient values, the first in layers.0.weight"),
                      "--zero %d: %s", stage, dp_last_error());
        o.skip_nonfinite = 1;
        ck_assert_msg(dp_train(&o, &poisoned, NULL, &comm, &result, 1) == 0, "%s", dp_last_error());
        ck_assert_int_eq(result.skipped_steps, 2);
        for (size_t i = 0; i < param_count(&o); i++)
            ck_assert(isfinite(result.params[i]));
        free(result.params);
        dp_comm_free(&comm);
    }
    free(poisoned.features);
}
END_TEST

int main(int argc, char **argv)
{
    dp_test_mpi_init(&argc, &argv, &world_rank, &world_size);
    test_device = dp_test_device(world_rank);
    if (dp_dataset_open("synthetic:500,20,5", 0, 0, 7, &data)) {
        fprintf(stderr, "%s\n", dp_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    Suite *s = suite_create("zero");
    TCase *tc = tcase_create("stages");
    tcase_add_test(tc, every_stage_trains_as_ddp_and_as_one_rank);
    tcase_add_test(tc, with_the_ring_every_stage_is_bitwise_ring_ddp);
    tcase_add_test(tc, every_budget_trains_as_ddp_and_as_one_rank);
    tcase_add_test(tc, with_the_ring_budgets_are_bitwise_ring_ddp);
    tcase_add_test(tc, checkpoints_resume_into_any_stage_and_world_size);
    tcase_add_test(tc, a_zero_checkpoint_holds_ddp_s_tensors);
    tcase_add_test(tc, replica_checks_catch_a_flipped_bit_in_every_stage);
    tcase_add_test(tc, non_finite_gradients_are_caught_in_every_stage);
    suite_add_tcase(s, tc);
    int failed_anywhere = dp_test_run_mpi_suite(s);
    dp_dataset_free(&data);
    MPI_Finalize();
    return failed_anywhere ? EXIT_FAILURE : EXIT_SUCCESS;
}
