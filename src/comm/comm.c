/* dp_comm: the algorithm registry, setting up and tearing down, and the blocking collectives
 * (the gradient ones as start + wait; metric sums, hashes and broadcasts as MPI's own), each
 * watched by the watchdog. */
#include "config.h"

#include "dp/comm.h"

#include "dp/auto_table.h"
#include "dp/error.h"
#include "dp/watchdog.h"
#include "src/comm/algorithms.h"

#include <limits.h>
#include <stdio.h>
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
    dp_request_pool_free(c);
    if (c->auto_table)
        dp_auto_table_free(c->auto_table);
    free(c->auto_table);
    c->auto_table = NULL;
#ifdef HAVE_NCCL
    dp_nccl_free(c);
#endif
    if (c->requests_comm != MPI_COMM_NULL)
        MPI_Comm_free(&c->requests_comm);
}

/* ---- the blocking forms of the requests ---- */

static int run_own_blocks(dp_comm *c, dp_collective kind, float *buf, size_t count, const char *label,
                          const struct dp_algorithm *algorithm)
{
    dp_request_args a = {.kind = kind, .buf = buf, .count = count, .label = label};
    return dp_request_run(c, &a, algorithm);
}

int dp_comm_allreduce_sum(dp_comm *c, float *buf, size_t count)
{
    return run_own_blocks(c, DP_ALLREDUCE, buf, count, "the gradient", c->algorithm);
}

int dp_comm_reduce_scatter(dp_comm *c, float *buf, size_t count)
{
    return run_own_blocks(c, DP_REDUCE_SCATTER, buf, count, NULL, c->algorithm);
}

int dp_comm_allgather(dp_comm *c, float *buf, size_t count)
{
    return run_own_blocks(c, DP_ALLGATHER, buf, count, NULL, c->algorithm);
}

int dp_reduce_scatter_ring(dp_comm *c, float *buf, size_t count)
{
    return run_own_blocks(c, DP_REDUCE_SCATTER, buf, count, NULL, &dp_algorithm_ring);
}

int dp_allgather_ring(dp_comm *c, float *buf, size_t count)
{
    return run_own_blocks(c, DP_ALLGATHER, buf, count, NULL, &dp_algorithm_ring);
}

int dp_reduce_scatter_mpi(dp_comm *c, float *buf, size_t count)
{
    return run_own_blocks(c, DP_REDUCE_SCATTER, buf, count, NULL, &dp_algorithm_mpi);
}

int dp_allgather_mpi(dp_comm *c, float *buf, size_t count)
{
    return run_own_blocks(c, DP_ALLGATHER, buf, count, NULL, &dp_algorithm_mpi);
}

/* ---- MPI's collectives on the caller's communicator, watched ---- */

/* Each is MPI's non-blocking collective, waited for while every outstanding request is
 * progressed (dp_request_wait_mpi): a rank blocked here while the others still need its part
 * in a request would otherwise deadlock them. */
typedef int (*collective_fn)(dp_comm *c, void *context);

static int watched(dp_comm *c, const char *what, collective_fn run, void *context)
{
    if (!c->watchdog)
        return run(c, context);
    dp_watch entry;
    snprintf(entry.what, sizeof entry.what, "%s", what);
    int status = dp_watchdog_watch(c->watchdog, &entry);
    if (!status)
        status = run(c, context);
    int unwatched = dp_watchdog_unwatch(c->watchdog, &entry);
    return status ? status : unwatched;
}

int dp_broadcast_bytes(dp_comm *c, void *buf, size_t bytes, int root)
{
    char *p = buf;
    for (size_t done = 0; done < bytes; done += DP_MPI_MAX_CHUNK) {
        MPI_Request request;
        DP_MPI_CHECK(MPI_Ibcast(p + done, dp_mpi_chunk(bytes, done), MPI_BYTE, root, c->comm, &request));
        int status = dp_request_wait_mpi(c, &request);
        if (status)
            return status;
    }
    return 0;
}

struct doubles {
    double *values;
    int count;
};

static int sum_doubles(dp_comm *c, void *context)
{
    struct doubles *d = context;
    MPI_Request request;
    DP_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, d->values, d->count, MPI_DOUBLE, MPI_SUM, c->comm, &request));
    return dp_request_wait_mpi(c, &request);
}

