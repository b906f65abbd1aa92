/* Rabenseifner's all-reduce on P = the largest power of two <= W ranks. Reduce-scatter by
 * recursive halving: in step d = P/2, P/4, ..., 1 each rank swaps half of what it still
 * holds with the rank d away and adds the other half, so after log2 P steps it owns one of P
 * blocks, fully summed. All-gather by recursive doubling undoes the steps in reverse order.
 * log2 P steps each instead of the ring's W-1, sending 2 (P-1)/P of the buffer as a ring of P.
 * W not a power of two: the fold in fold.c. */
#include "src/comm/algorithms.h"

#include "dp/error.h"
#include "dp/partition.h"

/* Elements of blocks [first, first + n) when count is split into P blocks. */
static dp_range block_span(const dp_fold_plan *p, size_t count, int first, int n)
{
    dp_range r = {dp_partition(count, p->group, first).begin,
                  dp_partition(count, p->group, first + n - 1).end};
    return r;
}

/* With the rank d away: sends `give` of buf, receives the partner's `take` into dst. Both
 * ranges are d blocks, so the partner computes the same span. */
static int swap_with_partner(dp_comm *c, const dp_fold_plan *p, int d, const float *buf, dp_range give,
                             float *dst, dp_range take, int tag)
{
    int partner = dp_fold_real_rank(p, p->index ^ d);
    size_t span = dp_range_size(give) > dp_range_size(take) ? dp_range_size(give) : dp_range_size(take);
    return dp_sendrecv_floats(c, buf + give.begin, dp_range_size(give), partner, dst,
                              dp_range_size(take), partner, tag, span);
}

/* Recursive halving: each rank keeps the half of its blocks on its side of bit d. */
static int halving_reduce_scatter(dp_comm *c, const dp_fold_plan *p, float *buf, size_t count)
{
    for (int d = p->group / 2; d >= 1; d /= 2) {
        int mine = p->index & ~(d - 1);
        dp_range keep = block_span(p, count, mine, d), give = block_span(p, count, mine ^ d, d);
        float *incoming = dp_comm_scratch(c, dp_range_size(keep));
        if (!incoming)
            return DP_ENOMEM;
        int status = swap_with_partner(c, p, d, buf, give, incoming, keep, DP_TAG_REDUCE_SCATTER);
        if (status)
            return status;
        dp_add_floats(buf + keep.begin, incoming, dp_range_size(keep));
    }
    return 0;
}

/* Recursive doubling: partners swap the blocks they own, doubling them each step. */
static int doubling_allgather(dp_comm *c, const dp_fold_plan *p, float *buf, size_t count)
{
    for (int d = 1; d < p->group; d *= 2) {
        int mine = p->index & ~(d - 1);
        dp_range own = block_span(p, count, mine, d), other = block_span(p, count, mine ^ d, d);
        int status = swap_with_partner(c, p, d, buf, own, buf + other.begin, other, DP_TAG_ALLGATHER);
        if (status)
            return status;
    }
    return 0;
}

/* Both halves on the group of P, which the fold completes to all W ranks. */
static int halving_doubling(dp_comm *c, const dp_fold_plan *p, float *buf, size_t count)
{
    int status = halving_reduce_scatter(c, p, buf, count);
    return status ? status : doubling_allgather(c, p, buf, count);
}

int dp_allreduce_rhd(dp_comm *c, float *buf, size_t count)
{
    return dp_allreduce_folded(c, buf, count, halving_doubling);
}
