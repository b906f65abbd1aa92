/* The registry: the algorithms that run requests, by name. auto is not one of them: it
 * picks one of them per message (auto.c), so it sits above the registry, not in it. */
#ifndef DP_COMM_REGISTRY_H
#define DP_COMM_REGISTRY_H

#include "src/comm/algorithms.h"

#include <stddef.h>

/* The registered algorithms, in the order --help lists them. */
extern const struct dp_algorithm *const dp_registered_algorithms[];
extern const size_t dp_registered_algorithm_count;

/* The registered algorithm called name, or NULL. */
const struct dp_algorithm *dp_algorithm_find(const char *name);

/* Calls visit for every registered algorithm that sums host memory. */
void dp_host_algorithms(void (*visit)(const struct dp_algorithm *a, void *context), void *context);

/* Space-separated names of the registered algorithms that sum GPU memory only (gpu_only) or
 * the rest, into names (size bytes). */
void dp_registered_names(char *names, size_t size, int gpu_only);

#endif
