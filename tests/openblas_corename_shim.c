/* LD_PRELOAD shim for tests/blas-core.sh: OpenBLAS as it behaves on a CPU newer than it knows.
 * Without OPENBLAS_CORETYPE it reports the generic Prescott core; with the variable set it
 * answers as the real library does, which then runs the core the variable names.
 * DP_SHIM_ALWAYS_PRESCOTT=1 reports Prescott whatever the variable says (a loop would show). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

char *openblas_get_corename(void)
{
    if (!getenv("OPENBLAS_CORETYPE") || getenv("DP_SHIM_ALWAYS_PRESCOTT"))
        return "Prescott";
    char *(*real)(void) = (char *(*)(void))dlsym(RTLD_NEXT, "openblas_get_corename");
    return real ? real() : "?";
}
