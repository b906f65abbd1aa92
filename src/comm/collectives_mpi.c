/* The MPI library's reduce-scatter and all-gather, in the block layout of dp_partition so
 * they are interchangeable with the ring forms. */
#include "dp/comm.h"

#include "dp/error.h"
#include "dp/partition.h"

#include <limits.h>
#include <string.h>

/* c's per-rank block counts and offsets for count elements (int, as MPI takes them). */
static int fill_blocks(dp_comm *c, size_t count, const char *call)
{
    if (count > INT_MAX)
        return dp_fail(DP_EINVAL, "%s: count %zu exceeds MPI's int counts (at most %d); use the ring form",
                       call, count, INT_MAX);
    for (int r = 0; r < c->size; r++) {
        dp_range block = dp_partition(count, c->size, r);
        c->block_counts[r] = (int)dp_range_size(block);
        c->block_offsets[r] = (int)block.begin;
    }
    return 0;
}

int dp_reduce_scatter_mpi(dp_comm *c, float *buf, size_t count)
{
    int status = fill_blocks(c, count, "dp_reduce_scatter_mpi");
    if (status)
        return status;
    DP_MPI_CHECK(MPI_Reduce_scatter(MPI_IN_PLACE, buf, c->block_counts, MPI_FLOAT, MPI_SUM, c->comm));
    /* In place, MPI leaves this rank's block at the start of buf; move it to its position. */
    memmove(buf + c->block_offsets[c->rank], buf, (size_t)c->block_counts[c->rank] * sizeof(float));
    return 0;
}

int dp_allgather_mpi(dp_comm *c, float *buf, size_t count)
{
    int status = fill_blocks(c, count, "dp_allgather_mpi");
    if (status)
        return status;
    DP_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, c->block_counts,
                                c->block_offsets, MPI_FLOAT, c->comm));
    return 0;
}
