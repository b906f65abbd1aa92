#include "dp/sampler.h"

#include "dp/error.h"
#include "dp/rng.h"

#include <stdlib.h>

int dp_sampler_init(dp_sampler *s, size_t count, uint64_t seed)
{
    s->count = count;
    s->seed = seed;
    s->epoch = -1;
    s->order = dp_alloc(count * sizeof *s->order, "the sampler's permutation");
    return s->order ? 0 : DP_ENOMEM;
}

void dp_sampler_free(dp_sampler *s)
{
    free(s->order);
    s->order = NULL;
}

void dp_sampler_set_epoch(dp_sampler *s, long epoch)
{
    dp_rng rng;
    dp_rng_seed(&rng, dp_rng_mix(s->seed, (uint64_t)epoch));
    for (size_t i = 0; i < s->count; i++)
        s->order[i] = i;
    for (size_t i = s->count; i > 1; i--) {
        size_t j = (size_t)dp_rng_below(&rng, i);
        size_t tmp = s->order[i - 1];
        s->order[i - 1] = s->order[j];
        s->order[j] = tmp;
    }
    s->epoch = epoch;
}

dp_range dp_sampler_step_range(size_t count, size_t step_batch, long step)
{
    dp_range range;
    range.begin = (size_t)step * step_batch;
    range.end = range.begin + step_batch;
    if (range.begin > count)
        range.begin = count;
    if (range.end > count)
        range.end = count;
    return range;
}

long dp_sampler_steps_per_epoch(size_t count, size_t step_batch, int drop_last)
{
    return (long)(drop_last ? count / step_batch : (count + step_batch - 1) / step_batch);
}
