/* Multi-rank (run with 3 ranks by tests/reliability-w3.sh): bit-exact resume, resume on a
 * different world size, checkpoint retention and integrity, failed writes that keep the
 * previous checkpoint, replica checks and non-finite gradients. */
#include "dp/checkpoint.h"
#include "dp/comm.h"
#include "dp/data.h"
#include "dp/error.h"
#include "dp/nn.h"
#include "dp/options.h"
#include "dp/train.h"
#include "tests/testutil.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

enum { STEPS = 40 };

static int world_rank, world_size;
static dp_dataset data;

static void base_options(dp_options *o)
{
    dp_options_defaults(o);
    strcpy(o->layers_spec, "20,32,16,5");
    ck_assert_int_eq(dp_model_spec_from_layers(o->layers_spec, &o->model), 0);
    o->steps = STEPS;
    o->batch = 67;
    o->lr = 0.1f;
    o->momentum = 0.9f;
    o->weight_decay = 1e-3f;
    o->lr_schedule = DP_LR_COSINE;
    o->quiet = 1;
    o->seed = 99;
}

static size_t param_count(const dp_options *o)
{
    return dp_test_param_count(o, data.dim);
}

static int train_status(const dp_options *o, MPI_Comm mpi_comm, dp_train_result *result)
{
    return dp_test_train(o, &data, mpi_comm, result);
}

static float *train_ok(const dp_options *o, MPI_Comm mpi_comm)
{
    dp_train_result result;
    ck_assert_msg(train_status(o, mpi_comm, &result) == 0, "%s", dp_last_error());
    return result.params;
}

/* Resumes o from `from` (a checkpoint file or directory) and requires the final
 * parameters to be byte for byte the uninterrupted run's. */
static void assert_resume_is_exact(const dp_options *o, const char *from, const float *uninterrupted)
{
    dp_options resumed = *o;
    snprintf(resumed.resume, sizeof resumed.resume, "%s", from);
    float *continued = train_ok(&resumed, MPI_COMM_WORLD);
    ck_assert_mem_eq(continued, uninterrupted, param_count(o) * sizeof(float));
    free(continued);
}

/* Trains the first half with checkpoints in dir, as a run that was then stopped. */
static void train_first_half(const dp_options *full, const char *dir)
{
    dp_options half = *full;
    half.steps = STEPS / 2;
    snprintf(half.checkpoint_dir, sizeof half.checkpoint_dir, "%s", dir);
    half.checkpoint_every = 7;
    free(train_ok(&half, MPI_COMM_WORLD));
}

START_TEST(resume_from_a_mid_run_checkpoint_is_bit_exact)
{
    dp_options o;
    base_options(&o);
    char dir[512];
    dp_test_shared_path("resume-exact", dir, sizeof dir);
    float *uninterrupted = train_ok(&o, MPI_COMM_WORLD);
    dp_options checkpointed = o;
    snprintf(checkpointed.checkpoint_dir, sizeof checkpointed.checkpoint_dir, "%s", dir);
    checkpointed.checkpoint_every = STEPS / 2;
    free(train_ok(&checkpointed, MPI_COMM_WORLD)); /* as if killed just after step 20 */
    char file[600];
    snprintf(file, sizeof file, "%s/step-%09d.safetensors", dir, STEPS / 2);
    assert_resume_is_exact(&o, file, uninterrupted);
    free(uninterrupted);
}
END_TEST

/* AdamW's moments and step, BatchNorm's running statistics and counters, and dropout's masks
 * all continue exactly: the resumed run ends on the uninterrupted run's bytes. */
START_TEST(resume_with_adamw_batchnorm_and_dropout_is_bit_exact)
{
    dp_options o;
    base_options(&o);
    ck_assert_int_eq(dp_model_spec_parse("linear(32,bias=0),batchnorm,relu,dropout(0.3),linear(5)", &o.model), 0);
    o.optimizer = DP_OPTIMIZER_ADAMW;
    o.lr = 3e-3f;
    o.momentum = 0.0f;
    o.weight_decay = 0.01f;
    o.batch = 60; /* plain BatchNorm needs 2 rows per rank in every micro-batch */
    o.drop_last = 1;
    char dir[512];
    dp_test_shared_path("resume-adamw", dir, sizeof dir);
    float *uninterrupted = train_ok(&o, MPI_COMM_WORLD);
    dp_options checkpointed = o;
    snprintf(checkpointed.checkpoint_dir, sizeof checkpointed.checkpoint_dir, "%s", dir);
    checkpointed.checkpoint_every = 13;
    free(train_ok(&checkpointed, MPI_COMM_WORLD));
    char file[600];
    snprintf(file, sizeof file, "%s/step-%09d.safetensors", dir, 26);
    assert_resume_is_exact(&o, file, uninterrupted);
    free(uninterrupted);
}
END_TEST

START_TEST(resume_after_a_shorter_run_matches_the_long_run)
{
    dp_options o;
    base_options(&o);
    o.lr_schedule = DP_LR_CONSTANT; /* a 20-step run's cosine would end at lr 0 */
    char dir[512];
    dp_test_shared_path("resume-half", dir, sizeof dir);
    float *uninterrupted = train_ok(&o, MPI_COMM_WORLD);
    train_first_half(&o, dir);
    assert_resume_is_exact(&o, dir, uninterrupted); /* the newest in the directory */
    free(uninterrupted);
}
END_TEST

