/* Multi-rank: run under mpirun (tests/mpi-train-wN.sh). THE EQUIVALENCE TEST: W ranks train
 * exactly like one rank with the whole batch, for every all-reduce algorithm. */
#include "dp/comm.h"
#include "dp/data.h"
#include "dp/error.h"
#include "dp/mlp.h"
#include "dp/options.h"
#include "dp/sampler.h"
#include "dp/train.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SAMPLES = 500, FEATURES = 20, CLASSES = 5, STEPS = 20 };

static int world_rank, world_size;
/* DP_TEST_DEVICE=cuda runs every case on the GPU (tests/gpu-train-w2.sh); the CPU otherwise. */
static dp_device test_device = DP_DEVICE_CPU;

static void base_options(dp_options *o)
{
    dp_options_defaults(o);
    o->device = test_device;
    o->share_gpu = test_device == DP_DEVICE_CUDA; /* the test's ranks may outnumber the GPUs */
    strcpy(o->layers_spec, "20,32,16,5");
    ck_assert_int_eq(dp_mlp_parse_widths(o->layers_spec, o->widths, &o->nwidths), 0);
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
}

/* Trains with o on comm and returns the final parameters (malloc'd). */
static float *train_on(const dp_options *o, const dp_dataset *data, MPI_Comm mpi_comm)
{
    dp_comm comm;
    ck_assert_msg(dp_comm_init(&comm, mpi_comm, o->allreduce) == 0, "%s", dp_last_error());
    float *params = malloc(dp_mlp_param_count(o->widths, o->nwidths) * sizeof(float));
    dp_train_result result;
    ck_assert_msg(dp_train(o, data, NULL, &comm, params, &result) == 0, "%s", dp_last_error());
    ck_assert_int_eq(result.steps, o->steps);
    dp_comm_free(&comm);
    return params;
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
    size_t n = dp_mlp_param_count(distributed->widths, distributed->nwidths);
    float *params = train_on(distributed, &data, MPI_COMM_WORLD);
    ck_assert_msg(replicas_identical(params, n), "replicas differ after %d steps (%s)", STEPS,
                  distributed->allreduce);
    if (world_rank == 0) {
        float *initial = malloc(n * sizeof(float));
        float *single = train_on(reference, &data, MPI_COMM_SELF);
        dp_mlp_init_uniform(distributed->widths, distributed->nwidths, distributed->seed, initial);
        double moved = dp_test_relative_error(params, initial, n), error = dp_test_relative_error(params, single, n);
        printf("W=%d %s batch %ld accum %ld%s%s: relative error vs 1 rank %.3g (training moved %.3g)\n",
               world_size, distributed->allreduce, distributed->batch, distributed->accum,
               distributed->drop_last ? " drop-last" : "", regression ? " mse" : "", error, moved);
        ck_assert_msg(moved > 0.05, "training barely moved the parameters (%g)", moved);
        ck_assert_msg(error < 1e-5, "W=%d differs from 1 rank: relative error %g", world_size, error);
        free(single);
        free(initial);
    }
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

START_TEST(broadcast_gives_every_rank_rank0s_parameters)
{
    dp_options o;
    base_options(&o);
    size_t n = dp_mlp_param_count(o.widths, o.nwidths);
    float *params = malloc(n * sizeof(float)), *expected = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        params[i] = (float)(world_rank * 1000 + i); /* differs by rank until the broadcast */
    dp_comm comm;
    ck_assert_int_eq(dp_comm_init(&comm, MPI_COMM_WORLD, "mpi"), 0);
    ck_assert_int_eq(dp_train_init_params(&o, &comm, params), 0);
    dp_mlp_init_uniform(o.widths, o.nwidths, o.seed, expected);
    ck_assert_mem_eq(params, expected, n * sizeof(float));
    ck_assert(replicas_identical(params, n));
    dp_comm_free(&comm);
    free(params);
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

START_TEST(training_is_bitwise_deterministic_run_to_run)
{
    dp_options o;
    base_options(&o);
    o.batch = 67;
    dp_dataset data;
    open_synthetic(&data, 0);
    size_t n = dp_mlp_param_count(o.widths, o.nwidths);
    float *first = train_on(&o, &data, MPI_COMM_WORLD);
    float *second = train_on(&o, &data, MPI_COMM_WORLD);
    ck_assert_mem_eq(first, second, n * sizeof(float));
    free(first);
    free(second);
    dp_dataset_free(&data);
}
END_TEST

int main(int argc, char **argv)
{
    dp_test_mpi_init(&argc, &argv, &world_rank, &world_size);
    const char *device = getenv("DP_TEST_DEVICE");
    if (device && strcmp(device, "cuda") == 0) {
        test_device = DP_DEVICE_CUDA;
        if (dp_backend_gpu_count() == 0) {
            if (world_rank == 0)
                printf("DP_TEST_DEVICE=cuda: no CUDA GPU visible (or built without CUDA): skipped\n");
            MPI_Finalize();
            return 77; /* automake's SKIP */
        }
    }
    Suite *s = suite_create("mpi-train");
    TCase *tc = tcase_create("equivalence");
    tcase_add_test(tc, broadcast_gives_every_rank_rank0s_parameters);
    tcase_add_test(tc, sampler_order_is_the_same_on_every_rank);
    tcase_add_test(tc, equivalence_with_even_and_uneven_slices);
    tcase_add_test(tc, equivalence_with_accumulation_matches_one_big_batch);
    tcase_add_test(tc, equivalence_for_regression_and_drop_last);
    tcase_add_test(tc, training_is_bitwise_deterministic_run_to_run);
    suite_add_tcase(s, tc);
    int failed_anywhere = dp_test_run_mpi_suite(s);
    MPI_Finalize();
    return failed_anywhere ? EXIT_FAILURE : EXIT_SUCCESS;
}
