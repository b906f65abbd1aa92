/* nccl: ncclAllReduce on GPU memory, over NVLink, PCIe peer copies or the network as NCCL
 * finds best. The communicator is built on the first call: rank 0 draws the unique id and
 * MPI_Bcast hands it to every rank. It runs on the legacy default stream, behind the backward
 * pass that produced the gradients, and the call returns once the sum is complete. */
#include "config.h"

#include "src/comm/algorithms.h"

#include "dp/error.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>

struct dp_nccl {
    ncclComm_t comm;
};

static int nccl_failed(const dp_comm *c, ncclResult_t result, const char *call, const char *file, int line)
{
    const char *hint = result == ncclInvalidUsage
                           ? " (two ranks on one GPU? NCCL needs a GPU per rank; to test on one GPU, "
                             "give each rank its own NCCL_HOSTID)"
                           : " (NCCL_DEBUG=WARN prints NCCL's own explanation)";
    return dp_fail(DP_EDEVICE, "%s failed at %s:%d on rank %d: %s%s", call, file, line, c->rank,
                   ncclGetErrorString(result), hint);
}

static int cuda_failed(const dp_comm *c, cudaError_t e, const char *call, const char *file, int line)
{
    (void)cudaGetLastError();
    return dp_fail(DP_EDEVICE, "%s failed at %s:%d on rank %d: %s", call, file, line, c->rank,
                   cudaGetErrorString(e));
}

#define NCCL_TRY(c, call)                                                    \
    do {                                                                     \
        ncclResult_t r_ = (call);                                            \
        if (r_ != ncclSuccess)                                               \
            return nccl_failed(c, r_, #call, __FILE__, __LINE__);            \
    } while (0)
#define CUDA_TRY(c, call)                                                    \
    do {                                                                     \
        cudaError_t e_ = (call);                                             \
        if (e_ != cudaSuccess)                                               \
            return cuda_failed(c, e_, #call, __FILE__, __LINE__);            \
    } while (0)

static int check_device_buffer(const dp_comm *c, const float *buf)
{
    struct cudaPointerAttributes where;
    cudaError_t e = cudaPointerGetAttributes(&where, buf);
    if (e != cudaSuccess)
        return cuda_failed(c, e, "cudaPointerGetAttributes(&where, buf)", __FILE__, __LINE__);
    if (where.type != cudaMemoryTypeDevice && where.type != cudaMemoryTypeManaged)
        return dp_fail(DP_EINVAL, "--allreduce nccl sums GPU memory, but rank %d's buffer is in host "
                       "memory: use it with --device cuda", c->rank);
    return 0;
}

static int connect_ranks(dp_comm *c)
{
    ncclUniqueId id;
    if (c->rank == 0)
        NCCL_TRY(c, ncclGetUniqueId(&id));
    int status = dp_broadcast_bytes(c, &id, sizeof id, 0);
    if (status)
        return status;
    struct dp_nccl *nccl = dp_alloc(sizeof *nccl, "the NCCL communicator");
    if (!nccl)
        return DP_ENOMEM;
    ncclResult_t result = ncclCommInitRank(&nccl->comm, c->size, id, c->rank);
    if (result != ncclSuccess) {
        free(nccl);
        return nccl_failed(c, result, "ncclCommInitRank(&nccl->comm, c->size, id, c->rank)", __FILE__, __LINE__);
    }
    c->nccl = nccl;
    return 0;
}

int dp_allreduce_nccl(dp_comm *c, float *buf, size_t count)
{
    if (count == 0)
        return 0;
    int status = check_device_buffer(c, buf);
    if (!status && !c->nccl)
        status = connect_ranks(c);
    if (status)
        return status;
    NCCL_TRY(c, ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, c->nccl->comm, 0));
    CUDA_TRY(c, cudaStreamSynchronize(0));
    return 0;
}

void dp_nccl_free(dp_comm *c)
{
    if (!c->nccl)
        return;
    /* At teardown a failure has nothing left to stop: the communicator goes either way. */
    (void)ncclCommDestroy(c->nccl->comm);
    free(c->nccl);
    c->nccl = NULL;
}
