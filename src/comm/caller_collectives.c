/* MPI's collectives on the caller's communicator, watched: metric sums, a maximum, broadcasts,
 * shards to or from one rank, the replica hash exchange. */
#include "dp/comm.h"

#include "dp/error.h"
#include "dp/watchdog.h"
#include "src/comm/request.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

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

static int wait_request(dp_comm *c, void *request)
{
    return dp_request_wait_mpi(c, request);
}

int dp_comm_wait_mpi(dp_comm *c, MPI_Request *request, const char *what)
{
    return watched(c, what, wait_request, request);
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
    dp_range window; /* the part of the total moved; the root's buffer holds it alone */
    int root, gather;
};

/* Each rank's block of the window, at its offset within the window. */
static int block_layout(dp_comm *c, size_t total, dp_range window, int *counts, int *offsets)
{
    for (int r = 0; r < c->size; r++) {
        dp_range all = dp_partition(total, c->size, r);
        size_t lo = all.begin > window.begin ? all.begin : window.begin, hi = all.end < window.end ? all.end : window.end;
        dp_range block = {lo < hi ? lo - window.begin : 0, lo < hi ? hi - window.begin : 0};
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
    int *offsets = counts + c->size, status = block_layout(c, b->total, b->window, counts, offsets);
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

int dp_comm_gather_window(dp_comm *c, const float *mine, float *all, size_t total, dp_range window, int root)
{
    struct blocks b = {.send = mine, .recv = all, .total = total, .window = window, .root = root, .gather = 1};
    return watched(c, "a gather of shards", move_blocks, &b);
}

int dp_comm_gather_blocks(dp_comm *c, const float *mine, float *all, size_t total, int root)
{
    return dp_comm_gather_window(c, mine, all, total, (dp_range){0, total}, root);
}

int dp_comm_scatter_blocks(dp_comm *c, const float *all, float *mine, size_t total, int root)
{
    struct blocks b = {.send = all, .recv = mine, .total = total, .window = {0, total}, .root = root, .gather = 0};
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
