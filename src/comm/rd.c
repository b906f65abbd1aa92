/* Recursive doubling on P = the largest power of two <= W ranks: at distance d = 1, 2, 4, ...
 * each rank swaps its whole buffer with the rank d away and adds what it receives. After
 * log2 P steps every rank holds the sum; each step's two partners add the same two values in
 * either order, and float addition is commutative, so their bits agree. log2 P messages of
 * the whole buffer instead of rhd's 2 log2 P messages of shrinking parts: fewer latencies,
 * more bytes, so it suits small messages. W not a power of two: the fold in fold.c.
 *
 * rd has no reduce-scatter of its own: its reduce-scatter is the all-reduce (every block
 * ends summed, this rank's among them), log2 P latencies at the all-reduce's volume. Its
 * all-gather is the recursive doubling of blocks, rhd's second half. */
#include "src/comm/algorithms.h"

static int exchange(dp_request *q, int round, dp_round *r)
{
    int d = 1 << round;
    if (q->fold.index < 0 || d >= q->fold.group)
        return 0;
    int partner = dp_fold_real_rank(&q->fold, q->fold.index ^ d);
    r->send = (dp_transfer){q->buf, q->count, partner};
    r->recv = (dp_transfer){q->scratch, q->count, partner};
    r->sum = (dp_sum){q->buf, q->scratch, q->count};
    return 1;
}

static const dp_phase_fn rd_allreduce[] = {dp_fold_in, exchange, dp_fold_out, NULL};

const struct dp_algorithm dp_algorithm_rd = {
    .name = "rd",
    .summary = "recursive doubling: log2(W) rounds of the whole buffer, for small messages",
    .place = DP_BUFFER_HOST,
    .driver = &dp_schedule_driver,
    .phases = {rd_allreduce, rd_allreduce, dp_doubling_allgather_phases},
    .plan = dp_plan_fold,
    .scratch_floats = dp_scratch_whole,
};
