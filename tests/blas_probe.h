/* The BLAS asked at run time whether a promise that rests on its rounding holds here. */
#ifndef DP_BLAS_PROBE_H
#define DP_BLAS_PROBE_H

#include "dp/backend.h"

#include <stddef.h>

/* 1 when be's GEMM gives every element of a Linear's three products (rows samples, in -> out
 * features) the same bits cut into blocks of any size of W's rows or columns, from either end,
 * as computed whole; 0 otherwise. why gets the first product that differs, or the yes. */
int dp_blas_probe_cuts(const dp_backend *be, int rows, int in, int out, char *why, size_t size);

#endif
