/* The ZeRO paper's memory per rank (Rajbhandari et al. 2019, section 5): stage 1 shards the
 * optimizer state, stage 2 also the gradients, stage 3 also the parameters; each shard is
 * this rank's dp_partition of the flat buffer. Working buffers are what this implementation
 * adds to hold gradient buckets and gathered parameters while they are reduced or used: whole
 * modules, or under --zero-live-mb blocks of rows, so they stay under the budget. */
#include "dp/zero_plan.h"

#include "dp/partition.h"

size_t dp_zero_slot_floats(size_t n)
{
    return n ? n + DP_ZERO_SLOT_ALIGN_FLOATS : 0;
}

float *dp_zero_aligned_like(float *base, size_t offset)
{
    return base + offset % DP_ZERO_SLOT_ALIGN_FLOATS;
}

dp_zero_plan dp_zero_predict(const dp_zero_plan_input *in, int stage)
{
    double all = (double)in->params;
    double shard = (double)dp_range_size(dp_partition(in->params, in->world, in->rank));
    dp_zero_plan p = {
        .params = (stage >= 3 ? shard : all) * in->param_bytes,
        .grads = (stage >= 2 ? shard : all) * in->grad_bytes,
        .optimizer = (stage >= 1 ? shard : all) * in->state_bytes,
    };
    if (stage >= 2)
        p.working += (double)in->grad_slots * (double)dp_zero_slot_floats(in->bucket_floats) * in->grad_bytes;
    if (stage >= 3)
        p.working += (double)in->gather_slots * (double)dp_zero_slot_floats(in->unit_floats) * in->param_bytes;
    return p;
}
