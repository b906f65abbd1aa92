/* The ring: rank r sends only to r+1 and receives only from r-1. The buffer is cut into W
 * blocks (the request's blocks, dp_partition by default). Reduce-scatter: in W-1 steps each
 * block travels once around the ring, every rank adding its own part, and ends complete on
 * the rank of the same index. All-gather: W-1 more steps pass each complete block on, so
 * every rank holds all of them. The all-reduce is literally those two phases, one after the
 * other, so it equals a reduce-scatter followed by an all-gather bit for bit (ZeRO-2 against
 * DDP). Each rank sends 2 (W-1)/W of the buffer in all, whatever W: the bandwidth-optimal
 * amount. Each block's sum is formed once, on its owner, and then copied: bitwise identical
 * everywhere; block b's sum adds the ranks in the order b+1, b+2, ..., b, whatever the
 * block's size, so an element's sum depends only on which block holds it.
 * ring-pipelined (below) makes the same passes in segments, two in flight. */
#include "src/comm/algorithms.h"

#include "dp/error.h"

/* Step s of a pass sends block rank-s-shift and receives block rank-s-shift-1: shift 1 makes
 * the reduce-scatter end with rank r owning block r, shift 0 starts the all-gather there. */
enum { REDUCE_SCATTER_SHIFT = 1, ALLGATHER_SHIFT = 0 };

/* Block (rank + offset) mod W; offset >= -W. */
static dp_range ring_block(const dp_request *q, int offset)
{
    int w = q->comm->size;
    return dp_request_block(q, ((q->comm->rank + offset) % w + w) % w);
}

static int right_of(const dp_comm *c)
{
    return (c->rank + 1) % c->size;
}

static int left_of(const dp_comm *c)
{
    return (c->rank + c->size - 1) % c->size;
}

/* The messages of one piece of a pass: `out` of buf goes right, `in` comes from the left,
 * added into buf from `incoming` (reduce) or landing in buf directly. */
static void ring_round(dp_request *q, dp_range out, dp_range in, void *incoming, int reduce, dp_round *r)
{
    void *landing = dp_request_at(q, q->buf, in.begin);
    r->send = (dp_transfer){dp_request_at(q, q->buf, out.begin), dp_range_size(out), right_of(q->comm)};
    r->recv = (dp_transfer){reduce ? incoming : landing, dp_range_size(in), left_of(q->comm)};
    if (reduce)
        r->sum = (dp_sum){landing, incoming, dp_range_size(in)};
}

/* W-1 steps of whole blocks. */
static int ring_pass(dp_request *q, int step, int shift, int reduce, dp_round *r)
{
    if (step >= q->comm->size - 1)
        return 0;
    ring_round(q, ring_block(q, -step - shift), ring_block(q, -step - shift - 1), q->scratch, reduce, r);
    return 1;
}

static int reduce_scatter(dp_request *q, int round, dp_round *r)
{
    return ring_pass(q, round, REDUCE_SCATTER_SHIFT, 1, r);
}

static int allgather(dp_request *q, int round, dp_round *r)
{
    return ring_pass(q, round, ALLGATHER_SHIFT, 0, r);
}

static size_t ring_scratch(const dp_comm *c, dp_collective kind, size_t count, size_t largest_block)
{
    (void)c, (void)count;
    return kind == DP_ALLGATHER ? 0 : largest_block;
}

static const dp_phase_fn ring_allreduce[] = {reduce_scatter, allgather, NULL};
static const dp_phase_fn ring_reduce_scatter[] = {reduce_scatter, NULL};
static const dp_phase_fn ring_allgather[] = {allgather, NULL};

const struct dp_algorithm dp_algorithm_ring = {
    .name = "ring",
    .summary = "ring reduce-scatter + ring all-gather on nonblocking point-to-point, W-1 steps each",
    .place = DP_BUFFER_HOST,
    .driver = &dp_schedule_driver,
    .phases = {ring_allreduce, ring_reduce_scatter, ring_allgather},
    .scratch_floats = ring_scratch,
};

/* The pipelined pass: the W-1 steps become a sequence of items, item i being segment
 * i % segments of step i / segments, one round each. With two or more segments per block,
 * item i+1 is on the wire while item i is reduced: its data is final because it was item
 * i+1-segments, reduced earlier; incoming segments alternate between two scratch slots. */
