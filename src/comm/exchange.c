/* The primitives the hand-written algorithms are built from: a pairwise exchange (plain, or
 * adding what arrives) and a broadcast of any size, and the element-wise sum. */
#include "src/comm/algorithms.h"

#include "dp/error.h"

/* Elements of a count-long buffer that the piece starting at `done` carries (0 past its end). */
static int piece(size_t count, size_t done)
{
    return done < count ? dp_mpi_chunk(count, done) : 0;
}

/* Where that piece starts; past the buffer's end it stays at the base, a valid pointer. */
static size_t piece_offset(size_t count, size_t done)
{
    return done < count ? done : 0;
}

int dp_sendrecv_floats(dp_comm *c, const float *send, size_t send_count, int dest, float *recv,
                       size_t recv_count, int source, int tag, size_t span)
{
    for (size_t done = 0; done < span; done += DP_MPI_MAX_CHUNK) {
        DP_MPI_CHECK(MPI_Sendrecv(send + piece_offset(send_count, done), piece(send_count, done),
                                  MPI_FLOAT, dest, tag, recv + piece_offset(recv_count, done),
                                  piece(recv_count, done), MPI_FLOAT, source, tag, c->comm,
                                  MPI_STATUS_IGNORE));
    }
    return 0;
}

int dp_sendrecv_add(dp_comm *c, float *buf, size_t send_count, int dest, size_t count, int source,
                    int tag)
{
    float *incoming = dp_comm_scratch(c, count);
    if (!incoming)
        return DP_ENOMEM;
    int status = dp_sendrecv_floats(c, buf, send_count, dest, incoming, count, source, tag,
                                    send_count > count ? send_count : count);
    if (!status)
        dp_add_floats(buf, incoming, count);
    return status;
}

int dp_broadcast_bytes(dp_comm *c, void *buf, size_t bytes, int root)
{
    char *p = buf;
    for (size_t done = 0; done < bytes; done += DP_MPI_MAX_CHUNK)
        DP_MPI_CHECK(MPI_Bcast(p + done, dp_mpi_chunk(bytes, done), MPI_BYTE, root, c->comm));
    return 0;
}

/* A fixed inner trip count: GCC vectorizes it at -O2, whose cost model skips loops that would
 * need a scalar remainder (measured here: 2x the scalar loop). Each element is one addition,
 * so the result is the same bits either way. */
enum { ADD_LANES = 16 };

void dp_add_floats(float *restrict dst, const float *restrict src, size_t count)
{
    size_t bulk = count - count % ADD_LANES;
    for (size_t i = 0; i < bulk; i += ADD_LANES)
        for (size_t k = 0; k < ADD_LANES; k++)
            dst[i + k] += src[i + k];
    for (size_t i = bulk; i < count; i++)
        dst[i] += src[i];
}
