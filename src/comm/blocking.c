/* The blocking forms of the requests: start + wait, with c's algorithm or a fixed one. */
#include "dp/comm.h"

#include "src/comm/algorithms.h"

static int run_own_blocks(dp_comm *c, dp_collective kind, float *buf, size_t count, const char *label,
                          const struct dp_algorithm *algorithm)
{
    dp_request_args a = {.kind = kind, .buf = buf, .count = count, .label = label};
    return dp_request_run(c, &a, algorithm);
}

int dp_comm_run(dp_comm *c, const dp_request_args *args)
{
    return dp_request_run(c, args, c->algorithm);
}

int dp_comm_allreduce_sum(dp_comm *c, float *buf, size_t count)
{
    return run_own_blocks(c, DP_ALLREDUCE, buf, count, "the gradient", c->algorithm);
}

int dp_comm_reduce_scatter(dp_comm *c, float *buf, size_t count)
{
    return run_own_blocks(c, DP_REDUCE_SCATTER, buf, count, NULL, c->algorithm);
}

int dp_comm_allgather(dp_comm *c, float *buf, size_t count)
{
    return run_own_blocks(c, DP_ALLGATHER, buf, count, NULL, c->algorithm);
}

int dp_reduce_scatter_ring(dp_comm *c, float *buf, size_t count)
{
    return run_own_blocks(c, DP_REDUCE_SCATTER, buf, count, NULL, &dp_algorithm_ring);
}

int dp_allgather_ring(dp_comm *c, float *buf, size_t count)
{
    return run_own_blocks(c, DP_ALLGATHER, buf, count, NULL, &dp_algorithm_ring);
}

int dp_reduce_scatter_mpi(dp_comm *c, float *buf, size_t count)
{
    return run_own_blocks(c, DP_REDUCE_SCATTER, buf, count, NULL, &dp_algorithm_mpi);
}

int dp_allgather_mpi(dp_comm *c, float *buf, size_t count)
{
    return run_own_blocks(c, DP_ALLGATHER, buf, count, NULL, &dp_algorithm_mpi);
}
