/* Splitting N items over P parts: the first N % P parts get one item more, so sizes differ
 * by at most one. Used for batch slices (data) and collective blocks (comm) alike. */
#ifndef DP_PARTITION_H
#define DP_PARTITION_H

#include <stddef.h>

typedef struct dp_range {
    size_t begin, end; /* half-open */
} dp_range;

static inline size_t dp_range_size(dp_range r)
{
    return r.end - r.begin;
}

/* Part `index` (0-based) of `total` items split into `parts` contiguous parts. */
dp_range dp_partition(size_t total, int parts, int index);

/* Part `index` of `total` items cut into blocks of `block` (the last may be shorter) and the
 * blocks split as dp_partition splits items: every part holds whole blocks, and a block's
 * items are the same whatever `parts` is. */
dp_range dp_partition_blocks(size_t total, size_t block, int parts, int index);

#endif
