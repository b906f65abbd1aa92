#include "dp/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t dp_rng_mix(uint64_t a, uint64_t b)
{
    uint64_t state = a ^ (b * 0xd1b54a32d192ed03ULL);
    return splitmix64(&state);
}

void dp_rng_seed(dp_rng *rng, uint64_t seed)
{
    rng->state = seed;
}

void dp_rng_skip(dp_rng *rng, uint64_t n)
{
    rng->state += n * 0x9e3779b97f4a7c15ULL; /* splitmix64's state steps by this constant per draw */
}

uint64_t dp_rng_next(dp_rng *rng)
{
    return splitmix64(&rng->state);
}

float dp_rng_uniform(dp_rng *rng)
{
    return (float)(dp_rng_next(rng) >> 40) * (1.0f / 16777216.0f);
}

uint64_t dp_rng_below(dp_rng *rng, uint64_t bound)
{
    /* Rejection removes modulo bias, so permutations are exactly uniform. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do {
        x = dp_rng_next(rng);
    } while (x >= limit);
    return x % bound;
}

double dp_rng_normal(dp_rng *rng)
{
    double u1 = ((double)(dp_rng_next(rng) >> 11) + 1.0) * 0x1.0p-53;
    double u2 = (double)(dp_rng_next(rng) >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}
