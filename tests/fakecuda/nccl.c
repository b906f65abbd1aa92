/* The fake NCCL: communicators over MPI_COMM_WORLD (the ranks a test starts), and the float- and
 * bfloat16-sum collectives (all-reduce, reduce-scatter, all-gather, reduce, broadcast) queued on
 * their stream like kernels: each runs, as the MPI collective on the device buffers, when its
 * stream's work runs, so a caller that reads the result before synchronising reads stale
 * data, and one that hands it host memory faults. A bf16 sum is what NCCL's reduction step
 * computes: the two bf16 values added in FP32 and the sum rounded to bf16 (nearest even), at
 * every step of MPI's reduction (an MPI_Op on 16-bit values), so partial sums round as NCCL's do
 * (NCCL's own order of steps, ring or tree, is not modelled: MPI's is used). */
#include "tests/fakecuda/fakecuda.h"

#include "dp/comm.h"

#include <mpi.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

struct ncclComm {
    MPI_Comm mpi;
    int rank, size;
    MPI_Op bf16_sum;
};

static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = dp_bf16_from_float(dp_bf16_to_float(a[i]) + dp_bf16_to_float(b[i]));
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    memset(id, 0, sizeof *id);
    strcpy(id->internal, "fakecuda");
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    int world_rank, world_size;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (strcmp(id.internal, "fakecuda") != 0 || nranks != world_size || rank != world_rank) {
        fakecuda_complain("ncclCommInitRank(%d ranks, rank %d): the fake spans MPI_COMM_WORLD (%d ranks) only",
                          nranks, rank, world_size);
        return ncclInvalidUsage;
    }
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c || MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi) != MPI_SUCCESS) {
        free(c);
        return ncclSystemError;
    }
    MPI_Op_create(bf16_sum, 1, &c->bf16_sum);
    c->rank = rank;
    c->size = nranks;
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (fakecuda_synchronize() != cudaSuccess)
        return ncclUnhandledCudaError;
    MPI_Comm_free(&comm->mpi);
    MPI_Op_free(&comm->bf16_sum);
    free(comm);
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    default: return "unknown result code";
    }
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error)
{
    (void)comm;
    *async_error = ncclSuccess;
    return ncclSuccess;
}

/* Collectives run one by one, in issue order, when their stream's work runs: a group adds
 * nothing to that. */
ncclResult_t ncclGroupStart(void)
{
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    return ncclSuccess;
}

typedef enum collective { ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, REDUCE, BROADCAST } collective;

typedef struct collective_args {
    collective what;
    const void *send;
    void *recv;
    size_t count; /* NCCL's count argument: per rank for reduce-scatter and all-gather */
    int root;
    const struct ncclComm *comm;
    int bf16;     /* ncclBfloat16, else ncclFloat */
} collective_args;

static const char *const names[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclReduce", "ncclBroadcast"};

/* The send buffer goes through a host copy, so in-place calls need no MPI_IN_PLACE layouts. */
static void run_collective(void *raw)
{
    collective_args *a = raw;
    int size = a->comm->size, me = a->comm->rank, n = (int)a->count;
    size_t element = a->bf16 ? sizeof(uint16_t) : sizeof(float);
    MPI_Datatype type = a->bf16 ? MPI_UINT16_T : MPI_FLOAT;
    MPI_Op sum = a->bf16 ? a->comm->bf16_sum : MPI_SUM;
    size_t in = a->count * (a->what == REDUCE_SCATTER ? (size_t)size : 1) * element;
    size_t out = a->count * (a->what == ALL_GATHER ? (size_t)size : 1) * element;
    int sends = a->what != BROADCAST || me == a->root, receives = a->what != REDUCE || me == a->root;
    if ((sends && !fakecuda_need(a->send, in, "the send buffer")) ||
        (receives && !fakecuda_need(a->recv, out, "the receive buffer")))
        return;
    void *copy = malloc(in ? in : 1);
    if (!copy)
        abort();
    if (sends)
        memcpy(copy, a->send, in);
    MPI_Comm c = a->comm->mpi;
    switch (a->what) {
    case ALL_REDUCE: MPI_Allreduce(copy, a->recv, n, type, sum, c); break;
    case REDUCE_SCATTER: MPI_Reduce_scatter_block(copy, a->recv, n, type, sum, c); break;
    case ALL_GATHER: MPI_Allgather(copy, n, type, a->recv, n, type, c); break;
    case REDUCE: MPI_Reduce(copy, a->recv, n, type, sum, a->root, c); break;
    case BROADCAST:
        if (me == a->root)
            memcpy(a->recv, copy, in);
        MPI_Bcast(a->recv, n, type, a->root, c);
        break;
    }
    free(copy);
}

static ncclResult_t queue_collective(collective what, const void *send, void *recv, size_t count, ncclDataType_t type,
                                     ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    if ((type != ncclFloat && type != ncclBfloat16) || op != ncclSum || count > (size_t)0x7fffffff || root < 0 ||
        root >= comm->size) {
        fakecuda_complain("%s: only float and bfloat16 sums below 2^31 elements are faked", names[what]);
        return ncclInvalidArgument;
    }
    collective_args a = {what, send, recv, count, root, comm, type == ncclBfloat16};
    return fakecuda_enqueue_on(stream, run_collective, &a, sizeof a, names[what], NULL) == cudaSuccess
               ? ncclSuccess
               : ncclUnhandledCudaError;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return queue_collective(ALL_REDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return queue_collective(REDUCE_SCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream)
{
    return queue_collective(ALL_GATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm, stream);
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream)
{
    return queue_collective(REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream)
{
    return queue_collective(BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream);
}
