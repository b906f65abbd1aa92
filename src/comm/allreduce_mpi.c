#include "src/comm/algorithms.h"

int dp_allreduce_mpi(dp_comm *c, float *buf, size_t count)
{
    for (size_t done = 0; done < count; done += DP_MPI_MAX_CHUNK) {
        DP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf + done, dp_mpi_chunk(count, done), MPI_FLOAT,
                                   MPI_SUM, c->comm));
    }
    return 0;
}
