/* dp_bench: all-reduce algorithms side by side, in the columns of nccl-tests' all_reduce_perf
 * (see --help). The measuring, checking and reporting live in src/bench/. */
#include "dp/atomic_file.h"
#include "dp/auto_table.h"
#include "dp/bench.h"
#include "dp/comm.h"
#include "dp/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EXIT_WRONG_OR_FAILED = 1, EXIT_USAGE = 2 };

/* Reports this rank's error and ends the whole job, so no rank waits in a collective. */
static void abort_job(int rank)
{
    fprintf(stderr, "dp_bench: rank %d: error: %s\n", rank, dp_last_error());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, EXIT_WRONG_OR_FAILED);
    exit(EXIT_WRONG_OR_FAILED);
}

/* Every rank parses the same argv and reaches the same verdict: rank 0 explains, all exit. */
static int usage_error(int rank)
{
    if (rank == 0) {
        fprintf(stderr, "dp_bench: error: %s\n\n", dp_last_error());
        dp_bench_print_usage(stderr);
    }
    MPI_Finalize();
    return EXIT_USAGE;
}

static int uses_auto(const dp_bench_options *o)
{
    for (int i = 0; i < o->algorithm_count; i++)
        if (strcmp(o->algorithms[i], "auto") == 0)
            return 1;
    return 0;
}

/* The communicator of this rank's --group, or MPI_COMM_NULL where it takes no part. */
static int group_comm(const dp_bench_options *o, MPI_Comm *group)
{
    *group = MPI_COMM_WORLD;
    if (o->group == DP_GROUP_WORLD)
        return 0;
    dp_comm world;
    int status = dp_comm_init(&world, MPI_COMM_WORLD, "ring");
    if (!status)
        status = dp_comm_split_group(&world, o->group, group);
    dp_comm_free(&world);
    return status;
}

/* The table is loaded before timing, so parsing it is not part of auto's first call. */
static int prepare(dp_comm *c, MPI_Comm group, const dp_bench_options *o)
{
    int status = dp_comm_init(c, group, o->algorithms[0]);
    if (!status)
        status = dp_comm_set_hier_inner(c, o->hier_inner);
    if (!status)
        dp_comm_set_grad_dtype(c, o->dtype);
    if (!status && uses_auto(o))
        status = dp_comm_load_auto_table(c, o->auto_table_path[0] ? o->auto_table_path : NULL);
    return status && o->auto_table_path[0] ? dp_fail_context(status, "--auto-table") : status;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    /* Errors come back as codes so they are reported with context, then MPI_Abort. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    FILE *out = rank == 0 ? stdout : NULL;

    dp_bench_options o;
    int status = dp_bench_options_parse(&o, argc, argv, out);
    if (status == DP_OPTIONS_EXIT) {
        MPI_Finalize();
        return EXIT_SUCCESS;
    }
    if (status)
        return usage_error(rank);
    /* The table --tune writes is checked before the minutes of measuring, on the rank that writes it. */
    if (rank == 0 && o.tune_path[0] && dp_check_output_file("--tune", o.tune_path))
        abort_job(rank);
    MPI_Comm group;
    if (group_comm(&o, &group))
        abort_job(rank);
    if (group == MPI_COMM_NULL) { /* not in --group: waits for those that are */
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Finalize();
        return EXIT_SUCCESS;
    }
    dp_comm comm;
    dp_bench_results results = {0};
    if (prepare(&comm, group, &o) || dp_bench_run(&comm, &o, &results))
        abort_job(rank);
    if (out) {
        int world;
        MPI_Comm_size(MPI_COMM_WORLD, &world);
        if (o.group != DP_GROUP_WORLD)
            fprintf(out, "# --group %s: timed on rank 0's group, %d of the job's %d ranks\n",
                    dp_group_name(o.group), comm.size, world);
        dp_bench_report(out, &comm, &o, &results);
    }
    if (o.tune_path[0] && dp_bench_tune(&comm, &o, &results, out))
        abort_job(rank);
    long wrong = dp_bench_total_wrong(&o, &results);
    dp_bench_results_free(&results);
    dp_comm_free(&comm);
    if (group != MPI_COMM_WORLD)
        MPI_Comm_free(&group);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return wrong ? EXIT_WRONG_OR_FAILED : EXIT_SUCCESS;
}
