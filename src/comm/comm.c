/* dp_comm: the algorithm registry, setting up and tearing down. */
#include "config.h"

#include "dp/comm.h"

#include "dp/error.h"
#include "src/comm/algorithms.h"

#include <stdlib.h>
#include <string.h>

static const struct dp_algorithm *const algorithms[] = {
    &dp_algorithm_mpi, &dp_algorithm_naive, &dp_algorithm_ring, &dp_algorithm_ring_pipelined,
    &dp_algorithm_rhd, &dp_algorithm_rd,    &dp_algorithm_auto,
#ifdef HAVE_NCCL
    &dp_algorithm_nccl,
#endif
};
#define ALGORITHM_COUNT (sizeof algorithms / sizeof algorithms[0])
#define NAMES_SIZE (ALGORITHM_COUNT * (DP_ALGORITHM_NAME_MAX + 1))

/* Space-separated names of the algorithms that sum GPU memory only (gpu_only) or the rest. */
static void list_names(char *names, int gpu_only)
{
    for (size_t i = 0; i < ALGORITHM_COUNT; i++)
        if ((algorithms[i]->place == DP_BUFFER_DEVICE) == gpu_only) {
            if (names[0])
                strcat(names, " ");
            strncat(names, algorithms[i]->name, DP_ALGORITHM_NAME_MAX);
        }
}

const char *dp_comm_algorithm_names(void)
{
    static char names[NAMES_SIZE];
    if (!names[0])
        list_names(names, 0);
    return names;
}

const char *dp_comm_gpu_algorithm_names(void)
{
    static char names[NAMES_SIZE];
    if (!names[0])
        list_names(names, 1);
    return names;
}

void dp_host_algorithms(void (*visit)(const struct dp_algorithm *a, void *context), void *context)
{
    for (size_t i = 0; i < ALGORITHM_COUNT; i++)
        if (algorithms[i]->place != DP_BUFFER_DEVICE)
            visit(algorithms[i], context);
}

int dp_comm_wants_device_buffer(const dp_comm *c)
{
    return c->algorithm->place == DP_BUFFER_DEVICE || (c->algorithm->place == DP_BUFFER_MPI && c->cuda_aware);
}

static int find_local_rank(dp_comm *c)
{
    MPI_Comm node;
    DP_MPI_CHECK(MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
    DP_MPI_CHECK(MPI_Comm_rank(node, &c->local_rank));
    DP_MPI_CHECK(MPI_Comm_size(node, &c->local_size));
    DP_MPI_CHECK(MPI_Comm_free(&node));
    return 0;
}

const struct dp_algorithm *dp_algorithm_find(const char *name)
{
    for (size_t i = 0; i < ALGORITHM_COUNT; i++)
        if (strcmp(algorithms[i]->name, name) == 0)
            return algorithms[i];
    return NULL;
}

int dp_comm_set_algorithm(dp_comm *c, const char *algorithm)
{
    const struct dp_algorithm *found = dp_algorithm_find(algorithm);
    if (!found)
        return dp_fail(DP_EINVAL, "--allreduce '%s': unknown algorithm (valid: %s%s%s)", algorithm,
                       dp_comm_algorithm_names(), *dp_comm_gpu_algorithm_names() ? "; on GPU memory: " : "",
                       dp_comm_gpu_algorithm_names());
    if (dp_comm_outstanding(c))
        return dp_fail(DP_EINVAL, "cannot switch to algorithm '%s' with %d request(s) outstanding",
                       algorithm, dp_comm_outstanding(c));
    c->algorithm = found;
    return 0;
}

static int open_comm(dp_comm *c)
{
    DP_MPI_CHECK(MPI_Comm_rank(c->comm, &c->rank));
    DP_MPI_CHECK(MPI_Comm_size(c->comm, &c->size));
    DP_MPI_CHECK(MPI_Comm_dup(c->comm, &c->requests_comm));
    /* As on the caller's communicator: errors come back as codes, reported with context. */
    DP_MPI_CHECK(MPI_Comm_set_errhandler(c->requests_comm, MPI_ERRORS_RETURN));
    int status = dp_request_pool_open(c);
    return status ? status : find_local_rank(c);
}

int dp_comm_init(dp_comm *c, MPI_Comm comm, const char *algorithm)
{
    memset(c, 0, sizeof *c);
    c->comm = comm;
    c->requests_comm = MPI_COMM_NULL;
    int status = dp_comm_set_algorithm(c, algorithm);
    return status ? status : open_comm(c);
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
    for (size_t i = 0; i < ALGORITHM_COUNT; i++)
        if (algorithms[i]->close)
            algorithms[i]->close(c);
    dp_request_pool_free(c);
    if (c->requests_comm != MPI_COMM_NULL)
        MPI_Comm_free(&c->requests_comm);
}
