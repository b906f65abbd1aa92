/* Collectives on flat float buffers, with the gradient all-reduce algorithm chosen by name.
 * This module knows MPI and nothing of models. Every call works for any count (0 too) and
 * any world size (1 too). */
#ifndef DP_COMM_H
#define DP_COMM_H

#include <mpi.h>
#include <stddef.h>

struct dp_allreduce_algorithm;

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
} dp_comm;

/* Sets up collectives on comm with the named all-reduce algorithm; an unknown name fails
 * with a message listing the valid ones. */
int dp_comm_init(dp_comm *c, MPI_Comm comm, const char *algorithm);

/* Frees the scratch memory. */
void dp_comm_free(dp_comm *c);

const char *dp_comm_algorithm_name(const dp_comm *c);

/* At least count floats of c's scratch, or NULL with DP_ENOMEM recorded. */
float *dp_comm_scratch(dp_comm *c, size_t count);

/* Space-separated names of every algorithm --allreduce accepts. */
const char *dp_comm_algorithm_names(void);

/* In place: buf = sum over ranks of buf, with the selected algorithm. Identical on every
 * rank (bitwise). */
int dp_comm_allreduce_sum(dp_comm *c, float *buf, size_t count);

/* In place sum of a few doubles (metrics: loss sums, counts) with MPI_Allreduce. */
int dp_comm_sum_doubles(dp_comm *c, double *values, int count);

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
