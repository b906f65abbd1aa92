/* What dp_blas_choose_core did, for dp_blas_describe (src/backend/blas_core.c). */
#ifndef DP_BLAS_CORE_H
#define DP_BLAS_CORE_H

#include <stddef.h>

/* Why OpenBLAS runs its core: empty when it chose the core itself; otherwise, for example,
 * " (set by dptrain: OpenBLAS chose the generic Prescott on a CPU with AVX-512)". */
void dp_blas_core_note(char *text, size_t size);

#endif
