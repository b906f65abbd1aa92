/* The "CPU master": all gradients travel to rank 0, rank 0 sums them, the sum travels back.
 * Rank 0 receives (W-1) * count floats one rank after another and adds them on one core, so
 * its link and its core are the bottleneck, growing with W: what the ring removes. */
#include "src/comm/algorithms.h"

/* Rank 0: adds every other rank's buffer into buf, in rank order so the sum is deterministic. */
static int sum_on_root(dp_comm *c, float *buf, size_t count)
{
    for (int source = 1; source < c->size; source++) {
        int status = dp_sendrecv_add(c, buf, 0, MPI_PROC_NULL, count, source, DP_TAG_GATHER);
        if (status)
            return status;
    }
    return 0;
}

int dp_allreduce_naive(dp_comm *c, float *buf, size_t count)
{
    if (count == 0)
        return 0;
    int status = c->rank == 0
                     ? sum_on_root(c, buf, count)
                     : dp_sendrecv_floats(c, buf, count, 0, buf, 0, MPI_PROC_NULL, DP_TAG_GATHER, count);
    return status ? status : dp_broadcast_bytes(c, buf, count * sizeof(float), 0);
}
