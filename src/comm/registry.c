/* The registry of algorithms that run requests. Adding one: its file, and a row here. */
#include "config.h"

#include "src/comm/registry.h"

#include <stdio.h>
#include <string.h>

const struct dp_algorithm *const dp_registered_algorithms[] = {
    &dp_algorithm_mpi, &dp_algorithm_naive, &dp_algorithm_ring, &dp_algorithm_ring_pipelined,
    &dp_algorithm_rhd, &dp_algorithm_rd, &dp_algorithm_hier,
#ifdef HAVE_NCCL
    &dp_algorithm_nccl,
#endif
};
const size_t dp_registered_algorithm_count =
    sizeof dp_registered_algorithms / sizeof dp_registered_algorithms[0];

const struct dp_algorithm *dp_algorithm_find(const char *name)
{
    for (size_t i = 0; i < dp_registered_algorithm_count; i++)
        if (strcmp(dp_registered_algorithms[i]->name, name) == 0)
            return dp_registered_algorithms[i];
    return NULL;
}

void dp_host_algorithms(void (*visit)(const struct dp_algorithm *a, void *context), void *context)
{
    for (size_t i = 0; i < dp_registered_algorithm_count; i++)
        if (dp_registered_algorithms[i]->place != DP_BUFFER_DEVICE)
            visit(dp_registered_algorithms[i], context);
}

void dp_registered_names(char *names, size_t size, int gpu_only)
{
    size_t used = 0;
    names[0] = '\0';
    for (size_t i = 0; i < dp_registered_algorithm_count && used < size; i++)
        if ((dp_registered_algorithms[i]->place == DP_BUFFER_DEVICE) == gpu_only)
            used += (size_t)snprintf(names + used, size - used, "%s%s", used ? " " : "",
                                     dp_registered_algorithms[i]->name);
}
