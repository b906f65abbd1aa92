/* The registry of gradient all-reduce algorithms behind dp_comm_allreduce_sum. Adding one:
 * write its function in src/comm/allreduce_NAME.c and list it in algorithms[] in comm.c. */
#ifndef DP_COMM_ALGORITHMS_H
#define DP_COMM_ALGORITHMS_H

#include <mpi.h>
#include <stddef.h>

#include "dp/comm.h"

typedef int (*dp_allreduce_fn)(dp_comm *c, float *buf, size_t count);

/* Longest algorithm name, so the list of names fits a fixed buffer. */
#define DP_ALGORITHM_NAME_MAX 31

/* Which memory an algorithm can sum. */
enum dp_buffer_place {
    DP_BUFFER_HOST,   /* it adds on the CPU: GPU gradients are staged through host memory */
    DP_BUFFER_MPI,    /* only MPI touches the data: GPU memory when MPI is CUDA-aware */
    DP_BUFFER_DEVICE  /* GPU memory only (NCCL) */
};

struct dp_allreduce_algorithm {
    const char *name;             /* at most DP_ALGORITHM_NAME_MAX characters */
    const char *summary;
    dp_allreduce_fn allreduce_sum;
    enum dp_buffer_place place;
};

/* MPI_Allreduce(MPI_IN_PLACE, SUM): the reference every other algorithm is tested against. */
int dp_allreduce_mpi(dp_comm *c, float *buf, size_t count);

/* The CPU master: every rank sends to rank 0, which sums in rank order and broadcasts. */
int dp_allreduce_naive(dp_comm *c, float *buf, size_t count);

/* Ring reduce-scatter then ring all-gather, W-1 MPI_Sendrecv steps each. */
int dp_allreduce_ring(dp_comm *c, float *buf, size_t count);

/* The ring with blocks cut into segments, nonblocking, so reducing one overlaps moving the next. */
int dp_allreduce_ring_pipelined(dp_comm *c, float *buf, size_t count);

/* Rabenseifner: recursive-halving reduce-scatter, recursive-doubling all-gather. */
int dp_allreduce_rhd(dp_comm *c, float *buf, size_t count);

/* Recursive doubling: log2 W exchanges of the whole buffer, each added; for small messages. */
int dp_allreduce_rd(dp_comm *c, float *buf, size_t count);

/* One of the above per world size and message size, from c's table (include/dp/auto_table.h). */
int dp_allreduce_auto(dp_comm *c, float *buf, size_t count);

/* ncclAllReduce on GPU memory (built with NCCL only); the communicator is made on the first
 * call from a unique id that rank 0 draws and MPI_Bcast shares. dp_nccl_free releases it. */
int dp_allreduce_nccl(dp_comm *c, float *buf, size_t count);
void dp_nccl_free(dp_comm *c);

/* The registered algorithm called name, or NULL. */
const struct dp_allreduce_algorithm *dp_allreduce_find(const char *name);

/* Point-to-point tags, one per phase, so a message can only match the step it belongs to. */
enum dp_comm_tag {
    DP_TAG_GATHER = 7001,    /* naive: a rank's buffer on its way to rank 0 */
    DP_TAG_REDUCE_SCATTER,
    DP_TAG_ALLGATHER,
    DP_TAG_FOLD_IN,          /* rhd, rd: an extra rank hands its buffer to its partner */
    DP_TAG_FOLD_OUT,         /* rhd, rd: the partner hands the result back */
    DP_TAG_RECURSIVE_DOUBLING /* rd: whole buffers swapped with the partner d ranks away */
};

/* The power-of-two group a recursive algorithm runs on (see fold.c). */
typedef struct dp_fold_plan {
    int group;   /* P: the largest power of two <= W */
    int extra;   /* W - P: ranks that fold into a partner */
    int index;   /* this rank's index among the P, or -1 for a rank that sits out */
} dp_fold_plan;

/* The real rank behind index v of the P. */
int dp_fold_real_rank(const dp_fold_plan *p, int v);

/* An all-reduce of buf over the P ranks of p, in place, same bits on each of them. */
typedef int (*dp_group_allreduce_fn)(dp_comm *c, const dp_fold_plan *p, float *buf, size_t count);

/* on_group made an all-reduce over any W: the first 2 (W-P) ranks fold in pairs into P, which
 * run on_group, and the result goes back to the ranks that sat out. Count 0 or W = 1: no-op. */
int dp_allreduce_folded(dp_comm *c, float *buf, size_t count, dp_group_allreduce_fn on_group);


/* Sends send_count floats to dest while receiving recv_count floats from source, in pieces
 * MPI's int counts hold. For a one-way transfer the other side is MPI_PROC_NULL with count 0
 * (its pointer still valid). Both partners pass the same `span` (>= both counts) so their
 * pieces pair up. */
int dp_sendrecv_floats(dp_comm *c, const float *send, size_t send_count, int dest, float *recv,
                       size_t recv_count, int source, int tag, size_t span);

/* Sends send_count floats of buf to dest while receiving count floats from source into the
 * scratch buffer, then adds them into buf: one step of an algorithm that sums whole buffers. */
int dp_sendrecv_add(dp_comm *c, float *buf, size_t send_count, int dest, size_t count, int source,
                    int tag);

/* Root's bytes to every rank with MPI_Bcast, in pieces; unguarded, for use inside an algorithm. */
int dp_broadcast_bytes(dp_comm *c, void *buf, size_t bytes, int root);

/* dst[i] += src[i]: the reduction every algorithm applies. */
void dp_add_floats(float *restrict dst, const float *restrict src, size_t count);

/* Largest element count one MPI call takes (counts are int); bigger buffers go in chunks. */
#define DP_MPI_MAX_CHUNK ((size_t)1 << 30)

/* Elements in the chunk that starts at `done` of `total`. */
static inline int dp_mpi_chunk(size_t total, size_t done)
{
    return (int)(total - done < DP_MPI_MAX_CHUNK ? total - done : DP_MPI_MAX_CHUNK);
}

#endif
