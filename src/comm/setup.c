/* dp_comm itself: the algorithm chosen by name (one of the registry's, or auto, which picks
 * one of them per message), setting up and tearing down. */
#include "dp/comm.h"

#include "dp/error.h"
#include "src/comm/registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NAMES_SIZE = 512 };

const char *dp_comm_algorithm_names(void)
{
    static char names[NAMES_SIZE];
    if (!names[0]) {
        dp_registered_names(names, sizeof names, 0);
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, " %s", dp_algorithm_auto.name);
    }
    return names;
}

const char *dp_comm_gpu_algorithm_names(void)
{
    static char names[NAMES_SIZE];
    if (!names[0])
        dp_registered_names(names, sizeof names, 1);
    return names;
}

int dp_comm_wants_device_buffer(const dp_comm *c)
{
    /* bf16 gradients are narrowed on the CPU: MPI's sum of them too. */
    int mpi_takes_device = c->cuda_aware && c->grad_dtype == DP_DTYPE_F32;
    return c->algorithm->place == DP_BUFFER_DEVICE || (c->algorithm->place == DP_BUFFER_MPI && mpi_takes_device);
}

/* --grad-dtype's names, by the dtype they select. */
static const struct {
    const char *name;
    dp_dtype dtype;
} grad_dtypes[] = {{"fp32", DP_DTYPE_F32}, {"bf16", DP_DTYPE_BF16}};

enum { GRAD_DTYPES = sizeof grad_dtypes / sizeof grad_dtypes[0] };

int dp_grad_dtype_parse(const char *name, dp_dtype *dtype)
{
    for (int i = 0; i < GRAD_DTYPES; i++)
        if (strcmp(name, grad_dtypes[i].name) == 0) {
            *dtype = grad_dtypes[i].dtype;
            return 0;
        }
    return dp_fail(DP_EINVAL, "--grad-dtype '%s': unknown (valid: fp32 bf16)", name);
}

const char *dp_grad_dtype_name(dp_dtype dtype)
{
    for (int i = 0; i < GRAD_DTYPES; i++)
        if (grad_dtypes[i].dtype == dtype)
            return grad_dtypes[i].name;
    return "unknown";
}

void dp_comm_set_grad_dtype(dp_comm *c, dp_dtype dtype)
{
    c->grad_dtype = dtype;
}

/* The algorithm --allreduce calls name: a registered one, or auto. */
static int find_algorithm(const char *name, const struct dp_algorithm **found)
{
    *found = strcmp(name, dp_algorithm_auto.name) == 0 ? &dp_algorithm_auto : dp_algorithm_find(name);
    if (!*found)
        return dp_fail(DP_EINVAL, "--allreduce '%s': unknown algorithm (valid: %s%s%s)", name,
                       dp_comm_algorithm_names(), *dp_comm_gpu_algorithm_names() ? "; on GPU memory: " : "",
                       dp_comm_gpu_algorithm_names());
    return 0;
}

int dp_comm_set_algorithm(dp_comm *c, const char *algorithm)
{
    const struct dp_algorithm *found;
    int status = find_algorithm(algorithm, &found);
    if (status)
        return status;
    if (dp_comm_outstanding(c))
        return dp_fail(DP_EINVAL, "cannot switch to algorithm '%s' with %d request(s) outstanding",
                       algorithm, dp_comm_outstanding(c));
    c->algorithm = found;
    return 0;
}

int dp_comm_init(dp_comm *c, MPI_Comm comm, const char *algorithm)
{
    /* A dp_comm that failed here can still be given to dp_comm_free. */
    memset(c, 0, sizeof *c);
    c->requests_comm = MPI_COMM_NULL;
    const struct dp_algorithm *found;
    int status = find_algorithm(algorithm, &found);
    return status ? status : dp_comm_open_mpi(c, comm, found);
}

const char *dp_comm_algorithm_name(const dp_comm *c)
{
    return c->algorithm->name;
}

void dp_comm_free(dp_comm *c)
{
    dp_comm_stop_progress_thread(c);
    /* What each algorithm keeps on c (nccl's communicator and events, auto's table) goes
     * before the slots it may be attached to. */
    for (size_t i = 0; i < dp_registered_algorithm_count; i++)
        if (dp_registered_algorithms[i]->close)
            dp_registered_algorithms[i]->close(c);
    dp_algorithm_auto.close(c);
    dp_comm_close_mpi(c);
}