START_TEST(resume_on_fewer_ranks_matches_to_rounding)
{
    dp_options o;
    base_options(&o);
    o.lr_schedule = DP_LR_CONSTANT;
    char dir[512];
    dp_test_shared_path("resume-fewer", dir, sizeof dir);
    float *uninterrupted = train_ok(&o, MPI_COMM_WORLD);
    train_first_half(&o, dir);
    MPI_Comm smaller;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank < world_size - 1 ? 0 : MPI_UNDEFINED, world_rank, &smaller);
    if (smaller != MPI_COMM_NULL) {
        dp_options resumed = o;
        snprintf(resumed.resume, sizeof resumed.resume, "%s", dir);
        float *continued = train_ok(&resumed, smaller);
        double error = dp_test_relative_error(continued, uninterrupted, param_count(&o));
        ck_assert_msg(error < 1e-5, "resumed on %d ranks: relative error %g", world_size - 1, error);
        free(continued);
        MPI_Comm_free(&smaller);
    }
    free(uninterrupted);
}
END_TEST

START_TEST(only_the_newest_checkpoints_are_kept_and_no_temporaries)
{
    dp_options o;
    base_options(&o);
    char dir[512];
    dp_test_shared_path("keep", dir, sizeof dir);
    snprintf(o.checkpoint_dir, sizeof o.checkpoint_dir, "%s", dir);
    o.checkpoint_every = 5;
    o.keep = 2;
    free(train_ok(&o, MPI_COMM_WORLD));
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank == 0) {
        ck_assert_int_eq(dp_test_count_entries(dir, ".safetensors"), 2);
        ck_assert_int_eq(dp_test_count_entries(dir, ".tmp."), 0);
        char newest[1024], skipped[1024];
        ck_assert_int_eq(dp_checkpoint_find(dir, newest, sizeof newest, skipped, sizeof skipped), 0);
        ck_assert_ptr_nonnull(strstr(newest, "step-000000040.safetensors"));
    }
}
END_TEST

/* Rank 0 alone from here: these runs fail on purpose, and a failing multi-rank run would
 * leave the other ranks waiting for the watchdog. */
static void single_rank_checkpoint(const char *dir, long steps)
{
    dp_options o;
    base_options(&o);
    o.steps = steps;
    snprintf(o.checkpoint_dir, sizeof o.checkpoint_dir, "%s", dir);
    free(train_ok(&o, MPI_COMM_SELF));
}

START_TEST(incompatible_or_corrupt_checkpoints_are_refused)
{
    if (world_rank != 0)
        return;
    char *dir = dp_test_path("refuse");
    single_rank_checkpoint(dir, 10);
    dp_options other;
    base_options(&other);
    strcpy(other.layers_spec, "20,30,5");
    ck_assert_int_eq(dp_model_spec_from_layers(other.layers_spec, &other.model), 0);
    snprintf(other.resume, sizeof other.resume, "%s", dir);
    dp_train_result result;
    ck_assert_int_lt(train_status(&other, MPI_COMM_SELF, &result), 0);
    ck_assert_msg(strstr(dp_last_error(), "model=layers 20: linear(out=32,bias=1),relu,linear(out=16,bias=1),relu,"
                                          "linear(out=5,bias=1) but this run has model=layers 20: linear(out=30,bias=1)"),
                  "%s", dp_last_error());

    char path[1024], skipped[1024];
    ck_assert_int_eq(dp_checkpoint_find(dir, path, sizeof path, skipped, sizeof skipped), 0);
    FILE *f = fopen(path, "r+b");
    ck_assert_int_eq(fseek(f, -3, SEEK_END), 0);
    ck_assert_int_ne(fputc(0x5a, f), EOF); /* one flipped byte in the data */
    fclose(f);
    dp_options same;
    base_options(&same);
    snprintf(same.resume, sizeof same.resume, "%s", path);
    ck_assert_int_eq(train_status(&same, MPI_COMM_SELF, &result), DP_EFORMAT);
    ck_assert_msg(strstr(dp_last_error(), "checksum mismatch"), "%s", dp_last_error());
    free(dir);
}
END_TEST

