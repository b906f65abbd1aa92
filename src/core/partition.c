#include "dp/partition.h"

dp_range dp_partition(size_t total, int parts, int index)
{
    size_t base = total / (size_t)parts, extra = total % (size_t)parts;
    size_t i = (size_t)index;
    dp_range range;
    range.begin = i * base + (i < extra ? i : extra);
    range.end = range.begin + base + (i < extra ? 1 : 0);
    return range;
}

dp_range dp_partition_blocks(size_t total, size_t block, int parts, int index)
{
    dp_range blocks = dp_partition((total + block - 1) / block, parts, index);
    dp_range range = {blocks.begin * block, blocks.end * block};
    range.begin = range.begin < total ? range.begin : total;
    range.end = range.end < total ? range.end : total;
    return range;
}
