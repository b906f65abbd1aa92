/* Rabenseifner's all-reduce on P = the largest power of two <= W ranks. Reduce-scatter by
 * recursive halving: in step d = P/2, P/4, ..., 1 each rank swaps half of what it still
 * holds with the rank d away and adds the other half, so after log2 P steps it owns one of P
 * blocks, fully summed. All-gather by recursive doubling undoes the steps in reverse order.
 * log2 P steps each instead of the ring's W-1, sending 2 (P-1)/P of the buffer as a ring of P.
 * W not a power of two: the fold in fold.c.
 *
 * The group's P blocks: for the all-reduce, P equal blocks of the buffer (balanced halves);
 * for reduce-scatter and all-gather, group index v's block is the request's blocks of the
 * real ranks it speaks for (both ranks of a folded pair), so each rank ends with its own
 * block. Either way every element is summed over the same tree (pairs at distance P/2, then
 * pairs of pairs, ...) and float addition is commutative, so the bits do not depend on the
 * blocks: the all-reduce equals the reduce-scatter followed by the all-gather bit for bit,
 * and for W a power of two with the request's own blocks their rounds are the same. */
#include "src/comm/algorithms.h"

/* Elements of group blocks [first, first + n). */
static dp_range group_span(const dp_request *q, int first, int n)
{
    const dp_fold_plan *p = &q->fold;
    int last = first + n - 1;
    if (q->kind == DP_ALLREDUCE) {
        dp_range r = {dp_partition(q->count, p->group, first).begin, dp_partition(q->count, p->group, last).end};
        return r;
    }
    /* Index v speaks for real ranks 2v, 2v+1 (v < extra) or v + extra: contiguous, in order. */
    int lowest = first < p->extra ? 2 * first : first + p->extra;
    dp_range r = {dp_request_block(q, lowest).begin, dp_request_block(q, dp_fold_real_rank(p, last)).end};
    return r;
}

static int partner_at(const dp_request *q, int d)
{
    return dp_fold_real_rank(&q->fold, q->fold.index ^ d);
}

/* Recursive halving: each rank keeps the half of its blocks on its side of bit d. */
static int halving(dp_request *q, int round, dp_round *r)
{
    int d = q->fold.group >> (round + 1);
    if (q->fold.index < 0 || d < 1)
        return 0;
    int mine = q->fold.index & ~(d - 1);
    dp_range keep = group_span(q, mine, d), give = group_span(q, mine ^ d, d);
    int partner = partner_at(q, d);
    r->send = (dp_transfer){dp_request_at(q, q->buf, give.begin), dp_range_size(give), partner};
    r->recv = (dp_transfer){q->scratch, dp_range_size(keep), partner};
    r->sum = (dp_sum){dp_request_at(q, q->buf, keep.begin), q->scratch, dp_range_size(keep)};
    return 1;
}

/* Recursive doubling: partners swap the blocks they own, doubling them each step. */
static int doubling(dp_request *q, int round, dp_round *r)
{
    int d = 1 << round;
    if (q->fold.index < 0 || d >= q->fold.group)
        return 0;
    int mine = q->fold.index & ~(d - 1);
    dp_range own = group_span(q, mine, d), other = group_span(q, mine ^ d, d);
    int partner = partner_at(q, d);
    r->send = (dp_transfer){dp_request_at(q, q->buf, own.begin), dp_range_size(own), partner};
    r->recv = (dp_transfer){dp_request_at(q, q->buf, other.begin), dp_range_size(other), partner};
    return 1;
}

static const dp_phase_fn rhd_allreduce[] = {dp_fold_in, halving, doubling, dp_fold_out, NULL};
static const dp_phase_fn rhd_reduce_scatter[] = {dp_fold_in, halving, dp_fold_hand_back, NULL};
const dp_phase_fn dp_doubling_allgather_phases[] = {dp_fold_hand_over, doubling, dp_fold_out, NULL};

const struct dp_algorithm dp_algorithm_rhd = {
    .name = "rhd",
    .summary = "recursive halving reduce-scatter + recursive doubling all-gather (Rabenseifner)",
    .place = DP_BUFFER_HOST,
    .driver = &dp_schedule_driver,
    .phases = {rhd_allreduce, rhd_reduce_scatter, dp_doubling_allgather_phases},
    .plan = dp_plan_fold,
    .scratch_floats = dp_scratch_whole,
};
