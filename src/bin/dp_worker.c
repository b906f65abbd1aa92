/* dp_worker: one MPI rank of a data-parallel training job (see --help). */
#include "dp/auto_table.h"
#include "dp/backend.h"
#include "dp/blas.h"
#include "dp/comm.h"
#include "dp/data.h"
#include "dp/error.h"
#include "dp/launch_env.h"
#include "dp/options.h"
#include "dp/strategy.h"
#include "dp/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { EXIT_RUN_FAILED = 1, EXIT_USAGE = 2 };

/* How long ranks other than 0 give rank 0's MPI_Abort to end the job before reporting. */
#define ALIKE_GRACE_SECONDS 3

/* Reports this rank's error and ends the whole job, so no rank waits in a collective. When
 * every rank fails alike, rank 0's report ends the job while the others wait: one message,
 * not W (W long ones at once overflow Open MPI's help aggregation). A rank failing alone
 * reports after the grace. */
static void abort_job(int rank, int exit_code)
{
    if (rank != 0)
        nanosleep(&(struct timespec){.tv_sec = ALIKE_GRACE_SECONDS}, NULL);
    fprintf(stderr, "dp_worker: rank %d: error: %s\n", rank, dp_last_error());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    exit(exit_code);
}

static int world_rank;

/* The device backend's operations cannot return errors: a failed CUDA or cuBLAS call ends here. */
static void abort_on_device_failure(void)
{
    abort_job(world_rank, EXIT_RUN_FAILED);
}

/* Every rank parses the same argv, so rank 0 alone reports a bad option; the others wait
 * for its MPI_Abort instead of printing the same message W times. */
static void abort_on_usage_error(int rank)
{
    if (rank == 0)
        abort_job(rank, EXIT_USAGE);
    MPI_Barrier(MPI_COMM_WORLD);
    abort_job(rank, EXIT_USAGE);
}

/* --memory-plan of a preset: its class count from the data, as training takes it. */
static int preset_classes_from_data(dp_options *o)
{
    if (!dp_model_spec_needs_classes(&o->model))
        return 0;
    dp_dataset train = {0}, test = {0};
    int has_test = 0, status = dp_train_open_datasets(o, &train, &test, &has_test);
    if (!status)
        status = dp_train_set_classes(o, &train, has_test ? &test : NULL);
    dp_dataset_free(&train);
    dp_dataset_free(&test);
    return status;
}

int main(int argc, char **argv)
{
    /* OpenBLAS's kernels are chosen when it loads: a generic core is corrected by running again. */
    dp_blas_choose_core(argv);
    /* Thread-multiple lets the watchdog thread ask MPI which ranks never arrived. */
    int thread_level;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &thread_level);
    /* Errors come back as codes so they are reported with context, then MPI_Abort. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    world_rank = rank;
    dp_backend_set_fatal_handler(abort_on_device_failure);

    dp_options o;
    int status = dp_options_parse(&o, argc, argv, world, rank == 0 ? stdout : NULL);
    if (status == DP_OPTIONS_EXIT) {
        MPI_Finalize();
        return EXIT_SUCCESS;
    }
    dp_comm comm;
    if (status || (status = dp_comm_init(&comm, MPI_COMM_WORLD, o.allreduce)) ||
        (status = dp_comm_set_hier_inner(&comm, o.hier_inner)))
        abort_on_usage_error(rank);
    comm.segment_bytes = (size_t)o.segment_bytes;
    dp_comm_set_grad_dtype(&comm, o.grad_dtype);
    if (o.auto_table[0] && dp_comm_load_auto_table(&comm, o.auto_table)) {
        dp_fail_context(DP_EIO, "--auto-table");
        abort_job(rank, EXIT_RUN_FAILED);
    }
    if (dp_launch_env_check(comm.rank, comm.size, comm.local_rank))
        abort_job(rank, EXIT_RUN_FAILED);
    char why[128] = "--threads";
    const char *strategy_why;
    int threads = o.threads, strategy_threads = dp_strategy_default_threads(&o.strategy, &strategy_why);
    if (!threads && o.predict_path[0]) {
        /* OpenBLAS rounds some products differently on more threads. */
        threads = 1;
        snprintf(why, sizeof why, "--predict's default, so any number of ranks writes the same bits");
    } else if (!threads && strategy_threads) {
        /* The strategy's bits must not depend on W, and the cores per rank do. */
        threads = strategy_threads;
        snprintf(why, sizeof why, "%s", strategy_why);
    } else if (!threads) {
        threads = dp_backend_cpu_default_threads(comm.local_size, why, sizeof why);
    }
    dp_backend_cpu_set_threads(threads, why);

    if (o.memory_plan) {
        if (rank == 0 && (preset_classes_from_data(&o) || dp_memory_plan_print(&o, world)))
            abort_job(rank, EXIT_RUN_FAILED);
        dp_comm_free(&comm);
        MPI_Finalize();
        return EXIT_SUCCESS;
    }
    if (o.predict_path[0]) {
        if (dp_train_set_classes(&o, NULL, NULL) || dp_predict(&o, &comm))
            abort_job(rank, EXIT_RUN_FAILED);
        dp_comm_free(&comm);
        MPI_Finalize();
        return EXIT_SUCCESS;
    }
    dp_dataset train = {0}, test = {0};
    int has_test = 0;
    dp_train_result result;
    /* A preemption while the data load must not end the rank: the run answers it. */
    if (dp_train_catch_preemption(&o))
        abort_job(rank, EXIT_RUN_FAILED);
    if (dp_train_open_datasets(&o, &train, &test, &has_test) ||
        dp_train_set_classes(&o, &train, has_test ? &test : NULL) || dp_train(&o, &train, has_test ? &test : NULL, &comm, &result, 0))
        abort_job(rank, EXIT_RUN_FAILED);
    dp_dataset_free(&train);
    dp_dataset_free(&test);
    dp_comm_free(&comm);
    MPI_Finalize();
    /* Every rank alike: launchers report the largest status (srun) or the first non-zero (mpirun). */
    return result.preempted_signal ? DP_EXIT_PREEMPTED : EXIT_SUCCESS;
}
