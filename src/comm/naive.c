/* The "CPU master": all gradients travel to rank 0, rank 0 sums them, the sum travels back.
 * Rank 0 receives (W-1) * count floats one rank after another and adds them on one core, so
 * its link and its core are the bottleneck, growing with W: what the ring removes.
 * Reduce-scatter: the same sum, then rank 0 sends each rank its block. All-gather: every
 * rank sends rank 0 its block, then rank 0 broadcasts the whole. The broadcast is a binomial
 * tree of point-to-point messages (as MPI_Bcast's), so it advances like every other round. */
#include "src/comm/algorithms.h"

/* Rank 0 adds every other rank's buffer into buf, in rank order so the sum is deterministic:
 * round s-1 receives from rank s. */
static int gather_sum(dp_request *q, int round, dp_round *r)
{
    const dp_comm *c = q->comm;
    if (c->rank != 0) {
        r->send = (dp_transfer){q->buf, q->count, 0};
        return round == 0;
    }
    int source = round + 1;
    if (source >= c->size)
        return 0;
    r->recv = (dp_transfer){q->scratch, q->count, source};
    r->sum = (dp_sum){q->buf, q->scratch, q->count};
    return 1;
}

/* A hub exchange of rank s's block between rank s and rank 0, towards rank 0 (gather) or
 * away from it (scatter): round s-1 on rank 0, round 0 on rank s. */
static int hub_block(dp_request *q, int round, int to_root, dp_round *r)
{
    const dp_comm *c = q->comm;
    int other = c->rank == 0 ? round + 1 : c->rank;
    if ((c->rank == 0 && other >= c->size) || (c->rank != 0 && round > 0))
        return 0;
    dp_range block = dp_request_block(q, other);
    dp_transfer t = {dp_request_at(q, q->buf, block.begin), dp_range_size(block), c->rank == 0 ? other : 0};
    if ((c->rank == 0) == to_root)
        r->recv = t;
    else
        r->send = t;
    return 1;
}

static int gather_blocks(dp_request *q, int round, dp_round *r)
{
    return hub_block(q, round, 1, r);
}

static int scatter_blocks(dp_request *q, int round, dp_round *r)
{
    return hub_block(q, round, 0, r);
}

/* Round k of a binomial broadcast from rank 0: ranks below 2^k send the whole buffer 2^k on. */
static int broadcast(dp_request *q, int round, dp_round *r)
{
    const dp_comm *c = q->comm;
    int reach = 1 << round;
    if (reach >= c->size)
        return 0;
    if (c->rank < reach && c->rank + reach < c->size)
        r->send = (dp_transfer){q->buf, q->count, c->rank + reach};
    else if (c->rank >= reach && c->rank < 2 * reach)
        r->recv = (dp_transfer){q->buf, q->count, c->rank - reach};
    return 1;
}

static size_t naive_scratch(const dp_comm *c, dp_collective kind, size_t count, size_t largest_block)
{
    return c->rank == 0 ? dp_scratch_whole(c, kind, count, largest_block) : 0;
}

static const dp_phase_fn naive_allreduce[] = {gather_sum, broadcast, NULL};
static const dp_phase_fn naive_reduce_scatter[] = {gather_sum, scatter_blocks, NULL};
static const dp_phase_fn naive_allgather[] = {gather_blocks, broadcast, NULL};

const struct dp_algorithm dp_algorithm_naive = {
    .name = "naive",
    .summary = "every rank sends to rank 0, which sums on the CPU and broadcasts",
    .place = DP_BUFFER_HOST,
    .driver = &dp_schedule_driver,
    .phases = {naive_allreduce, naive_reduce_scatter, naive_allgather},
    .scratch_floats = naive_scratch,
};
