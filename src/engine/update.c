/* The update: the reduced gradient scaled to a mean, checked for non-finite values, and the
 * optimizer over this rank's range, in one fused pass (or a counting pass first with
 * --on-nan skip). */
#include "config.h"

#include "src/engine/parts.h"

#include "dp/error.h"
#include "dp/nvtx.h"

#include <math.h>
#include <stdio.h>

/* Whether this rank's optimizer updates a shard of the parameters (ZeRO): the ranks then see
 * parts of the gradient and must agree on what they found. */
static int updates_a_shard(const dp_engine *e)
{
    return e->opt.end - e->opt.begin < dp_params_floats(&e->model.params);
}

/* The first tensor holding a NaN or an infinity in values (the summed gradient, or the
 * updated parameters), in the part this rank holds (its shard under ZeRO: the ranks then agree
 * on the lowest); NULL when none does. */
static int first_nonfinite_tensor(dp_engine *e, const float *values, const char **name)
{
    const dp_param_table *params = &e->model.params;
    size_t begin, end;
    dp_strategy_shard(e->strategy, &begin, &end);
    uint64_t first = (uint64_t)params->count;
    for (int i = 0; i < params->count && first == (uint64_t)params->count; i++) {
        const dp_param *p = &params->entries[i];
        size_t lo = p->offset > begin ? p->offset : begin, hi = p->offset + p->count < end ? p->offset + p->count : end;
        if (lo < hi && e->be->count_nonfinite(e->be, values + (lo - begin), hi - lo))
            first = (uint64_t)i;
    }
    int status = 0;
    if (updates_a_shard(e)) {
        status = dp_comm_gather_hashes(e->comm, first, e->rank_values);
        for (int r = 0; !status && r < e->comm->size; r++)
            first = e->rank_values[r] < first ? e->rank_values[r] : first;
    }
    *name = first < (uint64_t)params->count ? params->entries[first].name : NULL;
    return status;
}

/* Reads and clears the optimizer pass's non-finite count: summed over the ranks where each
 * holds a shard of the gradient, so every rank decides alike. */
static int take_nonfinite(dp_engine *e, double *bad)
{
    static const double zero = 0.0;
    *bad = 0.0;
    e->be->download(e->be, bad, e->nonfinite, sizeof *bad);
    if (*bad != 0.0)
        e->be->upload(e->be, e->nonfinite, &zero, sizeof zero);
    return updates_a_shard(e) ? dp_comm_sum_doubles(e->comm, bad, 1) : 0;
}

/* The gradients were finite and the update made parameters non-finite (it overflowed float32).
 * The optimizer state moved with them, so the step cannot be skipped: the job stops. */
static int parameters_overflowed(dp_engine *e, const float *params, double bad, float lr)
{
    const char *first;
    int status = first_nonfinite_tensor(e, params, &first);
    return status ? status : dp_fail(DP_ENUMERIC, "step %ld: the update made %.0f parameter values non-finite, the "
                                     "first in %s, from finite gradients: it overflows float32 (learning rate %g). "
                                     "Stopping", e->steps_done + 1, bad, first ? first : "(none found)", (double)lr);
}

int dp_engine_check_statistics(dp_engine *e)
{
    const dp_param_table *buffers = &e->model.buffers;
    for (int i = 0; i < buffers->count; i++) {
        const dp_param *b = &buffers->entries[i];
        if (b->dtype != DP_DTYPE_F32)
            continue;
        size_t bad = e->be->count_nonfinite(e->be, e->model.buffer_values + b->offset, b->count);
        if (bad)
            return dp_fail(DP_ENUMERIC, "step %ld: %zu value%s of the running statistics %s became non-finite: a "
                           "batch's mean or variance overflows float32 (inputs of 1e19 or more square past it). "
                           "Stopping: a checkpoint or --save would hold values --init and --resume refuse",
                           e->steps_done + 1, bad, bad == 1 ? "" : "s", b->name);
    }
    return 0;
}

void dp_engine_prepare_step(dp_engine *e, float grad_scale, float lr)
{
    e->grad_scale = grad_scale;
    e->lr = lr;
    *e->host_step_number = (uint64_t)e->steps_done;
    e->be->upload_queued(e->be, e->step_number, e->host_step_number, sizeof *e->step_number);
    /* --on-nan skip scales in its counting pass, so its applying pass scales by 1. */
    dp_optimizer_prepare(&e->opt, grad_scale, e->skip_nonfinite ? 1.0f : grad_scale, lr);
}

