#include "config.h"

#include "dp/comm.h"

#include "dp/auto_table.h"
#include "dp/error.h"
#include "dp/watchdog.h"
#include "src/comm/algorithms.h"

#include <stdlib.h>
#include <string.h>

static const struct dp_allreduce_algorithm algorithms[] = {
    {"mpi", "MPI_Allreduce in place (the library's own choice of algorithm)", dp_allreduce_mpi,
     DP_BUFFER_MPI},
    {"naive", "every rank sends to rank 0, which sums on the CPU and broadcasts", dp_allreduce_naive,
     DP_BUFFER_HOST},
    {"ring", "ring reduce-scatter + ring all-gather on MPI_Sendrecv, W-1 steps each", dp_allreduce_ring,
     DP_BUFFER_HOST},
    {"ring-pipelined", "the ring in segments, nonblocking, reducing one while moving the next",
     dp_allreduce_ring_pipelined, DP_BUFFER_HOST},
    {"rhd", "recursive halving reduce-scatter + recursive doubling all-gather (Rabenseifner)",
     dp_allreduce_rhd, DP_BUFFER_HOST},
    {"rd", "recursive doubling: log2(W) rounds of the whole buffer, for small messages", dp_allreduce_rd,
     DP_BUFFER_HOST},
    {"auto", "picks one of the above by world size and message size from a table (dp_bench --tune)",
     dp_allreduce_auto, DP_BUFFER_HOST},
#ifdef HAVE_NCCL
    {"nccl", "ncclAllReduce on GPU memory (--device cuda); the communicator's id travels by MPI_Bcast",
     dp_allreduce_nccl, DP_BUFFER_DEVICE},
#endif
};
#define ALGORITHM_COUNT (sizeof algorithms / sizeof algorithms[0])
#define NAMES_SIZE (ALGORITHM_COUNT * (DP_ALGORITHM_NAME_MAX + 1))

/* Space-separated names of the algorithms that sum GPU memory only (gpu_only) or the rest. */
static void list_names(char *names, int gpu_only)
{
    for (size_t i = 0; i < ALGORITHM_COUNT; i++)
        if ((algorithms[i].place == DP_BUFFER_DEVICE) == gpu_only) {
            if (names[0])
                strcat(names, " ");
            strncat(names, algorithms[i].name, DP_ALGORITHM_NAME_MAX);
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

int dp_comm_wants_device_buffer(const dp_comm *c)
{
    return c->algorithm->place == DP_BUFFER_DEVICE || (c->algorithm->place == DP_BUFFER_MPI && c->cuda_aware);
}

int dp_mpi_fail(int status, const char *call, const char *file, int line)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(status, text, &len) != MPI_SUCCESS)
        strcpy(text, "unknown MPI error");
    return dp_fail(DP_EMPI, "%s failed at %s:%d: %s", call, file, line, text);
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

const struct dp_allreduce_algorithm *dp_allreduce_find(const char *name)
{
    for (size_t i = 0; i < ALGORITHM_COUNT; i++)
        if (strcmp(algorithms[i].name, name) == 0)
            return &algorithms[i];
    return NULL;
}

int dp_comm_set_algorithm(dp_comm *c, const char *algorithm)
{
    const struct dp_allreduce_algorithm *found = dp_allreduce_find(algorithm);
    if (!found)
        return dp_fail(DP_EINVAL, "--allreduce '%s': unknown algorithm (valid: %s%s%s)", algorithm,
                       dp_comm_algorithm_names(), *dp_comm_gpu_algorithm_names() ? "; on GPU memory: " : "",
                       dp_comm_gpu_algorithm_names());
    c->algorithm = found;
    return 0;
}

int dp_comm_init(dp_comm *c, MPI_Comm comm, const char *algorithm)
{
    memset(c, 0, sizeof *c);
    c->comm = comm;
    int status = dp_comm_set_algorithm(c, algorithm);
    if (status)
        return status;
    DP_MPI_CHECK(MPI_Comm_rank(comm, &c->rank));
    DP_MPI_CHECK(MPI_Comm_size(comm, &c->size));
    c->block_counts = dp_calloc(2 * (size_t)c->size, sizeof(int), "collective block counts");
    if (!c->block_counts)
        return DP_ENOMEM;
    c->block_offsets = c->block_counts + c->size;
    return find_local_rank(c);
}

const char *dp_comm_algorithm_name(const dp_comm *c)
{
    return c->algorithm->name;
}

/* Watchdog brackets: a no-op without a watchdog; leave only after a successful call. */
static int guard_enter(dp_comm *c, const char *operation)
{
    return c->watchdog ? dp_watchdog_enter(c->watchdog, operation) : 0;
}

static int guard_leave(dp_comm *c, int status)
{
    return status || !c->watchdog ? status : dp_watchdog_leave(c->watchdog);
}

int dp_comm_allreduce_sum(dp_comm *c, float *buf, size_t count)
{
    int status = guard_enter(c, "the gradient all-reduce");
    if (!status)
        status = c->algorithm->allreduce_sum(c, buf, count);
    return guard_leave(c, status);
}

float *dp_comm_scratch(dp_comm *c, size_t count)
{
    if (count == 0)
        count = 1; /* a real pointer even for nothing, so NULL always means out of memory */
    if (count <= c->scratch.capacity)
        return c->scratch.data;
    float *grown = dp_alloc(count * sizeof(float), "all-reduce scratch");
    if (!grown)
        return NULL;
    free(c->scratch.data);
    c->scratch.data = grown;
    c->scratch.capacity = count;
    return grown;
}

void dp_comm_free(dp_comm *c)
{
    free(c->scratch.data);
    c->scratch.data = NULL;
    c->scratch.capacity = 0;
    free(c->block_counts);
    c->block_counts = c->block_offsets = NULL;
    if (c->auto_table)
        dp_auto_table_free(c->auto_table);
    free(c->auto_table);
    c->auto_table = NULL;
#ifdef HAVE_NCCL
    dp_nccl_free(c);
#endif
}

static int sum_doubles(dp_comm *c, double *values, int count)
{
    DP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, c->comm));
    return 0;
}

int dp_comm_sum_doubles(dp_comm *c, double *values, int count)
{
    int status = guard_enter(c, "a metrics all-reduce");
    if (!status)
        status = sum_doubles(c, values, count);
    return guard_leave(c, status);
}

int dp_comm_broadcast(dp_comm *c, void *buf, size_t bytes, int root)
{
    int status = guard_enter(c, "a broadcast");
    if (!status)
        status = dp_broadcast_bytes(c, buf, bytes, root);
    return guard_leave(c, status);
}

static int gather_hashes(dp_comm *c, uint64_t mine, uint64_t *all)
{
    DP_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, c->comm));
    return 0;
}

int dp_comm_gather_hashes(dp_comm *c, uint64_t mine, uint64_t *all)
{
    int status = guard_enter(c, "the replica hash exchange");
    if (!status)
        status = gather_hashes(c, mine, all);
    return guard_leave(c, status);
}
