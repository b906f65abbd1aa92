/* Recursive doubling on P = the largest power of two <= W ranks: at distance d = 1, 2, 4, ...
 * each rank swaps its whole buffer with the rank d away and adds what it receives. After
 * log2 P steps every rank holds the sum; each step's two partners add the same two values in
 * either order, and float addition is commutative, so their bits agree. log2 P messages of
 * the whole buffer instead of rhd's 2 log2 P messages of shrinking parts: fewer latencies,
 * more bytes, so it suits small messages. W not a power of two: the fold in fold.c. */
#include "src/comm/algorithms.h"

static int doubling_exchange(dp_comm *c, const dp_fold_plan *p, float *buf, size_t count)
{
    for (int d = 1; d < p->group; d *= 2) {
        int partner = dp_fold_real_rank(p, p->index ^ d);
        int status = dp_sendrecv_add(c, buf, count, partner, count, partner, DP_TAG_RECURSIVE_DOUBLING);
        if (status)
            return status;
    }
    return 0;
}

int dp_allreduce_rd(dp_comm *c, float *buf, size_t count)
{
    return dp_allreduce_folded(c, buf, count, doubling_exchange);
}
