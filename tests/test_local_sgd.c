/* Multi-rank: run under mpirun (tests/local-sgd-wN.sh). Local SGD (--average-every K): with
 * K = 1 and SGD it trains as DDP (even and uneven slices, every algorithm), the replicas are
 * identical right after each averaging and differ between, a checkpoint at an averaging
 * resumes bit-exactly, and the divergence it reports matches values worked out by hand. A
 * deadlock fails through the script's timeout. */
#include "dp/error.h"
#include "dp/strategy.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STEPS = 20 };

static int world_rank, world_size;
static dp_dataset data;
/* DP_TEST_DEVICE=cuda runs the training cases on the GPU (tests/fakecuda-train-w2.sh: the
 * averaging staged through host memory, or on device memory for nccl); the CPU otherwise. */
static dp_device test_device = DP_DEVICE_CPU;

/* Plain SGD on an MLP; 500 samples make a short last batch in every epoch. */
static void base_options(dp_options *o)
{
    dp_options_defaults(o);
    o->device = test_device;
    o->share_gpu = test_device == DP_DEVICE_CUDA; /* the test's ranks may outnumber the GPUs */
    o->threads = 1;
    ck_assert_int_eq(dp_model_spec_from_layers("20,32,16,5", &o->model), 0);
    o->steps = STEPS;
    o->batch = 16 * world_size;
    o->lr = 0.1f;
    o->momentum = 0.0f;
    o->weight_decay = 0.0f;
    o->quiet = 1;
    o->seed = 99;
    snprintf(o->allreduce, sizeof o->allreduce, "ring");
}

static float *train_on(const dp_options *o)
{
    dp_train_result result;
    ck_assert_msg(dp_test_train(o, &data, MPI_COMM_WORLD, &result) == 0, "--strategy %s: %s", o->strategy.label,
                  dp_last_error());
    ck_assert_msg(dp_test_same_on_every_rank(result.params, result.nparams * sizeof(float)),
                  "%s: the replicas differ after the last step, which averages", o->strategy.label);
    return result.params;
}

/* K = 1 against DDP on all ranks. */
static void expect_ddp(const dp_options *o, const char *what)
{
    dp_options local = *o, ddp = *o;
    dp_test_strategy(&local, "local-sgd:every=1");
    dp_test_strategy(&ddp, "ddp");
    size_t n = dp_test_param_count(o, data.dim);
    float *expected = train_on(&ddp), *got = train_on(&local);
    double error = dp_test_relative_error(got, expected, n);
    if (world_rank == 0)
        printf("W=%d %s batch %ld %s: --average-every 1 vs DDP relative error %.3g\n", world_size, o->allreduce,
               o->batch, what, error);
    ck_assert_msg(error <= 1e-5, "%s, batch %ld, %s: --average-every 1 differs from DDP by %g", what, o->batch,
                  o->allreduce, error);
    free(expected);
    free(got);
}

START_TEST(k1_with_sgd_trains_as_ddp)
{
    dp_options o;
    base_options(&o);
    expect_ddp(&o, "plain SGD, even slices");
    o.batch = 16 * world_size + 1;
    char names[256];
    snprintf(names, sizeof names, "%s %s", dp_comm_algorithm_names(),
             test_device == DP_DEVICE_CUDA ? dp_comm_gpu_algorithm_names() : "");
    for (char *name = strtok(names, " "); name; name = strtok(NULL, " ")) {
        snprintf(o.allreduce, sizeof o.allreduce, "%s", name);
        expect_ddp(&o, "plain SGD, uneven slices");
    }
    /* The averaged momentum makes every SGD update linear in the gradient: still DDP. */
    o.momentum = 0.9f;
    o.weight_decay = 1e-3f;
    o.accum = 2;
    expect_ddp(&o, "momentum, weight decay, accumulation");
}
END_TEST

/* SGD with momentum, 12 steps, averaged every 4. */
static void window_options(dp_options *o)
{
    base_options(o);
    o->momentum = 0.9f;
    dp_test_strategy(o, "local-sgd:every=4");
    o->steps = 12;
}

