/* The device each rank computes on (the GPU binding is planned over the node's ranks by GPU
 * identity), and the way gradients held there reach the all-reduce: in place (host backend;
 * NCCL or CUDA-aware MPI on the GPU), or staged through page-locked host memory for the
 * algorithms that add on the CPU. */
#include "src/engine/parts.h"

#include "dp/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What each rank of a node reports for the binding. */
typedef struct visible_gpus {
    int count;
    dp_gpu_id ids[DP_MAX_VISIBLE_GPUS];
} visible_gpus;

/* The node's ranks exchange the UUIDs of the GPUs they see and plan who binds which, so ranks
 * that each see one different GPU (per-task binding) count as having their own. A rank
 * without CUDA or GPUs reports none. */
static int plan_binding(dp_engine *e, dp_gpu_binding *binding)
{
    MPI_Comm node;
    DP_MPI_CHECK(MPI_Comm_split_type(e->comm->comm, MPI_COMM_TYPE_SHARED, e->comm->rank, MPI_INFO_NULL, &node));
    int ranks = e->comm->local_size, status = DP_ENOMEM;
    visible_gpus mine = {0};
    mine.count = dp_backend_gpu_ids(mine.ids, DP_MAX_VISIBLE_GPUS);
    visible_gpus *all = dp_calloc((size_t)ranks, sizeof *all, "the node's GPU lists");
    dp_gpu_id *table = dp_calloc((size_t)ranks * DP_MAX_VISIBLE_GPUS, sizeof *table, "the node's GPU lists");
    int *counts = dp_calloc((size_t)ranks, sizeof *counts, "the node's GPU lists");
    if (all && table && counts) {
        int error = MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, node);
        status = error == MPI_SUCCESS ? 0 : dp_mpi_fail(error, "MPI_Allgather of the node's GPU UUIDs", __FILE__, __LINE__);
    }
    for (int r = 0; !status && r < ranks; r++) {
        counts[r] = all[r].count;
        memcpy(&table[(size_t)r * DP_MAX_VISIBLE_GPUS], all[r].ids, sizeof all[r].ids);
    }
    if (!status)
        status = dp_backend_plan_binding(table, counts, ranks, e->comm->local_rank, binding);
    free(all);
    free(table);
    free(counts);
    MPI_Comm_free(&node);
    return status;
}

/* --device auto takes the GPUs only when every rank can have one: all ranks run one backend. */
static int resolve_device(dp_engine *e, const dp_backend_request *request, dp_device *device)
{
    *device = request->device;
    if (request->device != DP_DEVICE_AUTO)
        return 0;
    double ranks[2] = {dp_backend_cuda_usable(request), dp_backend_gpu_count() > 0}; /* usable, seeing one */
    int status = dp_comm_sum_doubles(e->comm, ranks, 2);
    *device = ranks[0] == (double)e->comm->size ? DP_DEVICE_CUDA : DP_DEVICE_CPU;
    /* GPUs were there but not one per rank: the CPU is a choice the user should hear of. */
    if (!status && *device == DP_DEVICE_CPU && ranks[1] > 0 && e->comm->rank == 0)
        fprintf(stderr, "dp_worker: warning: --device auto: %.0f of %d ranks see a GPU, %.0f could have one of their own: "
                "all ranks train on the CPU (--device cuda --share-gpu shares the GPUs)\n",
                ranks[1], e->comm->size, ranks[0]);
    return status;
}

/* --allreduce auto: NCCL where every rank computes on a GPU (one backend for all, as
 * resolve_device decides), there is more than one, the build has NCCL and the strategy adds
 * where its gradients are; the host table by message size otherwise. */
static int choose_auto(dp_engine *e, const dp_engine_device *device)
{
    if (strcmp(dp_comm_algorithm_name(e->comm), "auto") != 0)
        return 0;
    const char *gpu = dp_comm_gpu_algorithm_names();
    const char *why = e->be->host_memory ? "the ranks compute on CPUs"
                      : e->comm->size == 1 ? "one rank reduces nothing"
                      : !*gpu ? "this build has no NCCL"
                      : device->sums_on_host;
    if (why) {
        snprintf(e->auto_choice, sizeof e->auto_choice, "the host table by world and message size: %s", why);
        return 0;
    }
    snprintf(e->auto_choice, sizeof e->auto_choice, "auto: every rank computes on a GPU and this build has NCCL");
    return dp_comm_set_algorithm(e->comm, gpu);
}

