/* Opening a CUDA library at run time (cuBLAS, cuBLASLt): the one this build was compiled
 * against, by its soname, found as the program finds its other CUDA libraries (the run-time
 * path configure set, or LD_LIBRARY_PATH). */
#ifndef DP_BACKEND_LIBRARY_LOAD_H
#define DP_BACKEND_LIBRARY_LOAD_H

#include <stddef.h>

#define DP_TEXT(x) #x
/* "libcublas.so.13" from ("libcublas.so.", CUBLAS_VER_MAJOR). */
#define DP_SONAME(stem, major) stem DP_TEXT(major)

/* Where a function of the library goes, and its name there. */
typedef struct dp_symbol {
    void **slot;
    const char *name;
} dp_symbol;

/* Opens soname (it stays open for the process: its handles may outlive any one backend) and
 * fills every slot; non-zero with why (the library or a symbol missing) in text. */
int dp_library_load(const char *soname, const dp_symbol *symbols, size_t count, char *why, size_t size);

#endif