/* dp_train with --check-replicas every `check` steps: 0 or its status. */
static int train_checked(const dp_options *o, long check)
{
    dp_options checked = *o;
    checked.check_replicas = check; /* the option parser would refuse one that is not a multiple of K */
    dp_train_result result = {0};
    int status = dp_test_train(&checked, &data, MPI_COMM_WORLD, &result);
    free(result.params);
    return status;
}

START_TEST(replicas_are_identical_after_each_averaging_and_differ_between)
{
    dp_options o;
    window_options(&o);
    ck_assert_msg(train_checked(&o, 4) == 0, "the replicas differ right after an averaging: %s", dp_last_error());
    for (long check = 1; check < 4; check++) {
        ck_assert_msg(train_checked(&o, check) == DP_ENUMERIC, "after step %ld of 4 the replicas should differ", check);
        char expected[64];
        snprintf(expected, sizeof expected, "replica check after step %ld", check);
        ck_assert_msg(strstr(dp_last_error(), expected) && strstr(dp_last_error(), "diverged"), "%s", dp_last_error());
    }
}
END_TEST

START_TEST(a_checkpoint_at_an_averaging_resumes_bit_exactly)
{
    dp_options o;
    window_options(&o);
    size_t n = dp_test_param_count(&o, data.dim);
    float *uninterrupted = train_on(&o);
    dp_options first = o, rest = o;
    first.steps = 8;
    first.checkpoint_every = 4;
    dp_test_shared_path("local-sgd-ckpt", first.checkpoint_dir, sizeof first.checkpoint_dir);
    free(train_on(&first));
    snprintf(rest.resume, sizeof rest.resume, "%s", first.checkpoint_dir);
    float *resumed = train_on(&rest);
    ck_assert_msg(memcmp(resumed, uninterrupted, n * sizeof(float)) == 0, "resumed at step 8 of 12 (K = 4) differs");
    free(resumed);
    free(uninterrupted);
}
END_TEST

/* Rank r's parameters, optimizer state and statistics in the hand-checked case (W = 2: rank 0
 * {1, 2, 3, 4}, rank 1 {3, 2, 1, 4}) and its generalisation to W ranks. */
static float value_of(int rank, int tensor, int i)
{
    static const float hand[2][4] = {{1, 2, 3, 4}, {3, 2, 1, 4}};
    float base = rank < 2 ? hand[rank][i] : (float)(i + 1) + (float)rank * (i % 2 ? 0.5f : -0.25f);
    return base * (float)(tensor + 1);
}

/* The mean weighted by samples, and max_r ||p_r - mean|| / ||mean||, in double: the reference. */
static double reference_divergence(const double *samples, double *mean)
{
    double total = 0.0, worst = 0.0, norm = 0.0;
    for (int r = 0; r < world_size; r++)
        total += samples[r];
    for (int i = 0; i < 4; i++) {
        mean[i] = 0.0;
        for (int r = 0; r < world_size; r++)
            mean[i] += samples[r] / total * value_of(r, 0, i);
        norm += mean[i] * mean[i];
    }
    for (int r = 0; r < world_size; r++) {
        double apart = 0.0;
        for (int i = 0; i < 4; i++)
            apart += (value_of(r, 0, i) - mean[i]) * (value_of(r, 0, i) - mean[i]);
        worst = sqrt(apart / norm) > worst ? sqrt(apart / norm) : worst;
    }
    return worst;
}

/* One averaging of 4 parameters, 4 optimizer-state values and 2 statistics on the strategy
 * alone; returns the divergence and checks every tensor's weighted mean. */
