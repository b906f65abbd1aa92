/* Collectives on flat float buffers, with the gradient all-reduce algorithm chosen by name.
 * This module knows MPI and nothing of models. Every call works for any count (0 too) and
 * any world size (1 too). */
#ifndef DP_COMM_H
#define DP_COMM_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

struct dp_allreduce_algorithm;
struct dp_auto_table;
struct dp_watchdog;
struct dp_nccl;

/* Working memory the algorithms reuse across calls: grown on demand, never shrunk, so a
 * training loop allocates only on its first step. */
typedef struct dp_scratch {
    float *data;
    size_t capacity; /* floats */
} dp_scratch;

typedef struct dp_comm {
    MPI_Comm comm;        /* the training communicator (not owned) */
    int rank, size;
    int local_rank, local_size; /* among ranks sharing this node (MPI_COMM_TYPE_SHARED) */
    const struct dp_allreduce_algorithm *algorithm;
    dp_scratch scratch;
    struct dp_watchdog *watchdog; /* when set, brackets every dp_comm_* collective */
    size_t segment_bytes;       /* ring-pipelined segment size; 0: DP_SEGMENT_BYTES_DEFAULT */
    int *block_counts, *block_offsets; /* size entries each: the MPI v-collectives' arguments */
    struct dp_auto_table *auto_table; /* auto's rules; NULL until loaded or first used */
    int cuda_aware;             /* MPI may be handed GPU memory (dp_comm_set_cuda_aware) */
    struct dp_nccl *nccl;       /* nccl's communicator; NULL until its first all-reduce */
} dp_comm;

/* Default ring-pipelined segment: big enough that each message's fixed cost (on shared memory,
 * Open MPI's rendezvous and its double-copied first 32 KiB) stays small, small enough that a
 * 16 MiB gradient still gives each block several segments at W <= 4. */
#define DP_SEGMENT_BYTES_DEFAULT ((size_t)1 << 20)

/* Sets up collectives on comm with the named all-reduce algorithm; an unknown name fails
 * with a message listing the valid ones. */
int dp_comm_init(dp_comm *c, MPI_Comm comm, const char *algorithm);

/* Frees the scratch memory. */
void dp_comm_free(dp_comm *c);

const char *dp_comm_algorithm_name(const dp_comm *c);

/* Switches c to the named algorithm (as dp_comm_init names it), keeping its scratch memory. */
int dp_comm_set_algorithm(dp_comm *c, const char *algorithm);

/* At least count floats of c's scratch, or NULL with DP_ENOMEM recorded. */
float *dp_comm_scratch(dp_comm *c, size_t count);

/* Space-separated names of every algorithm that sums host memory: all that --allreduce
 * accepts but those of dp_comm_gpu_algorithm_names. */
const char *dp_comm_algorithm_names(void);

/* The algorithms that sum GPU memory only ("nccl" when built with NCCL, else ""). */
const char *dp_comm_gpu_algorithm_names(void);

/* --cuda-aware: may MPI be handed GPU memory? */
typedef enum dp_cuda_aware { DP_CUDA_AWARE_AUTO, DP_CUDA_AWARE_ON, DP_CUDA_AWARE_OFF } dp_cuda_aware;

/* What MPI says of itself: 1 it reads and writes GPU memory, 0 it does not, -1 it cannot say
 * (no MPIX_Query_cuda_support: not Open MPI). */
int dp_mpi_cuda_support(void);

/* Sets c->cuda_aware: auto is what MPI says; on fails when MPI says it cannot. */
int dp_comm_set_cuda_aware(dp_comm *c, dp_cuda_aware mode);

/* 1 when gradients held in GPU memory should reach the selected algorithm there: it needs
 * GPU memory (nccl), or only MPI touches the data and MPI is CUDA-aware. Otherwise the caller
 * stages them through host memory (device -> host -> algorithm -> device). */
int dp_comm_wants_device_buffer(const dp_comm *c);

/* In place: buf = sum over ranks of buf, with the selected algorithm. Identical on every
 * rank (bitwise). */
int dp_comm_allreduce_sum(dp_comm *c, float *buf, size_t count);

/* Reduce-scatter and all-gather over the blocks of dp_partition(count, size, r), in place.
 * After a reduce-scatter, rank r's block of buf holds the sum over ranks of that block (the
 * rest of buf is unspecified); an all-gather takes rank r's block from rank r to every rank.
 * The ring forms take any count; the MPI forms (MPI_Reduce_scatter, MPI_Allgatherv) take
 * counts up to INT_MAX, as MPI's int counts and displacements allow. */
int dp_reduce_scatter_ring(dp_comm *c, float *buf, size_t count);
int dp_allgather_ring(dp_comm *c, float *buf, size_t count);
int dp_reduce_scatter_mpi(dp_comm *c, float *buf, size_t count);
int dp_allgather_mpi(dp_comm *c, float *buf, size_t count);

/* In place sum of a few doubles (metrics: loss sums, counts) with MPI_Allreduce. */
int dp_comm_sum_doubles(dp_comm *c, double *values, int count);

/* Every rank's 64-bit value into all[rank] on every rank (replica checks). */
int dp_comm_gather_hashes(dp_comm *c, uint64_t mine, uint64_t *all);

/* Root's bytes to every rank. */
int dp_comm_broadcast(dp_comm *c, void *buf, size_t bytes, int root);

/* Records an MPI error (call text, file, line, MPI's message) and returns DP_EMPI. */
int dp_mpi_fail(int status, const char *call, const char *file, int line);

#define DP_MPI_CHECK(call)                                                   \
    do {                                                                     \
        int dp_mpi_status_ = (call);                                         \
        if (dp_mpi_status_ != MPI_SUCCESS)                                   \
            return dp_mpi_fail(dp_mpi_status_, #call, __FILE__, __LINE__);  \
    } while (0)

#endif
