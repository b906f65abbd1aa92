/* The step's default shape: the step cut into micro-batches of --batch global rows (the last
 * may be shorter), this rank taking its slice of each (dp_partition: sizes differ by at most
 * one). Backward adds each micro-batch into the last one's gradients unless the strategy
 * reduces every micro-batch (ZeRO 2 and 3 keep no whole gradient to add them in), and only the
 * step's last one communicates where it adds (DDP's no_sync). */
#include "src/strategy/strategy_type.h"

#include "dp/error.h"

static dp_range micro_range(const dp_strategy *d, dp_range step, size_t k)
{
    size_t micro = d->config.micro_batch, begin = step.begin + k * micro;
    return (dp_range){begin, begin + micro < step.end ? begin + micro : step.end};
}

size_t dp_strategy_micro_groups(const dp_strategy *d, dp_range step)
{
    return (dp_range_size(step) + d->config.micro_batch - 1) / d->config.micro_batch;
}

void dp_strategy_micro_group(const dp_strategy *d, dp_range step, size_t k, dp_row_group *group)
{
    dp_range micro = micro_range(d, step, k);
    dp_range mine = dp_partition(dp_range_size(micro), d->comm->size, d->comm->rank);
    int last = k + 1 == dp_strategy_micro_groups(d, step);
    *group = (dp_row_group){.rows = {micro.begin + mine.begin, micro.begin + mine.end},
                            .communicates = last, .accumulate = k != 0 && !d->type->reduces_every_micro,
                            .moves_running = 1, .last = last};
}

size_t dp_strategy_micro_rows(const dp_strategy_choice *c, size_t micro_batch, size_t step_batch, int world)
{
    (void)c;
    (void)step_batch;
    return (micro_batch + (size_t)world - 1) / (size_t)world;
}

/* BatchNorm's statistics need two values per feature (rows x H x W, as PyTorch counts them):
 * per rank, or per global micro-batch with sync; the smallest micro-batch is a full one or the
 * last of a short last step. */
int dp_strategy_check_micro_rows(const dp_strategy_choice *c, const dp_strategy_run *run)
{
    (void)c;
    if (!run->step_batch || !run->batchnorms)
        return 0;
    size_t micro = run->micro_batch, last = run->last_step % micro ? run->last_step % micro : micro;
    size_t slice = last / (size_t)run->world, per_row = (size_t)run->statistic_values;
    if (run->batchnorms > run->sync_batchnorms && slice * per_row < 2)
        return dp_fail(DP_EINVAL, "--model '%s': a BatchNorm without sync needs at least 2 values per feature on "
                       "each rank in every micro-batch (rows x H x W), but some rank gets %zu row%s of %zu value%s "
                       "each (a micro-batch of %zu over %d ranks); use --sync-bn, a larger --batch%s", run->model, slice,
                       slice == 1 ? "" : "s", per_row, per_row == 1 ? "" : "s", last, run->world, run->drop_last ? "" : ", or --drop-last");
    if (last * per_row < 2)
        return dp_fail(DP_EINVAL, "--model '%s': a BatchNorm needs at least 2 values per feature in every "
                       "micro-batch (rows x H x W), but one has %zu row%s of %zu value%s each%s", run->model,
                       last, last == 1 ? "" : "s", per_row, per_row == 1 ? "" : "s", run->drop_last ? "" : " (try --drop-last)");
    return 0;
}
