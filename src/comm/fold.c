/* The standard fold that lets a power-of-two schedule (rhd, rd) run on any W. P is the
 * largest power of two <= W; the first 2 (W-P) ranks pair up, each even one hands its buffer
 * to the odd one after it and waits; the odd one takes part for both and hands the result
 * back. Every rank ends with the group's bits, since the sitting-out rank receives them.
 * For a reduce-scatter or an all-gather only the even rank's own block needs to travel back
 * or over: the odd one speaks for both blocks in the group. */
#include "src/comm/algorithms.h"

dp_fold_plan dp_fold_plan_for(const dp_comm *c)
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

void dp_plan_fold(dp_request *q)
{
    q->fold = dp_fold_plan_for(q->comm);
}

static int sits_out(const dp_request *q)
{
    return q->fold.index < 0;
}

static int folds(const dp_request *q)
{
    return q->fold.index >= 0 && q->fold.index < q->fold.extra;
}

/* One round that moves `block` from the sitting-out rank to its partner (to_partner) or
 * back; the partner adds what arrives when `add` is set. Ranks outside a pair have none. */
static int pair_round(dp_request *q, int round, dp_range block, int to_partner, int add, dp_round *r)
{
    if (round > 0 || (!sits_out(q) && !folds(q)))
        return 0;
    int sender = sits_out(q) == to_partner, peer = sits_out(q) ? q->comm->rank + 1 : q->comm->rank - 1;
    void *data = dp_request_at(q, q->buf, block.begin);
    size_t n = dp_range_size(block);
    if (sender)
        r->send = (dp_transfer){data, n, peer};
    else if (add) {
        r->recv = (dp_transfer){q->scratch, n, peer};
        r->sum = (dp_sum){data, q->scratch, n};
    } else
        r->recv = (dp_transfer){data, n, peer};
    return 1;
}

static dp_range whole(const dp_request *q)
{
    dp_range all = {0, q->count};
    return all;
}

/* The even (sitting-out) rank's block: the one that travels for reduce-scatter and all-gather. */
static dp_range even_block(const dp_request *q)
{
    return dp_request_block(q, sits_out(q) ? q->comm->rank : q->comm->rank - 1);
}

int dp_fold_in(dp_request *q, int round, dp_round *out)
{
    return pair_round(q, round, whole(q), 1, 1, out);
}

int dp_fold_out(dp_request *q, int round, dp_round *out)
{
    return pair_round(q, round, whole(q), 0, 0, out);
}

int dp_fold_hand_back(dp_request *q, int round, dp_round *out)
{
    return pair_round(q, round, even_block(q), 0, 0, out);
}

int dp_fold_hand_over(dp_request *q, int round, dp_round *out)
{
    return pair_round(q, round, even_block(q), 1, 0, out);
}