static double average_by_hand(const double *samples)
{
    static const size_t offsets[] = {0}, counts[] = {4};
    const dp_strategy_layout layout = {.segments = 1, .offset = offsets, .count = counts, .total = 4};
    dp_comm comm;
    ck_assert_int_eq(dp_comm_init(&comm, MPI_COMM_WORLD, "ring"), 0);
    float params[4], state[4], stats[2], grads[4] = {0};
    for (int i = 0; i < 4; i++) {
        params[i] = value_of(world_rank, 0, i);
        state[i] = value_of(world_rank, 1, i);
    }
    stats[0] = value_of(world_rank, 2, 0);
    stats[1] = value_of(world_rank, 2, 1);
    dp_strategy_buffers buffers = {.comm_grads = grads, .be = dp_backend_cpu(), .weights = params, .grads = grads};
    dp_strategy_choice choice;
    ck_assert_int_eq(dp_strategy_choose(&choice, "local-sgd", "the test"), 0);
    dp_strategy_config config = dp_strategy_default_config(&choice, 1, 0, layout.total);
    dp_strategy *d;
    ck_assert_int_eq(dp_strategy_open(&d, &comm, &layout, &buffers, &config), 0);
    const dp_replica_tensor tensors[] = {{params, 4}, {state, 4}, {stats, 2}};
    ck_assert_int_eq(dp_strategy_set_replica(d, tensors, 3), 0);
    dp_step_hooks hooks;
    dp_strategy_attach(d, &hooks);
    /* The run's last step: its after_update averages, whatever K. */
    dp_update_done done = {.steps_done = 1, .total_steps = 1, .rows = samples[world_rank]};
    dp_update_report report;
    ck_assert_msg(hooks.after_update(hooks.arg, &done, &report) == 0, "%s", dp_last_error());
    ck_assert(report.averaged);
    double divergence = report.divergence, mean[4];
    double expected = reference_divergence(samples, mean);
    ck_assert_msg(fabs(divergence - expected) <= 1e-6 * expected, "divergence %.9g, expected %.9g", divergence, expected);
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(fabs(params[i] - mean[i]) <= 1e-6 * fabs(mean[i]), "parameter %d: %g, expected %g", i,
                      (double)params[i], mean[i]);
        ck_assert_msg(fabs(state[i] - 2.0 * mean[i]) <= 1e-6 * fabs(mean[i]), "state %d: %g", i, (double)state[i]);
    }
    ck_assert_msg(fabs(stats[1] - 3.0 * mean[1]) <= 1e-6 * fabs(mean[1]), "statistic 1: %g", (double)stats[1]);
    ck_assert(dp_test_same_on_every_rank(params, sizeof params));
    dp_strategy_close(d);
    dp_comm_free(&comm);
    return divergence;
}

START_TEST(the_divergence_is_the_worked_out_value)
{
    double even[8] = {1, 1, 1, 1, 1, 1, 1, 1}, uneven[8] = {3, 1, 2, 5, 1, 4, 2, 3};
    double at_even = average_by_hand(even), at_uneven = average_by_hand(uneven);
    if (world_size == 2) {
        /* By hand: the mean {2, 2, 2, 4}, ||p_0 - mean|| = sqrt(2), ||mean|| = sqrt(28); weighted
         * 3 : 1, the mean {1.5, 2, 2.5, 4}, ||p_1 - mean|| = sqrt(4.5), ||mean|| = sqrt(28.5). */
        ck_assert_msg(fabs(at_even - sqrt(2.0 / 28.0)) < 1e-7, "even: %.9g", at_even);
        ck_assert_msg(fabs(at_even - 0.267261242) < 1e-7, "even: %.9g", at_even);
        ck_assert_msg(fabs(at_uneven - 0.397359707) < 1e-7, "3 : 1: %.9g", at_uneven);
    }
}
END_TEST

int main(int argc, char **argv)
{
    dp_test_mpi_init(&argc, &argv, &world_rank, &world_size);
    test_device = dp_test_device(world_rank);
    if (world_size > 8 || dp_dataset_open("synthetic:500,20,5", 0, 0, 7, &data)) {
        fprintf(stderr, "%s\n", world_size > 8 ? "at most 8 ranks" : dp_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    Suite *s = suite_create("local-sgd");
    TCase *tc = tcase_create("averaging");
    tcase_add_test(tc, the_divergence_is_the_worked_out_value);
    tcase_add_test(tc, k1_with_sgd_trains_as_ddp);
    tcase_add_test(tc, replicas_are_identical_after_each_averaging_and_differ_between);
    tcase_add_test(tc, a_checkpoint_at_an_averaging_resumes_bit_exactly);
    suite_add_tcase(s, tc);
    int failed_anywhere = dp_test_run_mpi_suite(s);
    dp_dataset_free(&data);
    MPI_Finalize();
    return failed_anywhere ? EXIT_FAILURE : EXIT_SUCCESS;
}
