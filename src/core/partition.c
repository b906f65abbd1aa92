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