static int plan_gradient_path(dp_engine *e, const dp_engine_device *device)
{
    int chosen = choose_auto(e, device);
    if (chosen)
        return chosen;
    if (e->be->host_memory) {
        e->comm->cuda_aware = 0;
        if (dp_comm_wants_device_buffer(e->comm))
            return dp_fail(DP_EINVAL, "--allreduce %s sums GPU memory, but this run computes on the CPU (%s)",
                           dp_comm_algorithm_name(e->comm),
                           device->device == DP_DEVICE_AUTO ? "--device auto found no GPU for every rank" : "--device cpu");
        return 0;
    }
    int status = dp_comm_set_cuda_aware(e->comm, device->cuda_aware);
    if (status)
        return status;
    e->stage_gradients = e->comm->size > 1 && !dp_comm_wants_device_buffer(e->comm);
    return 0;
}

int dp_engine_open_device(dp_engine **out, dp_comm *comm, const dp_engine_device *device)
{
    dp_engine *e = *out = dp_calloc(1, sizeof *e, "the engine");
    if (!e)
        return DP_ENOMEM;
    e->comm = comm;
    dp_gpu_binding binding = {0};
    dp_backend_request request = {.device = device->device, .share_gpu = device->share_gpu, .precision = device->precision,
                                  .unfused = device->unfused,
                                  .rank = comm->rank, .local_rank = comm->local_rank,
                                  .local_size = comm->local_size, .binding = &binding};
    int status = device->device == DP_DEVICE_CPU ? 0 : plan_binding(e, &binding);
    if (!status)
        status = resolve_device(e, &request, &request.device);
    if (!status)
        status = dp_backend_open(&request, &e->be);
    if (status)
        return status;
    /* The CPU declines bf16 here, --device auto's fallback included. */
    if (device->precision == DP_PRECISION_BF16 && (status = dp_backend_require(e->be, "gemm", DP_DTYPE_BF16)))
        return status;
    /* nccl's requests order themselves after the work queued on the backend's stream. */
    comm->device_stream = e->be->stream;
    return plan_gradient_path(e, device);
}

/* Staging: a bucket's slice of the GPU gradients to the host buffer the algorithm adds in, and back. */
static void stage_out(void *arg, size_t offset, size_t count)
{
    dp_engine *e = arg;
    e->be->download(e->be, e->host_grads + offset, e->model.grads + offset, count * sizeof(float));
}

static void stage_in(void *arg, size_t offset, size_t count)
{
    dp_engine *e = arg;
    e->be->upload(e->be, e->model.grads + offset, e->host_grads + offset, count * sizeof(float));
}

dp_strategy_buffers dp_engine_gradient_buffers(dp_engine *e)
{
    /* ZeRO's own collectives (its buckets and gathers, even on one rank) need host copies of
     * GPU memory wherever the algorithm adds on the CPU. */
    int staged = !e->be->host_memory && !dp_comm_wants_device_buffer(e->comm);
    dp_strategy_buffers buffers = {.comm_grads = e->model.grads, .be = e->be, .weights = e->model.weights,
                               .grads = e->model.grads, .staged = staged};
    if (e->stage_gradients) {
        buffers.comm_grads = e->host_grads;
        buffers.to_comm = stage_out;
        buffers.from_comm = stage_in;
        buffers.arg = e;
    }
    return buffers;
}

const char *dp_engine_algorithm_choice(const dp_engine *e)
{
    return e->auto_choice;
}

const char *dp_engine_gradient_path(const dp_engine *e)
{
    static char path[256];
    const char *algorithm = dp_comm_algorithm_name(e->comm);
    const char *collective = e->strategy ? dp_strategy_collective(e->strategy) : "all-reduce";
    if (e->comm->size == 1)
        snprintf(path, sizeof path, "one rank, so its gradient is the sum (no %s)", collective);
    else if (e->strategy && dp_strategy_describe_gradients(e->strategy, path, sizeof path))
        ; /* the strategy's own words: local SGD reduces none */
    else if (e->be->host_memory)
        snprintf(path, sizeof path, "%s %s in host memory", collective, algorithm);
    else if (e->stage_gradients)
        snprintf(path, sizeof path, "staged GPU -> page-locked host memory -> %s %s -> GPU", collective, algorithm);
    else
        snprintf(path, sizeof path, "%s %s directly on GPU memory", collective, algorithm);
    return path;
}
