/* What a GPU's warps and blocks do between threads, done on the host in the same order:
 * the butterfly (__shfl_xor_sync) steps of cuda_reductions.cu and the kernels' shared-memory
 * tree sums.
 * Used by the fake kernels (kernels.c) and tests/test_kernel_math.c; plain C, no CUDA. */
#ifndef DP_FAKECUDA_EMULATE_H
#define DP_FAKECUDA_EMULATE_H

#include "src/backend/kernel_grid.h"

#include <string.h>

/* The row's argmax as a warp finds it: each lane's scan, then butterfly steps in which lane l
 * merges lane l ^ offset's candidate. Returns 1 when every lane ends on the same answer (the
 * kernel relies on it), which is lane 0's. */
static inline int dp_emulate_warp_argmax(const float *z, int cols, float *top, int *best)
{
    float v[DP_WARP], next_v[DP_WARP];
    int at[DP_WARP], next_at[DP_WARP];
    for (int lane = 0; lane < DP_WARP; lane++)
        dp_argmax_lane(z, cols, lane, &v[lane], &at[lane]);
    for (int offset = DP_WARP / 2; offset > 0; offset /= 2) {
        for (int lane = 0; lane < DP_WARP; lane++) {
            next_v[lane] = v[lane];
            next_at[lane] = at[lane];
            dp_argmax_merge(&next_v[lane], &next_at[lane], v[lane ^ offset], at[lane ^ offset]);
        }
        memcpy(v, next_v, sizeof v);
        memcpy(at, next_at, sizeof at);
    }
    *top = v[0];
    *best = at[0];
    for (int lane = 1; lane < DP_WARP; lane++)
        if (at[lane] != at[0])
            return 0;
    return 1;
}

/* Butterfly sum of one value per lane: lane l adds lane l ^ offset's, in place. */
static inline void dp_emulate_warp_sum(double lanes[DP_WARP])
{
    double next[DP_WARP];
    for (int offset = DP_WARP / 2; offset > 0; offset /= 2) {
        for (int lane = 0; lane < DP_WARP; lane++)
            next[lane] = dp_dadd(lanes[lane], lanes[lane ^ offset]);
        memcpy(lanes, next, sizeof next);
    }
}

/* The block's shared-memory tree: lanes[t] += lanes[t + half] for half = DP_THREADS/2 ... 1. */
static inline double dp_emulate_block_sum(double lanes[DP_THREADS])
{
    for (int half = DP_THREADS / 2; half > 0; half /= 2)
        for (int t = 0; t < half; t++)
            lanes[t] = dp_dadd(lanes[t], lanes[t + half]);
    return lanes[0];
}

#endif
