/* Whether MPI may be handed GPU memory: a CUDA-aware MPI (Open MPI built with CUDA or UCX)
 * moves and sums device buffers itself, so gradients need no trip through host memory. */
#include "config.h"

#include "dp/comm.h"

#include "dp/error.h"

#ifdef HAVE_MPI_EXT_H
#include <mpi-ext.h>
#endif

int dp_mpi_cuda_support(void)
{
#ifdef HAVE_MPIX_QUERY_CUDA_SUPPORT
    return MPIX_Query_cuda_support() ? 1 : 0;
#else
    return -1;
#endif
}

int dp_comm_set_cuda_aware(dp_comm *c, dp_cuda_aware mode)
{
    int support = dp_mpi_cuda_support();
    if (mode == DP_CUDA_AWARE_ON && support == 0)
        return dp_fail(DP_EINVAL, "--cuda-aware on: this MPI says it cannot read GPU memory "
                       "(MPIX_Query_cuda_support() is 0); use an Open MPI built with CUDA, or "
                       "--cuda-aware off to stage gradients through host memory");
    /* on without a way to ask: the user vouches for the library. */
    c->cuda_aware = mode == DP_CUDA_AWARE_ON || (mode == DP_CUDA_AWARE_AUTO && support == 1);
    return 0;
}
