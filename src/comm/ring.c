/* The ring: rank r sends only to r+1 and receives only from r-1. The buffer is cut into W
 * blocks (dp_partition). Reduce-scatter: in W-1 steps each block travels once around the
 * ring, every rank adding its own part, and ends complete on the rank of the same index.
 * All-gather: W-1 more steps pass each complete block on, so every rank holds all of them.
 * Each rank sends 2 (W-1)/W of the buffer in all, whatever W: the bandwidth-optimal amount.
 * Each block's sum is formed once, on its owner, and then copied: bitwise identical everywhere.
 * ring-pipelined (below) makes the same passes in segments, with nonblocking messages. */
#include "src/comm/algorithms.h"

#include "dp/error.h"
#include "dp/partition.h"

/* Step s of a pass sends block rank-s-shift and receives block rank-s-shift-1: shift 1 makes
 * the reduce-scatter end with rank r owning block r, shift 0 starts the all-gather there. */
enum { REDUCE_SCATTER_SHIFT = 1, ALLGATHER_SHIFT = 0 };

/* Block (rank + offset) mod W of count elements; offset >= -W. */
static dp_range ring_block(const dp_comm *c, size_t count, int offset)
{
    return dp_partition(count, c->size, ((c->rank + offset) % c->size + c->size) % c->size);
}

static int right_of(const dp_comm *c)
{
    return (c->rank + 1) % c->size;
}

static int left_of(const dp_comm *c)
{
    return (c->rank + c->size - 1) % c->size;
}

/* The largest block (block 0): equal on every rank, so it sizes messages the same everywhere. */
static size_t largest_block(const dp_comm *c, size_t count)
{
    return dp_range_size(dp_partition(count, c->size, 0));
}

/* W-1 blocking steps; reduce != 0 adds each received block into buf, otherwise it lands there. */
static int ring_pass(dp_comm *c, float *buf, size_t count, int shift, int reduce, int tag)
{
    if (count == 0 || c->size == 1)
        return 0;
    size_t span = largest_block(c, count);
    float *incoming = reduce ? dp_comm_scratch(c, span) : buf;
    if (!incoming)
        return DP_ENOMEM;
    for (int step = 0; step < c->size - 1; step++) {
        dp_range out = ring_block(c, count, -step - shift), in = ring_block(c, count, -step - shift - 1);
        float *dst = reduce ? incoming : buf + in.begin;
        int status = dp_sendrecv_floats(c, buf + out.begin, dp_range_size(out), right_of(c), dst,
                                        dp_range_size(in), left_of(c), tag, span);
        if (status)
            return status;
        if (reduce)
            dp_add_floats(buf + in.begin, incoming, dp_range_size(in));
    }
    return 0;
}

int dp_reduce_scatter_ring(dp_comm *c, float *buf, size_t count)
{
    return ring_pass(c, buf, count, REDUCE_SCATTER_SHIFT, 1, DP_TAG_REDUCE_SCATTER);
}

int dp_allgather_ring(dp_comm *c, float *buf, size_t count)
{
    return ring_pass(c, buf, count, ALLGATHER_SHIFT, 0, DP_TAG_ALLGATHER);
}

int dp_allreduce_ring(dp_comm *c, float *buf, size_t count)
{
    int status = dp_reduce_scatter_ring(c, buf, count);
    return status ? status : dp_allgather_ring(c, buf, count);
}

/* The pipelined pass: the W-1 steps become a sequence of items, item i being segment
 * i % segments of step i / segments. Item i+1 is on the wire while item i is reduced; its
 * data is final because it was item i+1-segments, reduced earlier (when segments >= 2). */
typedef struct segment_ring {
    dp_comm *c;
    float *buf;
    size_t count;
    int shift, reduce, tag, right, left;
    size_t segment;  /* elements per segment */
    size_t segments; /* per block: from the largest block, so the same on every rank */
    float *slots[2]; /* double buffer for incoming segments (reduce passes only) */
    MPI_Request recvs[2], sends[2];
} segment_ring;

