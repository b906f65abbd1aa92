/* Rabenseifner's all-reduce on P = the largest power of two <= W ranks. Reduce-scatter by
 * recursive halving: in step d = P/2, P/4, ..., 1 each rank swaps half of what it still
 * holds with the rank d away and adds the other half, so after log2 P steps it owns one of P
 * blocks, fully summed. All-gather by recursive doubling undoes the steps in reverse order.
 * log2 P steps each instead of the ring's W-1, sending 2 (P-1)/P of the buffer as a ring of P.
 * W not a power of two: the first 2 (W-P) ranks pair up, each even one hands its buffer to
 * the odd one after it and waits; the odd one takes part for both and hands the result back. */
#include "src/comm/algorithms.h"

#include "dp/error.h"
#include "dp/partition.h"

typedef struct rhd_plan {
    int group;   /* P */
    int extra;   /* W - P: ranks that fold into a partner */
    int index;   /* this rank's index among the P, or -1 for a rank that sits out */
} rhd_plan;

static rhd_plan plan_for(const dp_comm *c)
{
    rhd_plan p = {.group = 1};
    while (p.group * 2 <= c->size)
        p.group *= 2;
    p.extra = c->size - p.group;
    if (c->rank >= 2 * p.extra)
        p.index = c->rank - p.extra;
    else
        p.index = c->rank % 2 ? c->rank / 2 : -1;
    return p;
}

/* The real rank behind index v of the P. */
static int real_rank(const rhd_plan *p, int v)
{
    return v < p->extra ? 2 * v + 1 : v + p->extra;
}

/* Elements of blocks [first, first + n) when count is split into P blocks. */
static dp_range block_span(const rhd_plan *p, size_t count, int first, int n)
{
    dp_range r = {dp_partition(count, p->group, first).begin,
                  dp_partition(count, p->group, first + n - 1).end};
    return r;
}

/* With the rank d away: sends `give` of buf, receives the partner's `take` into dst. Both
 * ranges are d blocks, so the partner computes the same span. */
static int swap_with_partner(dp_comm *c, const rhd_plan *p, int d, const float *buf, dp_range give,
                             float *dst, dp_range take, int tag)
{
    int partner = real_rank(p, p->index ^ d);
    size_t span = dp_range_size(give) > dp_range_size(take) ? dp_range_size(give) : dp_range_size(take);
    return dp_sendrecv_floats(c, buf + give.begin, dp_range_size(give), partner, dst,
                              dp_range_size(take), partner, tag, span);
}

/* Recursive halving: each rank keeps the half of its blocks on its side of bit d. */
static int halving_reduce_scatter(dp_comm *c, const rhd_plan *p, float *buf, size_t count)
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
static int doubling_allgather(dp_comm *c, const rhd_plan *p, float *buf, size_t count)
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

/* An extra rank (even, below 2 (W-P)) hands its buffer over and gets the result back. */
static int sit_out(dp_comm *c, float *buf, size_t count)
{
    int partner = c->rank + 1;
    int status = dp_sendrecv_floats(c, buf, count, partner, buf, 0, MPI_PROC_NULL, DP_TAG_FOLD_IN, count);
    return status ? status
                  : dp_sendrecv_floats(c, buf, 0, MPI_PROC_NULL, buf, count, partner, DP_TAG_FOLD_OUT, count);
}

/* The partner of an extra rank adds its buffer before the group's work starts. */
static int fold_in(dp_comm *c, float *buf, size_t count)
{
    float *incoming = dp_comm_scratch(c, count);
    if (!incoming)
        return DP_ENOMEM;
    int status = dp_sendrecv_floats(c, buf, 0, MPI_PROC_NULL, incoming, count, c->rank - 1,
                                    DP_TAG_FOLD_IN, count);
    if (!status)
        dp_add_floats(buf, incoming, count);
    return status;
}

int dp_allreduce_rhd(dp_comm *c, float *buf, size_t count)
{
    if (count == 0 || c->size == 1)
        return 0;
    rhd_plan p = plan_for(c);
    if (p.index < 0)
        return sit_out(c, buf, count);
    int folds = p.index < p.extra;
    int status = folds ? fold_in(c, buf, count) : 0;
    if (!status)
        status = halving_reduce_scatter(c, &p, buf, count);
    if (!status)
        status = doubling_allgather(c, &p, buf, count);
    if (!status && folds)
        status = dp_sendrecv_floats(c, buf, count, c->rank - 1, buf, 0, MPI_PROC_NULL,
                                    DP_TAG_FOLD_OUT, count);
    return status;
}
