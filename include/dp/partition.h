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

#endif
