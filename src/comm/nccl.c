/* nccl: NCCL's collectives on GPU memory, over NVLink, PCIe peer copies or the network as
 * NCCL finds best. The communicator and a communication stream are made at dp_comm_reserve
 * (or the first request): rank 0 draws the unique id and MPI_Bcast hands it to every rank.
 * A request waits on its stream for an event recorded after the kernels that produced the
 * buffer (the caller's, or one recorded here on the stream the CUDA backend computes on,
 * dp_comm.device_stream), enqueues the collective and records a completion event, which tests
 * query: compute goes on meanwhile. The stream does not synchronise with the legacy default
 * stream (cudaStreamNonBlocking), or every request would wait for all compute queued before it
 * and block all compute queued after it. A request started to be joined (dp_request_join)
 * queries nothing: the caller's stream waits for the completion event instead, so a CUDA
 * graph's capture takes the whole, fork and join (NCCL >= 2.9 captures its collectives).
 *
 * Reduce-scatter and all-gather over equal blocks are ncclReduceScatter and ncclAllGather in
 * place; over uneven blocks (dp_partition of a count W does not divide, or a parent layout)
 * one grouped ncclReduce (ncclBroadcast) per block, to (from) the block's owner, as PyTorch
 * does for uneven shards.
 *
 * bf16 requests (--grad-dtype bf16) round the buffer into the slot's own bf16 device buffer on
 * the stream (a kernel: in place would race between threads), reduce that with ncclBfloat16,
 * and widen it back into the buffer, all before the completion event. */
#include "config.h"

#include "src/comm/algorithms.h"

#include "dp/error.h"
#include "dp/memory.h"
#include "src/backend/cuda_kernels.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>

struct dp_nccl {
    ncclComm_t comm;
    cudaStream_t stream;
};

/* A slot's own: its events (the buffer is ready, the collective is done) and its bf16 buffer. */
struct nccl_events {
    cudaEvent_t ready, done;
    uint16_t *wire;      /* device memory: a bf16 request's elements; NULL until one starts */
    size_t wire_count;
};

static const ncclDataType_t nccl_types[DP_DTYPES] = {[DP_DTYPE_F32] = ncclFloat, [DP_DTYPE_I64] = ncclInt64,
                                                     [DP_DTYPE_BF16] = ncclBfloat16};

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
    CUDA_TRY(c, cudaPointerGetAttributes(&where, buf));
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
    struct dp_nccl *nccl = dp_calloc(1, sizeof *nccl, "the NCCL communicator");
    if (!nccl)
        return DP_ENOMEM;
    c->nccl = nccl;
    NCCL_TRY(c, ncclCommInitRank(&nccl->comm, c->size, id, c->rank));
    CUDA_TRY(c, cudaStreamCreateWithFlags(&nccl->stream, cudaStreamNonBlocking));
    return 0;
}

/* A slot's events: the buffer is ready, the collective is done. */
static struct nccl_events *events_of(const dp_request *q)
{
    return q->driver_state;
}

static int create_events(dp_request *q)
{
    struct nccl_events *e = dp_calloc(1, sizeof *e, "a request's CUDA events");
    if (!e)
        return DP_ENOMEM;
    q->driver_state = e;
    CUDA_TRY(q->comm, cudaEventCreateWithFlags(&e->ready, cudaEventDisableTiming));
    CUDA_TRY(q->comm, cudaEventCreateWithFlags(&e->done, cudaEventDisableTiming));
    return 0;
}

static int nccl_prepare(dp_request *q)
{
    int status = q->comm->nccl ? 0 : connect_ranks(q->comm);
    return status || q->driver_state ? status : create_events(q);
}

/* W equal blocks of buf itself: NCCL's own reduce-scatter and all-gather fit. */
static int equal_blocks(const dp_request *q)
{
    return !q->parent_count && q->count % (size_t)q->comm->size == 0;
}

/* One grouped call per non-empty block of data (q's elements), rooted at its owner. */
static int per_block(dp_request *q, void *data, int reduce)
{
    dp_comm *c = q->comm;
    ncclDataType_t type = nccl_types[q->dtype];
    NCCL_TRY(c, ncclGroupStart());
    for (int r = 0; r < c->size; r++) {
        dp_range b = dp_request_block(q, r);
        void *p = dp_request_at(q, data, b.begin);
        if (!dp_range_size(b))
            continue;
        if (reduce)
            NCCL_TRY(c, ncclReduce(p, p, dp_range_size(b), type, ncclSum, r, c->nccl->comm, c->nccl->stream));
        else
            NCCL_TRY(c, ncclBroadcast(p, p, dp_range_size(b), type, r, c->nccl->comm, c->nccl->stream));
    }
    NCCL_TRY(c, ncclGroupEnd());
    return 0;
}

/* q's collective on data: its buffer, or the slot's bf16 copy of it. */
static int enqueue(dp_request *q, void *data)
{
    dp_comm *c = q->comm;
    ncclComm_t comm = c->nccl->comm;
    cudaStream_t stream = c->nccl->stream;
    ncclDataType_t type = nccl_types[q->dtype];
    size_t share = q->count / (size_t)c->size;
    void *mine = dp_request_at(q, data, (size_t)c->rank * share);
    if (q->kind == DP_ALLREDUCE)
        NCCL_TRY(c, ncclAllReduce(data, data, q->count, type, ncclSum, comm, stream));
    else if (!equal_blocks(q))
        return per_block(q, data, q->kind == DP_REDUCE_SCATTER);
    else if (q->kind == DP_REDUCE_SCATTER)
        NCCL_TRY(c, ncclReduceScatter(data, mine, share, type, ncclSum, comm, stream));
    else
        NCCL_TRY(c, ncclAllGather(mine, data, share, type, comm, stream));
    return 0;
}

