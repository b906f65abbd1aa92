/* The update: the reduced gradient scaled to a mean, checked for non-finite values, and the
 * optimizer over this rank's range, in one fused pass (or a counting pass first with
 * --on-nan skip). */
#include "src/engine/parts.h"

#include "dp/error.h"

#include <stdio.h>

/* The first tensor whose summed gradient holds a NaN or an infinity, in the part of the
 * gradient this rank holds (its shard under ZeRO: the ranks then agree on the lowest). */
static int first_nonfinite_tensor(dp_engine *e, const char **name)
{
    const dp_param_table *params = &e->model.params;
    size_t begin, end;
    float *unused, *grads;
    dp_strategy_shard(&e->strategy, &begin, &end);
    dp_strategy_update_memory(&e->strategy, &unused, &grads);
    uint64_t first = (uint64_t)params->count;
    for (int i = 0; i < params->count && first == (uint64_t)params->count; i++) {
        const dp_param *p = &params->entries[i];
        size_t lo = p->offset > begin ? p->offset : begin, hi = p->offset + p->count < end ? p->offset + p->count : end;
        if (lo < hi && e->be->count_nonfinite(grads + (lo - begin), hi - lo))
            first = (uint64_t)i;
    }
    int status = 0;
    if (dp_strategy_shards_state(&e->strategy)) {
        status = dp_comm_gather_hashes(e->comm, first, e->rank_values);
        for (int r = 0; !status && r < e->comm->size; r++)
            first = e->rank_values[r] < first ? e->rank_values[r] : first;
    }
    *name = first < (uint64_t)params->count ? params->entries[first].name : "(none found)";
    return status;
}

/* Reads and clears the optimizer pass's non-finite count: summed over the ranks where each
 * holds a shard of the gradient, so every rank decides alike. */
static int take_nonfinite(dp_engine *e, double *bad)
{
    static const double zero = 0.0;
    *bad = 0.0;
    e->be->download(bad, e->nonfinite, sizeof *bad);
    if (*bad != 0.0)
        e->be->upload(e->nonfinite, &zero, sizeof zero);
    return dp_strategy_shards_state(&e->strategy) ? dp_comm_sum_doubles(e->comm, bad, 1) : 0;
}

int dp_engine_update(dp_engine *e, float grad_scale, float lr)
{
    float *params, *grads;
    dp_strategy_update_memory(&e->strategy, &params, &grads);
    int skip = e->skip_nonfinite;
    /* --on-nan abort updates in the same pass (a bad step ends the job anyway); skip counts first. */
    dp_optimizer_step(&e->opt, params, grads, grad_scale, lr, !skip, e->nonfinite);
    double bad;
    int status = take_nonfinite(e, &bad);
    if (status || bad == 0.0) {
        if (!status && skip)
            dp_optimizer_step(&e->opt, params, grads, 1.0f, lr, 1, e->nonfinite);
        return status;
    }
    const char *first;
    if ((status = first_nonfinite_tensor(e, &first)))
        return status;
    if (!skip)
        return dp_fail(DP_ENUMERIC, "step %ld: %.0f non-finite gradient values, the first in %s. Stopping "
                       "(--on-nan abort; --on-nan skip would drop such steps)", e->steps_done + 1, bad, first);
    e->skipped_steps++;
    if (e->comm->rank == 0)
        fprintf(stderr, "dp_worker: warning: step %ld: %.0f non-finite gradient values, the first in %s; "
                        "update skipped (--on-nan skip, %ld skipped so far)\n",
                e->steps_done + 1, bad, first, e->skipped_steps);
    return 0;
}
