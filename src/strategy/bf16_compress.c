/* A strategy in one file, to show what adding one takes (its row in registry.c and its test are
 * the rest): DDP whose bucket hook compresses each bucket to bfloat16 for its all-reduce, as
 * PyTorch's bf16_compress_hook does. The comm layer rounds the floats to bfloat16, sums them
 * rounding every partial sum, and widens the result (docs/ALGORITHMS.md, "--grad-dtype"): half
 * the bytes, about 2^-8 relative error per addition, the same bits as DDP with --grad-dtype bf16. */
#include "src/strategy/strategy_type.h"

static int start_in_bf16(void *arg, dp_comm *comm, const dp_request_args *args, dp_request **request)
{
    (void)arg;
    dp_request_args compressed = *args;
    compressed.dtype = DP_DTYPE_BF16;
    return dp_comm_start(comm, &compressed, request);
}

const dp_strategy_type dp_strategy_bf16_compress = {
    .name = "bf16-compress",
    .summary = "DDP whose bucket hook all-reduces each bucket in bfloat16 (PyTorch's bf16_compress_hook; as "
               "--grad-dtype bf16 under DDP): a strategy in one file, the example docs/ARCHITECTURE.md gives",
    .captured = 1,
    .gradient_collective = DP_ALLREDUCE,
    .collective_name = "all-reduce",
    .bucket_start = start_in_bf16,
};