/* Item's segment of the block it sends (incoming 0) or receives (incoming 1). */
static dp_range item_range(const segment_ring *g, size_t item, int incoming)
{
    int step = (int)(item / g->segments);
    dp_range block = ring_block(g->c, g->count, -step - g->shift - incoming);
    size_t begin = block.begin + (item % g->segments) * g->segment;
    dp_range r = {begin < block.end ? begin : block.end, block.end};
    if (r.end - r.begin > g->segment)
        r.end = r.begin + g->segment;
    return r;
}

static int post_recv(segment_ring *g, size_t item)
{
    dp_range r = item_range(g, item, 1);
    float *dst = g->reduce ? g->slots[item % 2] : g->buf + r.begin;
    DP_MPI_CHECK(MPI_Irecv(dst, (int)dp_range_size(r), MPI_FLOAT, g->left, g->tag, g->c->comm,
                           &g->recvs[item % 2]));
    return 0;
}

static int post_send(segment_ring *g, size_t item)
{
    dp_range r = item_range(g, item, 0);
    DP_MPI_CHECK(MPI_Isend(g->buf + r.begin, (int)dp_range_size(r), MPI_FLOAT, g->right, g->tag,
                           g->c->comm, &g->sends[item % 2]));
    return 0;
}

static int finish_recv(segment_ring *g, size_t item)
{
    DP_MPI_CHECK(MPI_Wait(&g->recvs[item % 2], MPI_STATUS_IGNORE));
    if (g->reduce) {
        dp_range r = item_range(g, item, 1);
        dp_add_floats(g->buf + r.begin, g->slots[item % 2], dp_range_size(r));
    }
    return 0;
}

/* One iteration: start moving item+1, then complete item. */
static int advance(segment_ring *g, size_t item, size_t items)
{
    int next = item + 1 < items, status = 0;
    if (next)
        status = post_recv(g, item + 1);
    if (!status && next && g->segments > 1)
        status = post_send(g, item + 1);
    if (!status)
        status = finish_recv(g, item);
    if (!status && next && g->segments == 1)
        status = post_send(g, item + 1);
    if (!status)
        DP_MPI_CHECK(MPI_Wait(&g->sends[item % 2], MPI_STATUS_IGNORE));
    return status;
}

static size_t segment_elements(const dp_comm *c, size_t largest)
{
    size_t bytes = c->segment_bytes ? c->segment_bytes : DP_SEGMENT_BYTES_DEFAULT;
    size_t elements = bytes < sizeof(float) ? 1 : bytes / sizeof(float);
    if (elements > DP_MPI_MAX_CHUNK)
        elements = DP_MPI_MAX_CHUNK;
    return elements < largest ? elements : largest;
}

static int pipelined_pass(dp_comm *c, float *buf, size_t count, int shift, int reduce, int tag)
{
    if (count == 0 || c->size == 1)
        return 0;
    size_t largest = largest_block(c, count);
    segment_ring g = {.c = c, .buf = buf, .count = count, .shift = shift, .reduce = reduce,
                      .tag = tag, .right = right_of(c), .left = left_of(c)};
    g.segment = segment_elements(c, largest);
    g.segments = (largest + g.segment - 1) / g.segment;
    if (reduce) {
        if (!(g.slots[0] = dp_comm_scratch(c, 2 * g.segment)))
            return DP_ENOMEM;
        g.slots[1] = g.slots[0] + g.segment;
    }
    size_t items = (size_t)(c->size - 1) * g.segments;
    int status = post_recv(&g, 0);
    if (!status)
        status = post_send(&g, 0);
    for (size_t item = 0; item < items && !status; item++)
        status = advance(&g, item, items);
    return status;
}

int dp_allreduce_ring_pipelined(dp_comm *c, float *buf, size_t count)
{
    int status = pipelined_pass(c, buf, count, REDUCE_SCATTER_SHIFT, 1, DP_TAG_REDUCE_SCATTER);
    return status ? status : pipelined_pass(c, buf, count, ALLGATHER_SHIFT, 0, DP_TAG_ALLGATHER);
}
