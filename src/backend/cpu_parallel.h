/* Running a CPU loop (cpu_loops.h) over the rank's threads (cpu_parallel.c). */
#ifndef DP_BACKEND_CPU_PARALLEL_H
#define DP_BACKEND_CPU_PARALLEL_H

#include "src/backend/cpu_loops.h"

/* The most threads a rank's loops use (--threads' own limit). */
#define DP_CPU_MAX_THREADS 1024

/* The threads that share each operation's loop from now on, the caller included. */
void dp_cpu_parallel_set_threads(int threads);

/* fn over [0, n) rows, columns or elements, cut into as many contiguous parts as there are
 * threads but none smaller than `grain`; returns the sum of the parts' counts once all ran. */
size_t dp_cpu_parallel(dp_loop_fn fn, const dp_loop_args *args, size_t n, size_t grain);

#endif