int dp_comm_sum_doubles(dp_comm *c, double *values, int count)
{
    struct doubles d = {values, count};
    return watched(c, "a metrics all-reduce", sum_doubles, &d);
}

struct broadcast {
    void *buf;
    size_t bytes;
    int root;
};

static int broadcast(dp_comm *c, void *context)
{
    struct broadcast *b = context;
    return dp_broadcast_bytes(c, b->buf, b->bytes, b->root);
}

int dp_comm_broadcast(dp_comm *c, void *buf, size_t bytes, int root)
{
    struct broadcast b = {buf, bytes, root};
    return watched(c, "a broadcast", broadcast, &b);
}

/* ---- whole tensors in dp_partition blocks, to or from one rank ---- */

struct blocks {
    const float *send;
    float *recv;
    size_t total;
    int root, gather;
};

static int block_layout(dp_comm *c, size_t total, int *counts, int *offsets)
{
    for (int r = 0; r < c->size; r++) {
        dp_range block = dp_partition(total, c->size, r);
        if (dp_range_size(block) > (size_t)INT_MAX || block.begin > (size_t)INT_MAX)
            return dp_fail(DP_EINVAL, "moving %zu floats in %d blocks to or from one rank: a block beyond "
                           "MPI's int counts (%d); write per-rank shards instead (--checkpoint-shards)",
                           total, c->size, INT_MAX);
        counts[r] = (int)dp_range_size(block);
        offsets[r] = (int)block.begin;
    }
    return 0;
}

static int move_blocks(dp_comm *c, void *context)
{
    struct blocks *b = context;
    int *counts = dp_calloc(2 * (size_t)c->size, sizeof *counts, "the block layout");
    if (!counts)
        return DP_ENOMEM;
    int *offsets = counts + c->size, status = block_layout(c, b->total, counts, offsets);
    int mine = counts[c->rank], is_root = c->rank == b->root, e = MPI_SUCCESS;
    MPI_Request request;
    /* The root's own block may already lie in place: MPI_IN_PLACE then. */
    if (!status && b->gather)
        e = MPI_Igatherv(is_root && b->send == b->recv + offsets[c->rank] ? MPI_IN_PLACE : b->send, mine, MPI_FLOAT,
                         b->recv, counts, offsets, MPI_FLOAT, b->root, c->comm, &request);
    else if (!status)
        e = MPI_Iscatterv(b->send, counts, offsets, MPI_FLOAT,
                          is_root && b->recv == b->send + offsets[c->rank] ? MPI_IN_PLACE : b->recv, mine,
                          MPI_FLOAT, b->root, c->comm, &request);
    if (!status && e != MPI_SUCCESS)
        status = dp_mpi_fail(e, b->gather ? "MPI_Igatherv" : "MPI_Iscatterv", __FILE__, __LINE__);
    if (!status)
        status = dp_request_wait_mpi(c, &request);
    free(counts);
    return status;
}

int dp_comm_gather_blocks(dp_comm *c, const float *mine, float *all, size_t total, int root)
{
    struct blocks b = {.send = mine, .recv = all, .total = total, .root = root, .gather = 1};
    return watched(c, "a gather of shards", move_blocks, &b);
}

int dp_comm_scatter_blocks(dp_comm *c, const float *all, float *mine, size_t total, int root)
{
    struct blocks b = {.send = all, .recv = mine, .total = total, .root = root, .gather = 0};
    return watched(c, "a scatter of shards", move_blocks, &b);
}

struct hashes {
    uint64_t mine, *all;
};

static int gather_hashes(dp_comm *c, void *context)
{
    struct hashes *h = context;
    MPI_Request request;
    DP_MPI_CHECK(MPI_Iallgather(&h->mine, 1, MPI_UINT64_T, h->all, 1, MPI_UINT64_T, c->comm, &request));
    return dp_request_wait_mpi(c, &request);
}

int dp_comm_gather_hashes(dp_comm *c, uint64_t mine, uint64_t *all)
{
    struct hashes h = {mine, all};
    return watched(c, "the replica hash exchange", gather_hashes, &h);
}
