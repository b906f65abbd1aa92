/* The device each rank computes on (the GPU binding is planned over the node's ranks by GPU
 * identity), and the way gradients held there reach the all-reduce: in place (host backend;
 * NCCL or CUDA-aware MPI on the GPU), or staged through page-locked host memory for the
 * algorithms that add on the CPU. */
#include "src/train/trainer.h"

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
static int plan_binding(trainer *t, dp_gpu_binding *binding)
{
    MPI_Comm node;
    DP_MPI_CHECK(MPI_Comm_split_type(t->comm->comm, MPI_COMM_TYPE_SHARED, t->comm->rank, MPI_INFO_NULL, &node));
    int ranks = t->comm->local_size, status = DP_ENOMEM;
    visible_gpus mine = {0};
    mine.count = dp_backend_gpu_ids(mine.ids, DP_MAX_VISIBLE_GPUS);
    visible_gpus *all = dp_calloc((size_t)ranks, sizeof *all, "the node's GPU lists");
    dp_gpu_id *table = dp_calloc((size_t)ranks * DP_MAX_VISIBLE_GPUS, sizeof *table, "the node's GPU lists");
    int *counts = dp_calloc((size_t)ranks, sizeof *counts, "the node's GPU lists");
    if (all && table && counts) {
        int e = MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, node);
        status = e == MPI_SUCCESS ? 0 : dp_mpi_fail(e, "MPI_Allgather of the node's GPU UUIDs", __FILE__, __LINE__);
    }
    for (int r = 0; !status && r < ranks; r++) {
        counts[r] = all[r].count;
        memcpy(&table[(size_t)r * DP_MAX_VISIBLE_GPUS], all[r].ids, sizeof all[r].ids);
    }
    if (!status)
        status = dp_backend_plan_binding(table, counts, ranks, t->comm->local_rank, binding);
    free(all);
    free(table);
    free(counts);
    MPI_Comm_free(&node);
    return status;
}

/* --device auto takes the GPUs only when every rank can have one: all ranks run one backend. */
static int resolve_device(trainer *t, const dp_backend_request *request, dp_device *device)
{
    *device = request->device;
    if (request->device != DP_DEVICE_AUTO)
        return 0;
    double ranks[2] = {dp_backend_cuda_usable(request), dp_backend_gpu_count() > 0}; /* usable, seeing one */
    int status = dp_comm_sum_doubles(t->comm, ranks, 2);
    *device = ranks[0] == (double)t->comm->size ? DP_DEVICE_CUDA : DP_DEVICE_CPU;
    /* GPUs were there but not one per rank: the CPU is a choice the user should hear of. */
    if (!status && *device == DP_DEVICE_CPU && ranks[1] > 0 && t->comm->rank == 0)
        fprintf(stderr, "dp_worker: warning: --device auto: %.0f of %d ranks see a GPU, %.0f could have one of their own: "
                "all ranks train on the CPU (--device cuda --share-gpu shares the GPUs)\n",
                ranks[1], t->comm->size, ranks[0]);
    return status;
}

static int plan_gradient_path(trainer *t)
{
    const dp_options *o = t->o;
    if (t->be->host_memory) {
        t->comm->cuda_aware = 0;
        if (dp_comm_wants_device_buffer(t->comm))
            return dp_fail(DP_EINVAL, "--allreduce %s sums GPU memory, but this run computes on the CPU (%s)",
                           dp_comm_algorithm_name(t->comm),
                           o->device == DP_DEVICE_AUTO ? "--device auto found no GPU for every rank" : "--device cpu");
        return 0;
    }
    int status = dp_comm_set_cuda_aware(t->comm, o->cuda_aware);
    if (status)
        return status;
    t->stage_gradients = t->comm->size > 1 && !dp_comm_wants_device_buffer(t->comm);
    return 0;
}

int dp_trainer_allocate_staging(trainer *t)
{
    /* Stages 0-2 stage the whole flat buffer (gradients; ZeRO's updated parameters); stage 3
     * stages its working buffers itself. */
    if (!t->stage_gradients || dp_dist_model_owns(t->o->zero) == 0)
        return 0;
    t->host_grads = t->be->alloc_host(t->plan.nparams * sizeof(float), "the gradient staging buffer");
    return t->host_grads ? 0 : DP_ENOMEM;
}

int dp_trainer_open_device(trainer *t)
{
    const dp_options *o = t->o;
    dp_gpu_binding binding = {0};
    dp_backend_request request = {.device = o->device, .share_gpu = o->share_gpu, .tf32 = o->tf32,
                                  .rank = t->comm->rank, .local_rank = t->comm->local_rank,
                                  .local_size = t->comm->local_size, .binding = &binding};
    int status = o->device == DP_DEVICE_CPU ? 0 : plan_binding(t, &binding);
    if (!status)
        status = resolve_device(t, &request, &request.device);
    if (!status)
        status = dp_backend_open(&request, &t->be);
    return status ? status : plan_gradient_path(t);
}

void dp_trainer_close_device(trainer *t)
{
    if (!t->be)
        return;
    if (t->host_grads)
        t->be->free_host(t->host_grads);
    t->host_grads = NULL;
    dp_backend_close(t->be);
    t->be = NULL;
}

/* Staging: a bucket's slice of the GPU gradients to the host buffer the algorithm adds in, and back. */
static void stage_out(void *arg, size_t offset, size_t count)
{
    trainer *t = arg;
    t->be->download(t->host_grads + offset, t->model.grads + offset, count * sizeof(float));
}

static void stage_in(void *arg, size_t offset, size_t count)
{
    trainer *t = arg;
    t->be->upload(t->model.grads + offset, t->host_grads + offset, count * sizeof(float));
}

dp_dist_buffers dp_trainer_gradient_buffers(trainer *t)
{
    /* ZeRO's own collectives (its buckets and gathers, even on one rank) need host copies of
     * GPU memory wherever the algorithm adds on the CPU. */
    int staged = !t->be->host_memory && !dp_comm_wants_device_buffer(t->comm);
    dp_dist_buffers buffers = {.comm_grads = t->model.grads, .be = t->be, .weights = t->model.weights,
                               .grads = t->model.grads, .staged = staged};
    if (t->stage_gradients) {
        buffers.comm_grads = t->host_grads;
        buffers.to_comm = stage_out;
        buffers.from_comm = stage_in;
        buffers.arg = t;
    }
    return buffers;
}

const char *dp_trainer_gradient_path(const trainer *t)
{
    static char path[256];
    const char *algorithm = dp_comm_algorithm_name(t->comm);
    const char *collective = t->o->zero ? "reduce-scatter" : "all-reduce";
    if (t->comm->size == 1)
        snprintf(path, sizeof path, "one rank, so its gradient is the sum (no %s)", collective);
    else if (t->be->host_memory)
        snprintf(path, sizeof path, "%s %s in host memory", collective, algorithm);
    else if (t->stage_gradients)
        snprintf(path, sizeof path, "staged GPU -> page-locked host memory -> %s %s -> GPU", collective, algorithm);
    else
        snprintf(path, sizeof path, "%s %s directly on GPU memory", collective, algorithm);
    return path;
}