START_TEST(a_failed_checkpoint_write_keeps_the_previous_one)
{
    if (world_rank != 0)
        return;
    char *dir = dp_test_path("disk-full");
    single_rank_checkpoint(dir, 10);
    /* A file-size limit makes the next write fail as a full disk would. */
    struct rlimit saved, tiny = {4096, 4096};
    getrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, SIG_IGN);
    tiny.rlim_max = saved.rlim_max;
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &tiny), 0);
    dp_options o;
    base_options(&o);
    o.steps = 20;
    snprintf(o.checkpoint_dir, sizeof o.checkpoint_dir, "%s", dir);
    snprintf(o.resume, sizeof o.resume, "%s", dir);
    dp_train_result result;
    int status = train_status(&o, MPI_COMM_SELF, &result);
    setrlimit(RLIMIT_FSIZE, &saved);
    ck_assert_int_eq(status, DP_EIO);
    ck_assert_msg(strstr(dp_last_error(), dir), "%s", dp_last_error());
    ck_assert_int_eq(dp_test_count_entries(dir, ".tmp."), 0);
    ck_assert_int_eq(dp_test_count_entries(dir, "step-000000020"), 0);
    char path[1024], skipped[1024];
    ck_assert_int_eq(dp_checkpoint_find(dir, path, sizeof path, skipped, sizeof skipped), 0);
    ck_assert_ptr_nonnull(strstr(path, "step-000000010.safetensors"));
    o.checkpoint_dir[0] = '\0';
    ck_assert_msg(train_status(&o, MPI_COMM_SELF, &result) == 0, "%s", dp_last_error());
    ck_assert_int_eq(result.steps, 10); /* the intact checkpoint resumed */
    free(result.params);
    free(dir);
}
END_TEST

START_TEST(replica_check_names_the_diverged_rank)
{
    dp_options o;
    base_options(&o);
    o.check_replicas = 5;
    o.corrupt_rank = world_size - 1;
    o.corrupt_step = 7;
    dp_train_result result;
    ck_assert_int_eq(train_status(&o, MPI_COMM_WORLD, &result), DP_ENUMERIC);
    char expected[128];
    snprintf(expected, sizeof expected, "after step 10: the model state of rank(s) %d differs", world_size - 1);
    ck_assert_msg(strstr(dp_last_error(), expected), "%s", dp_last_error());
}
END_TEST

START_TEST(replica_check_passes_when_replicas_agree)
{
    dp_options o;
    base_options(&o);
    o.check_replicas = 3;
    free(train_ok(&o, MPI_COMM_WORLD));
}
END_TEST

/* The synthetic data with one NaN input: every step that draws sample 3 has a NaN gradient. */
static void poison_sample_3(dp_dataset *poisoned)
{
    *poisoned = data;
    size_t bytes = data.count * (size_t)data.dim * sizeof(float);
    poisoned->features = malloc(bytes);
    memcpy(poisoned->features, data.features, bytes);
    poisoned->features[3 * (size_t)data.dim] = NAN;
}

START_TEST(non_finite_gradients_stop_the_job_naming_the_step_and_layer)
{
    dp_options o;
    base_options(&o);
    dp_dataset poisoned;
    poison_sample_3(&poisoned);
    dp_comm comm;
    ck_assert_int_eq(dp_comm_init(&comm, MPI_COMM_WORLD, "mpi"), 0);
    dp_train_result result;
    ck_assert_int_eq(dp_train(&o, &poisoned, NULL, &comm, &result, 0), DP_ENUMERIC);
    ck_assert_msg(strstr(dp_last_error(), "non-finite gradient values, the first in layers.0.weight"),
                  "%s", dp_last_error());
    ck_assert_msg(strstr(dp_last_error(), "step "), "%s", dp_last_error());
    o.skip_nonfinite = 1;
    ck_assert_msg(dp_train(&o, &poisoned, NULL, &comm, &result, 1) == 0, "%s", dp_last_error());
    /* 500 samples, 8 steps per epoch, 40 steps: 5 epochs, one poisoned step each. */
    ck_assert_int_eq(result.skipped_steps, 5);
    for (size_t i = 0; i < param_count(&o); i++)
        ck_assert(isfinite(result.params[i]));
    free(result.params);
    free(poisoned.features);
    dp_comm_free(&comm);
}
END_TEST

int main(int argc, char **argv)
{
    dp_test_mpi_init(&argc, &argv, &world_rank, &world_size);
    if (dp_dataset_open("synthetic:500,20,5", 0, 0, 7, &data)) {
        fprintf(stderr, "%s\n", dp_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    Suite *s = suite_create("reliability");
    TCase *tc = tcase_create("checkpoints and checks");
    tcase_add_test(tc, resume_from_a_mid_run_checkpoint_is_bit_exact);
    tcase_add_test(tc, resume_with_adamw_batchnorm_and_dropout_is_bit_exact);
    tcase_add_test(tc, resume_after_a_shorter_run_matches_the_long_run);
    tcase_add_test(tc, resume_on_fewer_ranks_matches_to_rounding);
    tcase_add_test(tc, only_the_newest_checkpoints_are_kept_and_no_temporaries);
    tcase_add_test(tc, incompatible_or_corrupt_checkpoints_are_refused);
    tcase_add_test(tc, a_failed_checkpoint_write_keeps_the_previous_one);
    tcase_add_test(tc, replica_check_names_the_diverged_rank);
    tcase_add_test(tc, replica_check_passes_when_replicas_agree);
    tcase_add_test(tc, non_finite_gradients_stop_the_job_naming_the_step_and_layer);
    suite_add_tcase(s, tc);
    int failed_anywhere = dp_test_run_mpi_suite(s);
    dp_dataset_free(&data);
    MPI_Finalize();
    return failed_anywhere ? EXIT_FAILURE : EXIT_SUCCESS;
}
