/* Whole flat tensors in and out of a strategy that shards them: the parameters and optimizer
 * state gathered to one rank (checkpoints, --save) or to all (tests), scattered back on
 * --resume, and stage 3's replica check over the gathered parameters. Host memory is the
 * meeting point: MPI's gather and scatter for one rank, the ring's all-gather for all. */
#include "src/strategy/zero_parts.h"

#include "dp/error.h"
#include "dp/zero_plan.h"

#include <stdint.h>
#include <stdlib.h>

static size_t bytes_of(size_t floats)
{
    return floats * sizeof(float);
}

int dp_strategy_gather(dp_strategy *d, const float *data, int sharded, float *host, int root)
{
    const dp_backend *be = d->buffers.be;
    size_t total = d->layout.total;
    int rank = d->comm->rank, whole_here = root < 0 || rank == root;
    if (!sharded) {
        if (whole_here)
            be->download(be, host, data, bytes_of(total));
        return 0;
    }
    dp_range mine = dp_partition(total, d->comm->size, rank);
    float *part = whole_here ? host + mine.begin : host;
    be->download(be, part, data, bytes_of(dp_range_size(mine)));
    /* The ring works on host memory whatever --allreduce is (nccl takes device memory only). */
    return root < 0 ? dp_allgather_ring(d->comm, host, total) : dp_comm_gather_blocks(d->comm, part, host, total, root);
}

int dp_strategy_gather_window(dp_strategy *d, const float *shard, dp_range window, float *host, int root)
{
    size_t total = d->layout.total;
    dp_range mine = dp_partition(total, d->comm->size, d->comm->rank);
    dp_range part = dp_zero_overlap(mine, window.begin, dp_range_size(window));
    size_t n = dp_range_size(part);
    float *at = d->comm->rank == root ? host + (part.begin - window.begin) : host + (part.begin - mine.begin);
    if (n)
        d->buffers.be->download(d->buffers.be, at, shard + (part.begin - mine.begin), bytes_of(n));
    return dp_comm_gather_window(d->comm, at, host, total, window, root);
}

int dp_strategy_scatter(dp_strategy *d, float *host, float *data, int sharded, int root)
{
    const dp_backend *be = d->buffers.be;
    size_t total = d->layout.total;
    int rank = d->comm->rank, status = 0, whole_here = root < 0 || rank == root;
    if (!sharded) {
        if (root >= 0)
            status = dp_comm_broadcast(d->comm, host, bytes_of(total), root);
        if (!status)
            be->upload(be, data, host, bytes_of(total));
        return status;
    }
    dp_range mine = dp_partition(total, d->comm->size, rank);
    float *part = whole_here ? host + mine.begin : host;
    if (root >= 0)
        status = dp_comm_scatter_blocks(d->comm, host, part, total, root);
    if (!status)
        be->upload(be, data, part, bytes_of(dp_range_size(mine)));
    return status;
}

int dp_strategy_gathered_parameters(dp_strategy *d, int unit, float **data)
{
    zero_gather_slot *g;
    int status = dp_zero_gathered(d, unit, &g);
    *data = status ? NULL : g->data;
    return status;
}

void dp_strategy_plan_input(const dp_strategy *d, dp_zero_plan_input *in)
{
    *in = (dp_zero_plan_input){
        .params = d->layout.total, .world = d->comm->size, .rank = d->comm->rank,
        .param_bytes = sizeof(float), .grad_bytes = sizeof(float),
        .bucket_floats = dp_strategy_largest_bucket(d), .unit_floats = dp_strategy_largest_unit(d),
        .grad_slots = dp_zero_grad_slots(d),
        .gather_slots = dp_zero_gather_slots(d),
        .live_bytes = d->block_floats == SIZE_MAX ? 0.0
                                                  : dp_strategy_live_mb(&d->config, d->layout.total, d->comm->size) * (1 << 20),
    };
}
