#include "dp/launch_env.h"

#include "dp/error.h"

#include <errno.h>
#include <stdlib.h>

/* One environment variable and the MPI value it must equal when set. */
static int check_variable(const char *name, int mpi_value, const char *mpi_meaning)
{
    const char *text = getenv(name);
    if (!text)
        return 0;
    char *end;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (end == text || *end || errno || value < 0)
        return dp_fail(DP_EINVAL, "environment variable %s='%s' is not a non-negative integer",
                       name, text);
    if (value != mpi_value)
        return dp_fail(DP_EINVAL,
                       "environment variable %s=%s contradicts MPI's %s %d: the job was launched "
                       "with a different world than MPI started (start one MPI rank per task with "
                       "srun --mpi=pmix or mpirun, and unset stale launcher variables)",
                       name, text, mpi_meaning, mpi_value);
    return 0;
}

int dp_launch_env_check(int rank, int size, int local_rank)
{
    const struct {
        const char *name;
        int mpi_value;
        const char *mpi_meaning;
    } expected[] = {
        {"WORLD_SIZE", size, "world size (MPI_Comm_size)"},
        {"RANK", rank, "rank (MPI_Comm_rank)"},
        {"OMPI_COMM_WORLD_RANK", rank, "rank (MPI_Comm_rank)"},
        {"LOCAL_RANK", local_rank, "local rank among the ranks on this node (MPI_Comm_split_type)"},
    };
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
        int status = check_variable(expected[i].name, expected[i].mpi_value, expected[i].mpi_meaning);
        if (status)
            return status;
    }
    return 0;
}
