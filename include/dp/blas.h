/* The CPU BLAS this build links (configure --with-blas): its name, version and kernels for the
 * banner, its thread count, and OpenBLAS's kernel choice corrected before it can matter. */
#ifndef DP_BLAS_H
#define DP_BLAS_H

#include <stddef.h>

/* Sets the BLAS's threads for this process's later calls. */
void dp_blas_set_threads(int threads);

/* "OpenBLAS 0.3.21, core Cooperlake" and why that core when dptrain or the user chose it. */
void dp_blas_describe(char *text, size_t size);

/* Call first in main, before MPI_Init: when OpenBLAS chose a generic core (Prescott, Core2,
 * Nehalem, ...) on a CPU with AVX2 or AVX-512 and OPENBLAS_CORETYPE is not set, runs argv
 * again as this same process (execv of /proc/self/exe) with OPENBLAS_CORETYPE naming the best
 * core the CPU runs, as OpenBLAS reads it only when it loads. A variable marks the second run,
 * so it never loops; returns when nothing is to be done or the exec failed (said in the banner). */
void dp_blas_choose_core(char **argv);

#endif
