/* DDP: every rank keeps the whole model and the whole optimizer state; gradients are summed
 * by all-reduces, bucket by bucket as backward finishes them (PyTorch's Reducer). */
#include "src/strategy/strategy_type.h"

const dp_strategy_type dp_strategy_ddp = {
    .name = "ddp",
    .summary = "PyTorch DDP: every rank holds the whole model and optimizer state; the gradients are "
               "all-reduced bucket by bucket during backward (the default)",
    .captured = 1,
    .gradient_collective = DP_ALLREDUCE,
    .collective_name = "all-reduce",
};
