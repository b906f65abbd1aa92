/* The device each rank computes on, and the way gradients held there reach the all-reduce:
 * in place (host backend; NCCL or CUDA-aware MPI on the GPU), or staged through page-locked
 * host memory for the algorithms that add on the CPU. */
#include "src/train/trainer.h"

#include "dp/error.h"

#include <stdio.h>

/* --device auto takes the GPUs only when every rank can have one: all ranks run one backend. */
static int resolve_device(trainer *t, const dp_backend_request *request, dp_device *device)
{
    *device = request->device;
    if (request->device != DP_DEVICE_AUTO)
        return 0;
    double usable = dp_backend_cuda_usable(request);
    int status = dp_comm_sum_doubles(t->comm, &usable, 1);
    *device = usable == (double)t->comm->size ? DP_DEVICE_CUDA : DP_DEVICE_CPU;
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
    if (!t->stage_gradients)
        return 0;
    t->host_grads = t->be->alloc_host(t->plan.nparams * sizeof(float), "the gradient staging buffer");
    return t->host_grads ? 0 : DP_ENOMEM;
}

int dp_trainer_open_device(trainer *t)
{
    const dp_options *o = t->o;
    dp_backend_request request = {.device = o->device, .share_gpu = o->share_gpu, .tf32 = o->tf32,
                                  .rank = t->comm->rank, .local_rank = t->comm->local_rank,
                                  .local_size = t->comm->local_size};
    int status = resolve_device(t, &request, &request.device);
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

int dp_trainer_sync_gradients(trainer *t)
{
    /* One rank's gradient is already the sum. */
    if (t->comm->size == 1)
        return 0;
    float *grads = t->model.grads;
    size_t bytes = t->plan.nparams * sizeof(float);
    if (!t->stage_gradients)
        return dp_comm_allreduce_sum(t->comm, grads, t->plan.nparams);
    t->be->download(t->host_grads, grads, bytes);
    int status = dp_comm_allreduce_sum(t->comm, t->host_grads, t->plan.nparams);
    if (!status)
        t->be->upload(grads, t->host_grads, bytes);
    return status;
}

const char *dp_trainer_gradient_path(const trainer *t)
{
    static char path[256];
    const char *algorithm = dp_comm_algorithm_name(t->comm);
    if (t->comm->size == 1)
        snprintf(path, sizeof path, "one rank, so its gradient is the sum (no all-reduce)");
    else if (t->be->host_memory)
        snprintf(path, sizeof path, "all-reduce %s in host memory", algorithm);
    else if (t->stage_gradients)
        snprintf(path, sizeof path, "staged GPU -> page-locked host memory -> all-reduce %s -> GPU", algorithm);
    else
        snprintf(path, sizeof path, "all-reduce %s directly on GPU memory", algorithm);
    return path;
}