void dp_engine_update_pass(dp_engine *e)
{
    float *params, *grads;
    dp_strategy_update_memory(e->strategy, &params, &grads);
    dp_optimizer_step(&e->opt, params, grads, 1, e->nonfinite);
}

/* After a pass that counted bad non-finite values: which, and whether the step stops. */
static int nonfinite_found(dp_engine *e, double bad, float lr)
{
    float *params, *grads;
    dp_strategy_update_memory(e->strategy, &params, &grads);
    const char *first;
    int status = first_nonfinite_tensor(e, grads, &first);
    if (status)
        return status;
    if (!first)
        return parameters_overflowed(e, params, bad, lr);
    char why[256];
    if ((status = dp_strategy_explain_nonfinite(e->strategy, why, sizeof why)))
        return status;
    if (!e->skip_nonfinite)
        return dp_fail(DP_ENUMERIC, "step %ld: %.0f non-finite gradient values, the first in %s%s%s. Stopping "
                       "(--on-nan abort; --on-nan skip would drop such steps)", e->steps_done + 1, bad, first,
                       why[0] ? ": " : "", why);
    e->skipped_steps++;
    if (e->comm->rank == 0)
        fprintf(stderr, "dp_worker: warning: step %ld: %.0f non-finite gradient values, the first in %s%s%s; "
                        "update skipped (--on-nan skip, %ld skipped so far)\n",
                e->steps_done + 1, bad, first, why[0] ? ": " : "", why, e->skipped_steps);
    return 0;
}

int dp_engine_update_check(dp_engine *e, float lr)
{
    double bad;
    int status = take_nonfinite(e, &bad);
    return status || bad == 0.0 ? status : nonfinite_found(e, bad, lr);
}

/* torch.nn.utils.clip_grad_norm_: the norm of the averaged gradient (grad_scale times the reduced
 * sum, rounded as the pass rounds it) over every parameter and rank: this rank's range summed in
 * a fixed order (the whole gradient, so --exact's norm is the same bits on any W), and where the
 * range is a shard the shards' sums added over the ranks. Above max, the applying pass scales the
 * gradient by max / (norm + 1e-6) too; a non-finite norm is a non-finite gradient, which the pass
 * counts and --on-nan decides on, unclipped. */
int dp_engine_clip(dp_engine *e)
{
    static const double zero = 0.0;
    float *params, *grads;
    dp_strategy_update_memory(e->strategy, &params, &grads);
    double squares = 0.0;
    e->be->sum_squares(e->be, grads, e->opt.end - e->opt.begin, e->grad_scale, e->squares);
    e->be->download(e->be, &squares, e->squares, sizeof squares);
    e->be->upload(e->be, e->squares, &zero, sizeof zero);
    int status = updates_a_shard(e) ? dp_comm_sum_doubles(e->comm, &squares, 1) : 0;
    e->grad_norm = sqrt(squares);
    double coef = (double)e->clip_grad_norm / (e->grad_norm + 1e-6);
    e->clipped = !status && isfinite(e->grad_norm) && coef < 1.0;
    /* --on-nan skip's counting pass scales by grad_scale and its applying pass by 1 (then by coef). */
    float apply_scale = e->skip_nonfinite ? 1.0f : e->grad_scale;
    if (e->clipped)
        dp_optimizer_prepare(&e->opt, e->grad_scale, (float)((double)apply_scale * coef), e->lr);
    return status;
}

static int update(dp_engine *e, float lr);

/* The update as one range on Nsight Systems' timeline (the CUDA build). */
int dp_engine_update(dp_engine *e, float lr)
{
    dp_nvtx_push("update", -1);
    int status = update(e, lr);
    dp_nvtx_pop();
    return status;
}

static int update(dp_engine *e, float lr)
{
    int status = e->clip_grad_norm > 0.0f ? dp_engine_clip(e) : 0;
    if (status)
        return status;
    /* --on-nan abort updates in the same pass (a bad step ends the job anyway); skip counts first.
     * The pass counts non-finite gradients and, when it updates, non-finite results. */
    if (!e->skip_nonfinite) {
        dp_engine_update_pass(e);
        return dp_engine_update_check(e, lr);
    }
    float *params, *grads;
    dp_strategy_update_memory(e->strategy, &params, &grads);
    dp_optimizer_step(&e->opt, params, grads, 0, e->nonfinite);
    double bad;
    status = take_nonfinite(e, &bad);
    if (status || bad != 0.0)
        return status ? status : nonfinite_found(e, bad, lr);
    dp_optimizer_step(&e->opt, params, grads, 1, e->nonfinite);
    status = take_nonfinite(e, &bad);
    return status || bad == 0.0 ? status : parameters_overflowed(e, params, bad, lr);
}
