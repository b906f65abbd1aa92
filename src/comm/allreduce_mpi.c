#include "src/comm/algorithms.h"

#include "dp/comm.h"

int dp_allreduce_mpi(float *buf, size_t count, MPI_Comm comm)
{
    for (size_t done = 0; done < count; done += DP_MPI_MAX_CHUNK) {
        DP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf + done, dp_mpi_chunk(count, done), MPI_FLOAT,
                                   MPI_SUM, comm));
    }
    return 0;
}
