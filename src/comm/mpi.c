/* mpi: the MPI library's own collectives, in the request's block layout. A request is
 * MPI_Iallreduce (in chunks MPI's int counts hold), MPI_Ireduce_scatter or MPI_Iallgatherv
 * on the private communicator, advanced by MPI_Testall. A blocking call (dp_comm_run,
 * dp_comm_allreduce_sum) is MPI_Allreduce, MPI_Reduce_scatter or MPI_Allgatherv instead:
 * Open MPI's blocking collectives (coll/tuned) are the reference every other algorithm is
 * tested against, and faster than its non-blocking ones (libnbc), which may choose another
 * algorithm and so round differently (still the same bits on every rank). bf16 requests send
 * MPI_UINT16_T and add with the pool's user-defined bf16 sum (elements.c): MPI has no bf16. */
#include "src/comm/algorithms.h"

#include "dp/error.h"

#include <limits.h>
#include <string.h>

/* The functions that name these collectives in errors: dp_reduce_scatter_mpi and
 * dp_allgather_mpi are the blocking forms in comm.h. */
static const char *const call_names[DP_COLLECTIVE_KINDS] = {"MPI_Allreduce", "dp_reduce_scatter_mpi",
                                                            "dp_allgather_mpi"};

/* q's per-rank block counts and offsets, as int (MPI's v-collectives take them so). */
static int fill_blocks(dp_request *q)
{
    if (q->count > INT_MAX)
        return dp_fail(DP_EINVAL, "%s: count %zu exceeds MPI's int counts (at most %d) for %s; use the ring form",
                       call_names[q->kind], q->count, INT_MAX, q->label);
    for (int r = 0; r < q->comm->size; r++) {
        dp_range block = dp_request_block(q, r);
        q->block_counts[r] = (int)dp_range_size(block);
        q->block_offsets[r] = (int)block.begin;
    }
    return 0;
}

static MPI_Request *next_request(dp_request *q)
{
    return &q->flights[0].requests[q->flights[0].count++];
}

/* The sum of q's elements: MPI's own for floats. */
static MPI_Op sum_of(const dp_request *q)
{
    return q->element->own_sum ? q->comm->pool->bf16_sum : MPI_SUM;
}

static int start_allreduce(dp_request *q)
{
    MPI_Comm comm = q->comm->requests_comm;
    MPI_Datatype type = dp_element_mpi_type(q->dtype);
    for (size_t done = 0; done < q->count; done += DP_MPI_MAX_CHUNK) {
        int n = dp_mpi_chunk(q->count, done);
        void *data = dp_request_at(q, q->buf, done);
        if (q->blocking)
            DP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, n, type, sum_of(q), comm));
        else
            DP_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, n, type, sum_of(q), comm, next_request(q)));
    }
    return 0;
}

static int start_reduce_scatter(dp_request *q)
{
    MPI_Comm comm = q->comm->requests_comm;
    MPI_Datatype type = dp_element_mpi_type(q->dtype);
    if (q->blocking)
        DP_MPI_CHECK(MPI_Reduce_scatter(MPI_IN_PLACE, q->buf, q->block_counts, type, sum_of(q), comm));
    else
        DP_MPI_CHECK(MPI_Ireduce_scatter(MPI_IN_PLACE, q->buf, q->block_counts, type, sum_of(q), comm,
                                         next_request(q)));
    return 0;
}

static int start_allgather(dp_request *q)
{
    MPI_Comm comm = q->comm->requests_comm;
    if (q->blocking)
        DP_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, q->buf, q->block_counts,
                                    q->block_offsets, MPI_FLOAT, comm));
    else
        DP_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, q->buf, q->block_counts,
                                     q->block_offsets, MPI_FLOAT, comm, next_request(q)));
    return 0;
}

static int (*const starts[DP_COLLECTIVE_KINDS])(dp_request *q) = {start_allreduce, start_reduce_scatter,
                                                                   start_allgather};

/* In place, MPI leaves this rank's reduced block at the start of buf; it belongs at its offset. */
static void finish(dp_request *q)
{
    int r = q->comm->rank;
    if (q->kind == DP_REDUCE_SCATTER)
        memmove(dp_request_at(q, q->buf, (size_t)q->block_offsets[r]), q->buf,
                (size_t)q->block_counts[r] * q->element->size);
    q->complete = 1;
}

static int advance(dp_request *q)
{
    int done = 0;
    DP_MPI_CHECK(MPI_Testall(q->flights[0].count, q->flights[0].requests, &done, MPI_STATUSES_IGNORE));
    if (done)
        finish(q);
    return 0;
}

static int start(dp_request *q)
{
    q->flights[0].count = 0;
    int status = q->kind == DP_ALLREDUCE ? 0 : fill_blocks(q);
    if (!status)
        status = starts[q->kind](q);
    if (status)
        return status;
    dp_request_count_bytes(q, dp_request_ring_elements(q), 1);
    return q->blocking ? (finish(q), 0) : advance(q);
}

static const dp_driver mpi_driver = {.start = start, .advance = advance};

const struct dp_algorithm dp_algorithm_mpi = {
    .name = "mpi",
    .summary = "MPI_Allreduce in place (the library's own choice of algorithm); requests: MPI_Iallreduce",
    .place = DP_BUFFER_MPI,
    .driver = &mpi_driver,
    .scratch_floats = dp_scratch_none,
};
