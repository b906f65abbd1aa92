/* The gradients' reduction across ranks: the model's flat layout handed to the strategy (one
 * segment per module with parameters, from the parameter table), backward's hook that tells
 * it when each piece of a module's gradients is final, and, for the ZeRO stages that keep
 * parameters or gradients in their own memory, the hook that points each module there before
 * its pass. */
#include "src/train/trainer.h"

#include "dp/error.h"

#include <stdlib.h>

/* --progress-thread auto across hosts: TCP moves a message only inside MPI calls, and 1 ms
 * hid 86-119% of a 4 MiB all-reduce on a 1 Gbit/s link without slowing computation
 * (bench/PROGRESS.md); on one host, shared memory needs no thread. */
#define AUTO_PROGRESS_US 1000

static void on_grad_ready(void *arg, int module, size_t offset, size_t count)
{
    (void)module;
    trainer *t = arg;
    int status = dp_dist_grad_ready(&t->dist, offset, count);
    if (status && !t->dist_status)
        t->dist_status = status;
}

/* Before module's pass: the strategy materialises what it shards (ZeRO-3: the parameters;
 * ZeRO-2 and 3: gradient memory) and the module is pointed there. */
static int on_param_pass(void *arg, int module, int backward)
{
    trainer *t = arg;
    float *weights, *grads;
    int status = dp_dist_before_module(&t->dist, t->segment_of[module], backward, &weights, &grads);
    if (!status)
        dp_model_bind(&t->model, module, weights, grads);
    return status;
}

/* Segments: runs of parameter-table entries owned by one module, in table (forward) order. */
static int plan_segments(trainer *t, dp_dist_layout *layout)
{
    const dp_param_table *params = &t->model.params;
    int modules = t->model.count;
    t->segment_of = malloc((size_t)(modules ? modules : 1) * sizeof *t->segment_of);
    t->segment_offset = malloc((size_t)(params->count ? params->count : 1) * sizeof *t->segment_offset);
    t->segment_count = malloc((size_t)(params->count ? params->count : 1) * sizeof *t->segment_count);
    if (!t->segment_of || !t->segment_offset || !t->segment_count)
        return dp_fail(DP_ENOMEM, "out of memory for the gradient segments");
    for (int m = 0; m < modules; m++)
        t->segment_of[m] = -1;
    int segments = 0;
    for (int i = 0; i < params->count; i++) {
        const dp_param *p = &params->entries[i];
        if (t->segment_of[p->module] < 0) {
            t->segment_of[p->module] = segments;
            t->segment_offset[segments] = p->offset;
            t->segment_count[segments++] = 0;
        }
        t->segment_count[t->segment_of[p->module]] += p->count;
    }
    *layout = (dp_dist_layout){.segments = segments, .offset = t->segment_offset, .count = t->segment_count,
                               .total = t->plan.nparams};
    return 0;
}

int dp_trainer_open_dist(trainer *t)
{
    dp_dist_layout layout;
    int status = plan_segments(t, &layout);
    if (status)
        return status;
    dp_dist_buffers buffers = dp_trainer_gradient_buffers(t);
    dp_dist_config config = dp_dist_default_config(!t->o->no_overlap, t->o->bucket_mb, t->o->zero, t->plan.nparams);
    config.progress_us = t->o->progress_us >= 0 ? t->o->progress_us
                         : t->comm->local_size < t->comm->size ? AUTO_PROGRESS_US : 0;
    if ((status = dp_dist_init(&t->dist, t->comm, &layout, &buffers, &config)))
        return status;
    t->model.grad_ready = on_grad_ready;
    t->model.grad_ready_arg = t;
    t->model.grad_piece_floats = dp_dist_piece_floats(&t->dist);
    if (dp_dist_model_owns(t->o->zero) != DP_MODEL_OWNS_ALL) {
        t->model.param_hook = on_param_pass;
        t->model.param_hook_arg = t;
    }
    return 0;
}

void dp_trainer_close_dist(trainer *t)
{
    dp_dist_free(&t->dist);
    free(t->segment_of);
    free(t->segment_offset);
    free(t->segment_count);
    t->segment_of = NULL;
    t->segment_offset = t->segment_count = NULL;
}
