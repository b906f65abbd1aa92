/* The standard fold that lets a power-of-two algorithm (rhd, rd) run on any W. P is the
 * largest power of two <= W; the first 2 (W-P) ranks pair up, each even one hands its buffer
 * to the odd one after it and waits; the odd one takes part for both and hands the result
 * back. Every rank ends with the group's bits, since the sitting-out rank receives them. */
#include "src/comm/algorithms.h"

static dp_fold_plan plan_for(const dp_comm *c)
{
    dp_fold_plan p = {.group = 1};
    while (p.group * 2 <= c->size)
        p.group *= 2;
    p.extra = c->size - p.group;
    if (c->rank >= 2 * p.extra)
        p.index = c->rank - p.extra;
    else
        p.index = c->rank % 2 ? c->rank / 2 : -1;
    return p;
}

int dp_fold_real_rank(const dp_fold_plan *p, int v)
{
    return v < p->extra ? 2 * v + 1 : v + p->extra;
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
    return dp_sendrecv_add(c, buf, 0, MPI_PROC_NULL, count, c->rank - 1, DP_TAG_FOLD_IN);
}

int dp_allreduce_folded(dp_comm *c, float *buf, size_t count, dp_group_allreduce_fn on_group)
{
    if (count == 0 || c->size == 1)
        return 0;
    dp_fold_plan p = plan_for(c);
    if (p.index < 0)
        return sit_out(c, buf, count);
    int folds = p.index < p.extra;
    int status = folds ? fold_in(c, buf, count) : 0;
    if (!status)
        status = on_group(c, &p, buf, count);
    if (!status && folds)
        status = dp_sendrecv_floats(c, buf, count, c->rank - 1, buf, 0, MPI_PROC_NULL,
                                    DP_TAG_FOLD_OUT, count);
    return status;
}
