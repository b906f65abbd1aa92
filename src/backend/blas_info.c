/* The CPU BLAS configure chose (--with-blas): its threads, and what the banner says of it. */
#include "config.h"

#include "dp/blas.h"
#include "src/backend/blas_core.h"

#include <stdio.h>

#if defined(DP_BLAS_OPENBLAS)
#include <cblas.h>

void dp_blas_set_threads(int threads)
{
    openblas_set_num_threads(threads);
}

/* openblas_get_config(): "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Cooperlake ...". */
void dp_blas_describe(char *text, size_t size)
{
    char version[32] = "", note[256];
    sscanf(openblas_get_config(), "OpenBLAS %31s", version);
    dp_blas_core_note(note, sizeof note);
    snprintf(text, size, "OpenBLAS %s, core %s%s", version[0] ? version : "?", openblas_get_corename(), note);
}
#elif defined(DP_BLAS_BLIS)
#include <blis.h>

void dp_blas_set_threads(int threads)
{
    bli_thread_set_num_threads(threads);
}

void dp_blas_describe(char *text, size_t size)
{
    snprintf(text, size, "BLIS %s, kernels %s", bli_info_get_version_str(), bli_arch_string(bli_arch_query_id()));
}
#else
#error "configure defines DP_BLAS_OPENBLAS or DP_BLAS_BLIS"
#endif
