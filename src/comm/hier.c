/* hier: the two-level all-reduce over rank groups (groups.c). Each node's ranks reduce their
 * buffers into the node's lowest rank, its leader; the leaders all-reduce among themselves
 * with the inner algorithm (--hier-inner, ring by default); each leader broadcasts the result
 * to its node. Across nodes only the leaders' all-reduce moves data: 2 (H-1)/H of the buffer
 * per node for H nodes with the ring, whatever the ranks per node, instead of the flat ring's
 * 2 (W-1)/W per rank over every link the ring crosses. Nodes may hold different numbers of
 * ranks.
 *
 * Within a node both steps are ring requests whose blocks all belong to the leader (the
 * parent-buffer blocks of request.h): its reduce-scatter is then a chain reduce ending at the
 * leader, adding local ranks 1, 2, ..., L-1, 0 in turn, and its all-gather a chain broadcast
 * from it, each hop one message of the whole buffer (ring-pipelined's 1 MiB segments measured
 * slower: every segment is a round that waits for both ranks to be scheduled). Every element is summed in a fixed order (the chain,
 * then the inner algorithm's), so the bits are the same on every rank and in every run.
 *
 * The stages are requests on the groups' own dp_comms, started as the previous stage
 * completes. A stage's request carries a tag made from the hier request's, so parts of
 * different requests never meet whatever order they start in; the leaders' all-reduces start
 * in request order, as MPI's collectives (--hier-inner mpi) require.
 *
 * Reduce-scatter is the all-reduce (the other blocks' sums are allowed to be there); the
 * all-gather is an all-reduce of the buffer with every block but this rank's set to -0.0,
 * the one float that adds to any x giving x bit for bit (+0.0 would turn -0.0 into +0.0).
 * Both therefore cost an all-reduce's traffic (docs/ALGORITHMS.md). */
#include "src/comm/registry.h"

#include "dp/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum hier_stage { NODE_REDUCE, LEADERS_ALLREDUCE, NODE_BROADCAST, HIER_DONE };

/* The node's chain reduce and broadcast (see the top); its scratch is a whole buffer. */
#define NODE_ALGORITHM dp_algorithm_ring

static const struct dp_algorithm *inner_of(const dp_comm *c)
{
    return c->hier_inner ? c->hier_inner : &dp_algorithm_ring;
}

/* The group on comm (owned by the group from here on) as a dp_comm running algorithm. */
static int open_group(dp_comm *group, MPI_Comm comm, const struct dp_algorithm *algorithm)
{
    int status = dp_comm_open_mpi(group, comm, algorithm);
    if (status) {
        dp_comm_close_mpi(group);
        MPI_Comm_free(&comm);
    }
    return status;
}

static void close_group(dp_comm *group)
{
    MPI_Comm owned = group->comm;
    dp_comm_close_mpi(group); /* its algorithms keep nothing on it: the inner one is never auto or nccl */
    MPI_Comm_free(&owned);
}

/* The node and leader groups, once per dp_comm. Collective over c's ranks. */
static int open_groups(dp_comm *c)
{
    if (c->hier)
        return 0;
    struct dp_hier *h = dp_calloc(1, sizeof *h, "hier's rank groups");
    if (!h)
        return DP_ENOMEM;
    MPI_Comm node = MPI_COMM_NULL, leaders = MPI_COMM_NULL;
    int status = dp_comm_split_group(c, DP_GROUP_NODE, &node);
    if (!status)
        status = dp_comm_split_group(c, DP_GROUP_LEADERS, &leaders);
    if (!status)
        status = open_group(&h->node, node, &NODE_ALGORITHM);
    else if (node != MPI_COMM_NULL)
        MPI_Comm_free(&node);
    h->in_leaders = leaders != MPI_COMM_NULL;
    if (status && h->in_leaders)
        MPI_Comm_free(&leaders);
    else if (!status && h->in_leaders && (status = open_group(&h->leaders, leaders, inner_of(c))))
        close_group(&h->node);
    if (status) {
        free(h);
        return status;
    }
    c->hier = h;
    return 0;
}

static void hier_close(dp_comm *c)
{
    struct dp_hier *h = c->hier;
    if (!h)
        return;
    close_group(&h->node);
    if (h->in_leaders)
        close_group(&h->leaders);
    free(h);
    c->hier = NULL;
}

enum { INNER_NAMES = 512 };

/* Appends a's name to the list of inner algorithms (context: a char[INNER_NAMES]). */
static void list_inner(const struct dp_algorithm *a, void *context)
{
    char *names = context;
    size_t used = strlen(names);
    if (a != &dp_algorithm_hier)
        snprintf(names + used, INNER_NAMES - used, "%s%s", used ? " " : "", a->name);
}

int dp_comm_set_hier_inner(dp_comm *c, const char *algorithm)
{
    const struct dp_algorithm *found = dp_algorithm_find(algorithm);
    if (!found || found == &dp_algorithm_hier || found->place == DP_BUFFER_DEVICE) {
        char valid[INNER_NAMES] = "";
        dp_host_algorithms(list_inner, valid);
        return dp_fail(DP_EINVAL, "--hier-inner '%s': %s (valid: %s)", algorithm,
                       found ? "cannot run among the nodes' leaders" : "unknown algorithm", valid);
    }
    if (dp_comm_outstanding(c))
        return dp_fail(DP_EINVAL, "cannot switch --hier-inner to '%s' with %d request(s) outstanding", algorithm,
                       dp_comm_outstanding(c));
    c->hier_inner = found;
    if (c->hier && c->hier->in_leaders) /* what its reserve sizes scratch for */
        c->hier->leaders.algorithm = found;
    return 0;
}