/* The slot's bf16 buffer, grown to count elements: charged to the collectives' scratch. */
static int ensure_wire(dp_request *q, size_t count)
{
    struct nccl_events *e = events_of(q);
    if (e->wire_count >= count)
        return 0;
    size_t bytes = count * sizeof *e->wire;
    const char *what = "a bf16 request's device buffer (nccl)";
    if (dp_memory_admit(bytes, DP_MEM_COMM, what))
        return DP_ENOMEM;
    uint16_t *grown = NULL;
    CUDA_TRY(q->comm, cudaMalloc((void **)&grown, bytes));
    if (e->wire) {
        dp_memory_release(e->wire);
        (void)cudaFree(e->wire);
    }
    dp_memory_record(grown, bytes, DP_MEM_COMM);
    e->wire = grown;
    e->wire_count = count;
    return 0;
}

/* bf16 gradients: every reserved slot's buffer at its largest before the first step, so none
 * grows inside a CUDA graph's capture (which cannot allocate), whichever slot a bucket takes. */
static int nccl_reserve(dp_comm *c, size_t max_count, int requests, size_t parent_count)
{
    (void)parent_count;
    int status = 0;
    for (int i = 0; !status && c->grad_dtype == DP_DTYPE_BF16 && i < requests; i++)
        status = ensure_wire(c->pool->slots[i], max_count);
    return status;
}

/* bf16: rounded into the slot's buffer, reduced there, widened back into q's buffer. */
static int enqueue_bf16(dp_request *q)
{
    cudaStream_t stream = q->comm->nccl->stream;
    int status = ensure_wire(q, q->count);
    if (status)
        return status;
    uint16_t *wire = events_of(q)->wire;
    CUDA_TRY(q->comm, dp_cuda_to_bf16(stream, wire, q->buf, q->count));
    if ((status = enqueue(q, wire)))
        return status;
    CUDA_TRY(q->comm, dp_cuda_from_bf16(stream, q->buf, wire, q->count));
    return 0;
}

static int nccl_advance(dp_request *q)
{
    cudaError_t e = cudaEventQuery(events_of(q)->done);
    if (e == cudaSuccess) {
        q->complete = 1;
        return 0;
    }
    if (e != cudaErrorNotReady)
        return cuda_failed(q->comm, e, "cudaEventQuery(done)", __FILE__, __LINE__);
    /* Still running: a failure inside NCCL (a peer gone, a network error) shows only here. */
    ncclResult_t async = ncclSuccess;
    NCCL_TRY(q->comm, ncclCommGetAsyncError(q->comm->nccl->comm, &async));
    if (async != ncclSuccess && async != ncclInProgress)
        return nccl_failed(q->comm, async, "the NCCL communicator (ncclCommGetAsyncError)", __FILE__, __LINE__);
    return 0;
}

static int nccl_start(dp_request *q)
{
    dp_comm *c = q->comm;
    int status = check_device_buffer(c, q->buf);
    if (status)
        return status;
    cudaEvent_t ready = q->ready_event;
    if (!ready) {
        ready = events_of(q)->ready;
        CUDA_TRY(c, cudaEventRecord(ready, c->device_stream ? (cudaStream_t)c->device_stream : cudaStreamLegacy));
    }
    CUDA_TRY(c, cudaStreamWaitEvent(c->nccl->stream, ready, 0));
    if ((status = q->dtype == DP_DTYPE_BF16 ? enqueue_bf16(q) : enqueue(q, q->buf)))
        return status;
    CUDA_TRY(c, cudaEventRecord(events_of(q)->done, c->nccl->stream));
    dp_request_count_bytes(q, dp_request_ring_elements(q), 1);
    return q->joined ? 0 : nccl_advance(q); /* a query would break a capture */
}

/* The joining stream waits for the done event: the collective's result is there for what it
 * queues next, and the communication stream is joined back (inside a capture, into the graph). */
static int nccl_join(dp_request *q, void *stream)
{
    CUDA_TRY(q->comm, cudaStreamWaitEvent((cudaStream_t)stream, events_of(q)->done, 0));
    return 0;
}

/* A slot's events and bf16 buffer; at teardown a failure has nothing left to stop: they go
 * either way. */
static void release_events(dp_request *q)
{
    struct nccl_events *e = events_of(q);
    if (!e)
        return;
    (void)cudaEventDestroy(e->ready);
    (void)cudaEventDestroy(e->done);
    if (e->wire) {
        dp_memory_release(e->wire);
        (void)cudaFree(e->wire);
    }
    free(e);
    q->driver_state = NULL;
}

/* Every slot's events, the communicator and the stream. */
static void nccl_close(dp_comm *c)
{
    for (int i = 0; c->pool && i < c->pool->capacity; i++)
        release_events(c->pool->slots[i]);
    if (!c->nccl)
        return;
    if (c->nccl->comm)
        (void)ncclCommDestroy(c->nccl->comm);
    if (c->nccl->stream)
        (void)cudaStreamDestroy(c->nccl->stream);
    free(c->nccl);
    c->nccl = NULL;
}

static const dp_driver nccl_driver = {.prepare = nccl_prepare, .start = nccl_start, .advance = nccl_advance,
                                     .join = nccl_join};

const struct dp_algorithm dp_algorithm_nccl = {
    .name = "nccl",
    .summary = "NCCL's collectives on GPU memory (--device cuda), on their own stream; the id travels by MPI_Bcast",
    .place = DP_BUFFER_DEVICE,
    .driver = &nccl_driver,
    .scratch_floats = dp_scratch_none,
    .reserve = nccl_reserve,
    .close = nccl_close,
};
