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

int dp_comm_set_algorithm(dp_comm *c, const char *algorithm)
{
    const struct dp_algorithm *found =
        strcmp(algorithm, dp_algorithm_auto.name) == 0 ? &dp_algorithm_auto : dp_algorithm_find(algorithm);
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
    c->node = -1;
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
    for (size_t i = 0; i < dp_registered_algorithm_count; i++)
        if (dp_registered_algorithms[i]->close)
            dp_registered_algorithms[i]->close(c);
    dp_algorithm_auto.close(c);
    dp_request_pool_free(c);
    if (c->requests_comm != MPI_COMM_NULL)
        MPI_Comm_free(&c->requests_comm);
}