static size_t segment_elements(const dp_comm *c, size_t largest, size_t element_size)
{
    size_t bytes = c->segment_bytes ? c->segment_bytes : DP_SEGMENT_BYTES_DEFAULT;
    size_t elements = bytes < element_size ? 1 : bytes / element_size;
    if (elements > DP_MPI_MAX_CHUNK)
        elements = DP_MPI_MAX_CHUNK;
    return elements < largest ? elements : largest;
}

static void plan_segments(dp_request *q)
{
    size_t largest = dp_request_largest_block(q);
    q->segment = segment_elements(q->comm, largest, q->element->size);
    q->segments = q->segment ? (largest + q->segment - 1) / q->segment : 0;
}

/* Item's segment of the block it sends (incoming 0) or receives (incoming 1). */
static dp_range item_range(const dp_request *q, size_t item, int shift, int incoming)
{
    int step = (int)(item / q->segments);
    dp_range block = ring_block(q, -step - shift - incoming);
    size_t begin = block.begin + (item % q->segments) * q->segment;
    dp_range r = {begin < block.end ? begin : block.end, block.end};
    if (r.end - r.begin > q->segment)
        r.end = r.begin + q->segment;
    return r;
}

static int pipelined_pass(dp_request *q, int round, int shift, int reduce, dp_round *r)
{
    size_t item = (size_t)round, items = (size_t)(q->comm->size - 1) * q->segments;
    if (item >= items)
        return 0;
    void *slot = dp_request_at(q, q->scratch, (item % 2) * q->segment);
    ring_round(q, item_range(q, item, shift, 0), item_range(q, item, shift, 1), slot, reduce, r);
    r->overlaps_previous = q->segments > 1;
    return 1;
}

static int pipelined_reduce_scatter(dp_request *q, int round, dp_round *r)
{
    return pipelined_pass(q, round, REDUCE_SCATTER_SHIFT, 1, r);
}

static int pipelined_allgather(dp_request *q, int round, dp_round *r)
{
    return pipelined_pass(q, round, ALLGATHER_SHIFT, 0, r);
}

static size_t pipelined_scratch(const dp_comm *c, dp_collective kind, size_t count, size_t largest_block)
{
    (void)count;
    /* Floats: a segment of narrower elements holds as many bytes, or a whole block of them. */
    return kind == DP_ALLGATHER ? 0 : 2 * segment_elements(c, largest_block, sizeof(float));
}

/* Segments per block beyond this each add a message's latency for too few bytes: a step of
 * 1-float segments of a 4096-wide layer took 34-74 times as long. The default 1 MiB segments
 * keep even 2^30-float messages on 2 ranks at 512. */
#define MAX_SEGMENTS_PER_BLOCK 4096

/* The largest request's blocks in at most MAX_SEGMENTS_PER_BLOCK segments, or the least
 * --segment-bytes that makes it so. */
static int check_segments(dp_comm *c, size_t max_count, int requests, size_t parent_count)
{
    (void)requests;
    size_t count = parent_count > max_count ? parent_count : max_count;
    size_t block = (count + (size_t)c->size - 1) / (size_t)c->size;
    size_t segment = segment_elements(c, block ? block : 1, sizeof(float));
    if (!block || (block + segment - 1) / segment <= MAX_SEGMENTS_PER_BLOCK)
        return 0;
    size_t least = (block + MAX_SEGMENTS_PER_BLOCK - 1) / MAX_SEGMENTS_PER_BLOCK * sizeof(float);
    return dp_fail(DP_EINVAL, "--segment-bytes %zu: ring-pipelined would move each %zu-float block of %zu floats "
                   "over %d ranks in %zu segments, each a message of its own; give at least %zu", c->segment_bytes,
                   block, count, c->size, (block + segment - 1) / segment, least);
}

static const dp_phase_fn pipelined_allreduce[] = {pipelined_reduce_scatter, pipelined_allgather, NULL};
static const dp_phase_fn pipelined_reduce_scatter_phases[] = {pipelined_reduce_scatter, NULL};
static const dp_phase_fn pipelined_allgather_phases[] = {pipelined_allgather, NULL};

const struct dp_algorithm dp_algorithm_ring_pipelined = {
    .name = "ring-pipelined",
    .summary = "the ring in segments, two in flight, reducing one while moving the next",
    .place = DP_BUFFER_HOST,
    .driver = &dp_schedule_driver,
    .phases = {pipelined_allreduce, pipelined_reduce_scatter_phases, pipelined_allgather_phases},
    .plan = plan_segments,
    .scratch_floats = pipelined_scratch,
    .reserve = check_segments,
};
