/* The sampler: which samples every rank trains on. An epoch's order is a permutation drawn
 * from (seed, epoch) alone, so every rank computes the same order without communicating. */
#ifndef DP_SAMPLER_H
#define DP_SAMPLER_H

#include "dp/partition.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dp_sampler {
    size_t count;   /* samples in the dataset */
    uint64_t seed;
    long epoch;     /* epoch whose permutation `order` holds; -1 before the first */
    size_t *order;  /* permutation of 0..count-1 */
} dp_sampler;

int dp_sampler_init(dp_sampler *s, size_t count, uint64_t seed);
void dp_sampler_free(dp_sampler *s);

/* Draws the permutation of `epoch` (Fisher-Yates from dp_rng_mix(seed, epoch)). */
void dp_sampler_set_epoch(dp_sampler *s, long epoch);

/* Positions [begin, end) in the epoch order of optimizer step `step` whose global batch is
 * `step_batch` samples; the last step of an epoch may be shorter. */
dp_range dp_sampler_step_range(size_t count, size_t step_batch, long step);

/* Optimizer steps in one epoch: a short last batch counts unless drop_last. */
long dp_sampler_steps_per_epoch(size_t count, size_t step_batch, int drop_last);

#endif