const char *dp_comm_hier_inner_name(const dp_comm *c)
{
    return inner_of(c)->name;
}

static int prepare(dp_request *q)
{
    return open_groups(q->comm);
}

static int reserve(dp_comm *c, size_t max_count, int requests, size_t parent_count)
{
    (void)parent_count; /* hier sums whole buffers, whatever their blocks */
    int status = open_groups(c);
    struct dp_hier *h = c->hier;
    /* The node's requests have one block, the whole buffer: its parent holds L of them. */
    if (!status && h->node.size > 1)
        status = dp_comm_reserve(&h->node, max_count, requests, max_count * (size_t)h->node.size);
    if (!status && h->in_leaders && h->leaders.size > 1)
        status = dp_comm_reserve(&h->leaders, max_count, requests, 0);
    return status;
}

/* The groups' bytes sent since last counted, into q's kind of c's traffic. */
static void count_group_bytes(dp_request *q)
{
    struct dp_hier *h = q->comm->hier;
    uint64_t sent = 0;
    for (int k = 0; k < DP_COLLECTIVE_KINDS; k++)
        sent += h->node.traffic.bytes[k] + (h->in_leaders ? h->leaders.traffic.bytes[k] : 0);
    q->comm->traffic.bytes[q->kind] += sent - h->counted;
    h->counted = sent;
}

/* A node request: every block the leader's, so reduce-scatter reduces into it and all-gather
 * broadcasts from it. */
static dp_request_args node_args(const dp_request *q, dp_collective kind)
{
    return (dp_request_args){.kind = kind, .buf = q->buf, .count = q->count, .label = q->label,
                             .parent_count = q->count * (size_t)q->comm->hier->node.size, .dtype = q->dtype};
}

/* The tag of q's current stage on group g: the same on every rank, apart from other requests'. */
static int stage_tag(const dp_request *q, const dp_comm *g)
{
    return (int)(((long long)q->tag * HIER_DONE + q->stage) % g->pool->tag_window);
}

/* Starts q's current stage into q->part (left NULL where this rank has no part in it);
 * *waits = 1 while an earlier request's leaders' all-reduce has not started. */
static int start_stage(dp_request *q, int *waits)
{
    struct dp_hier *h = q->comm->hier;
    dp_comm *node = &h->node, *leaders = &h->leaders;
    if (q->stage == LEADERS_ALLREDUCE) {
        if (!h->in_leaders || leaders->size == 1)
            return 0;
        if (q->sequence != h->next_inner) {
            *waits = 1;
            return 0;
        }
        h->next_inner++;
        leaders->segment_bytes = q->comm->segment_bytes;
        dp_request_args a = {.kind = DP_ALLREDUCE, .buf = q->buf, .count = q->count, .label = q->label,
                             .dtype = q->dtype};
        return dp_request_start_part(leaders, &a, inner_of(q->comm), stage_tag(q, leaders), &q->part);
    }
    if (node->size == 1)
        return 0;
    node->segment_bytes = q->comm->segment_bytes;
    dp_request_args a = node_args(q, q->stage == NODE_REDUCE ? DP_REDUCE_SCATTER : DP_ALLGATHER);
    return dp_request_start_part(node, &a, &NODE_ALGORITHM, stage_tag(q, node), &q->part);
}

static int advance(dp_request *q)
{
    while (q->stage < HIER_DONE) {
        int status, done = 0, waits = 0;
        if (q->part) {
            status = dp_request_test(&q->part, &done);
            count_group_bytes(q);
            if (status || !done)
                return status;
        } else {
            status = start_stage(q, &waits);
            count_group_bytes(q);
            if (status || waits)
                return status;
            if (q->part) /* started: tested at once, it may have completed */
                continue;
        }
        q->stage++;
    }
    q->complete = 1;
    return 0;
}

/* All-gather as an all-reduce: -0.0 everywhere but this rank's block (see the top). */
static void clear_other_blocks(dp_request *q)
{
    dp_range mine = dp_request_block(q, q->comm->rank);
    for (size_t i = 0; i < q->count; i++)
        if (i < mine.begin || i >= mine.end)
            q->buf[i] = -0.0f;
}

static int start(dp_request *q)
{
    q->stage = NODE_REDUCE;
    q->part = NULL;
    q->sequence = q->comm->hier->started++;
    if (q->kind == DP_ALLGATHER)
        clear_other_blocks(q);
    return advance(q);
}

static const dp_driver hier_driver = {.prepare = prepare, .start = start, .advance = advance};

const struct dp_algorithm dp_algorithm_hier = {
    .name = "hier",
    .summary = "reduce within each node, all-reduce among one leader per node (--hier-inner), broadcast within the node",
    .place = DP_BUFFER_HOST,
    .driver = &hier_driver,
    .scratch_floats = dp_scratch_none,
    .reserve = reserve,
    .close = hier_close,
};
