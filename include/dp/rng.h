/* Deterministic random numbers: splitmix64, so a (seed, stream) pair gives the same values
 * on every rank, machine and run. */
#ifndef DP_RNG_H
#define DP_RNG_H

#include <stdint.h>

typedef struct dp_rng {
    uint64_t state;
} dp_rng;

/* Mixes two 64-bit words into one well-spread seed (for per-epoch or per-purpose streams). */
uint64_t dp_rng_mix(uint64_t a, uint64_t b);

void dp_rng_seed(dp_rng *rng, uint64_t seed);
uint64_t dp_rng_next(dp_rng *rng);
/* Moves n draws ahead at once, as n calls of dp_rng_next would (counter-based: O(1)). */
void dp_rng_skip(dp_rng *rng, uint64_t n);

/* Uniform in [0, 1) with 24 random bits, exact in float32. */
float dp_rng_uniform(dp_rng *rng);

/* Uniform integer in [0, bound); bound > 0. */
uint64_t dp_rng_below(dp_rng *rng, uint64_t bound);

/* Standard normal (Box-Muller). */
double dp_rng_normal(dp_rng *rng);

#endif
