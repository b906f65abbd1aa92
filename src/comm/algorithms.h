/* The registry of gradient all-reduce algorithms behind dp_comm_allreduce_sum. Adding one:
 * write its function in src/comm/allreduce_NAME.c and list it in algorithms[] in comm.c. */
#ifndef DP_COMM_ALGORITHMS_H
#define DP_COMM_ALGORITHMS_H

#include <mpi.h>
#include <stddef.h>

#include "dp/comm.h"

typedef int (*dp_allreduce_fn)(dp_comm *c, float *buf, size_t count);

struct dp_allreduce_algorithm {
    const char *name;
    const char *summary;
    dp_allreduce_fn allreduce_sum;
};

/* MPI_Allreduce(MPI_IN_PLACE, SUM): the reference every other algorithm is tested against. */
int dp_allreduce_mpi(dp_comm *c, float *buf, size_t count);

/* Largest element count one MPI call takes (counts are int); bigger buffers go in chunks. */
#define DP_MPI_MAX_CHUNK ((size_t)1 << 30)

/* Elements in the chunk that starts at `done` of `total`. */
static inline int dp_mpi_chunk(size_t total, size_t done)
{
    return (int)(total - done < DP_MPI_MAX_CHUNK ? total - done : DP_MPI_MAX_CHUNK);
}

#endif
