/* ZeRO stages 1, 2 and 3 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
 * Trillion Parameter Models", 2019; DeepSpeed's stage_1_and_2.py and stage3.py; PyTorch
 * FSDP's SHARD_GRAD_OP and FULL_SHARD) as strategies over DDP's buckets. Rank r's shard is
 * dp_partition(total, W, r) of the flat buffers (sizes differ by at most one; a module may
 * span shards, or have none of its elements on a rank).
 *
 * Stage 1: gradients whole, reduce-scattered bucket by bucket during backward (each rank
 *   needs only its shard's sums); the optimizer updates the shard; an all-gather of the
 *   updated shards makes every replica whole. With the ring, reduce-scatter + all-gather is
 *   DDP's all-reduce, so the result is bitwise DDP's.
 * Stage 2: no whole gradient: backward writes each bucket into a working buffer (two, so one
 *   fills while the other reduces), its reduce-scatter leaves this rank's part, which is
 *   added into the gradient shard. Every micro-batch is reduced (DeepSpeed does the same).
 * Stage 3: no whole parameters either: before each module's forward and backward its
 *   parameters are all-gathered into a working buffer (the next module's gather started
 *   meanwhile), and the update touches the shard alone. Under a budget smaller than a layer
 *   forward reads its weight in blocks of rows, backward's input gradient in blocks of whole
 *   columns (zero_columns.c), so every GEMM sums each element as the unsharded one does. */
#include "src/strategy/zero.h"

#include "dp/error.h"
#include "dp/zero_plan.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dp_range dp_zero_overlap(dp_range range, size_t offset, size_t count)
{
    size_t begin = range.begin > offset ? range.begin : offset;
    size_t end = range.end < offset + count ? range.end : offset + count;
    return (dp_range){begin, end > begin ? end : begin};
}

static const dp_backend *backend(const dp_strategy *d)
{
    return d->buffers.be;
}

static int alloc_floats(const dp_strategy *d, size_t n, dp_memory_kind kind, const char *what, float **out)
{
    *out = backend(d)->alloc(backend(d), (n ? n : 1) * sizeof(float), kind, what);
    return *out ? 0 : DP_ENOMEM;
}

/* A working buffer's host copy, where collectives need host memory. */
static int alloc_host_copy(const dp_strategy *d, size_t n, const char *what, float **out)
{
    if (!d->buffers.staged)
        return 0;
    *out = backend(d)->alloc_host(backend(d), (n ? n : 1) * sizeof(float), what);
    return *out ? 0 : DP_ENOMEM;
}

/* Where a slot's contents start: at `offset` (in the flat buffers) modulo the alignment. */
static float *aligned_like(float *base, size_t offset)
{
    return base + offset % DP_ZERO_SLOT_ALIGN_FLOATS;
}

int dp_zero_grad_slots(const dp_strategy *d)
{
    return d->config.overlap && d->nbuckets > 1 ? ZERO_GRAD_SLOTS : 1;
}

int dp_zero_gather_slots(const dp_strategy *d)
{
    return d->config.overlap ? ZERO_GATHER_SLOTS : 1;
}

static int open_grad_slots(dp_strategy *d, struct dp_zero *z)
{
    z->grad_slots = dp_zero_grad_slots(d);
    z->slot_of = malloc((size_t)(d->nbuckets ? d->nbuckets : 1) * sizeof *z->slot_of);
    if (!z->slot_of)
        return dp_fail(DP_ENOMEM, "out of memory for the bucket slots");
    for (int b = 0; b < d->nbuckets; b++)
        z->slot_of[b] = -1;
    size_t shard = dp_range_size(z->shard);
    int status = alloc_floats(d, shard, DP_MEM_GRADIENTS, "the gradient shard", &z->grad_shard);
    for (int i = 0; !status && i < z->grad_slots; i++) {
        z->grads[i].bucket = -1;
        status = alloc_floats(d, dp_zero_slot_floats(z->bucket_floats), DP_MEM_WORKING,
                              "a gradient bucket's working buffer", &z->grads[i].base);
        if (!status)
            status = alloc_host_copy(d, z->bucket_floats, "a gradient bucket's staging buffer", &z->grads[i].host);
    }
    return status;
}

static int open_gather_slots(dp_strategy *d, struct dp_zero *z)
{
    int status = alloc_floats(d, dp_range_size(z->shard), DP_MEM_PARAMETERS, "the parameter shard", &z->param_shard);
    z->gather_slots = dp_zero_gather_slots(d);
    for (int i = 0; !status && i < z->gather_slots; i++) {
        z->gathers[i].unit = -1;
        status = alloc_floats(d, dp_zero_slot_floats(z->unit_floats), DP_MEM_WORKING, "a module's gathered parameters",
                              &z->gathers[i].base);
        if (!status)
            status = alloc_host_copy(d, z->unit_floats, "gathered parameters' staging buffer", &z->gathers[i].host);
    }
    return status;
}

/* Requests: stage 1 as DDP (every bucket may be in flight, or one of the whole gradient with
 * --no-overlap), stages 2 and 3 a bucket per slot, stage 3 a gather per slot. The all-gather
 * after the update takes a free slot: no algorithm needs scratch memory to all-gather. */
static int reserve(dp_strategy *d, const struct dp_zero *z)
{
    size_t largest = z->bucket_floats;
    int requests = z->grad_slots + z->gather_slots;
    if (!d->type->reduces_every_micro) {
        largest = d->config.overlap ? z->bucket_floats : d->layout.total;
        requests = d->config.overlap ? d->nbuckets : 1;
    } else if (d->type->shards_params && z->unit_floats > largest) {
        largest = z->unit_floats;
    }
    return dp_comm_reserve(d->comm, largest, requests > 0 ? requests : 1, d->layout.total);
}

static void zero_close(dp_strategy *d)
{
    struct dp_zero *z = d->zero;
    if (!z)
        return;
    const dp_backend *be = backend(d);
    for (int i = 0; i < z->gather_slots; i++) {
        if (z->gathers[i].request) /* a prefetch still in flight: the comm layer must be idle */
            dp_request_wait(&z->gathers[i].request);
        be->free(be, z->gathers[i].base);
        if (z->gathers[i].host)
            be->free_host(be, z->gathers[i].host);
    }
    for (int i = 0; i < z->grad_slots; i++) {
        be->free(be, z->grads[i].base);
        if (z->grads[i].host)
            be->free_host(be, z->grads[i].host);
    }
    be->free(be, z->grad_shard);
    be->free(be, z->param_shard);
    dp_zero_free_columns(&z->columns);
    free(z->slot_of);
    free(z);
    d->zero = NULL;
}

static int zero_open(dp_strategy *d)
{
    struct dp_zero *z = dp_calloc(1, sizeof *z, "the ZeRO state");
    if (!z)
        return DP_ENOMEM;
    d->zero = z;
    z->shard = dp_partition(d->layout.total, d->comm->size, d->comm->rank);
    z->bucket_floats = dp_strategy_largest_bucket(d);
    z->unit_floats = dp_strategy_largest_unit(d);
    int status = 0;
    if (d->type->shards_grads)
        status = open_grad_slots(d, z);
    if (!status && d->type->shards_params)
        status = open_gather_slots(d, z);
    if (!status && d->type->shards_params)
        status = dp_zero_plan_columns(d, z->unit_floats, &z->columns);
    if (!status)
        status = reserve(d, z);
    return status;
}

/* ---- stages 2 and 3: gradient buckets in working buffers ---- */

/* A new micro-batch's backward begins: the last one's buckets complete first (their slots
 * and their accounting are reused). */
static int drain(dp_strategy *d)
{
    int started = 0, status = 0;
    for (int b = 0; !status && b < d->nbuckets; b++) {
        started |= d->buckets[b].started;
        status = dp_strategy_wait_bucket(d, &d->buckets[b]);
    }
    if (started) {
        dp_strategy_account_buckets(d);
        d->zero->micro++;
    }
    return status;
}

/* A free slot for bucket index `bucket`, waiting for the oldest bucket in flight if none is. */
static int acquire_slot(dp_strategy *d, int bucket)
{
    struct dp_zero *z = d->zero;
    int status = bucket == 0 ? drain(d) : 0;
    while (!status && z->slot_of[bucket] < 0) {
        int free_slot = -1, oldest = -1;
        for (int i = 0; i < z->grad_slots; i++) {
            int held = z->grads[i].bucket;
            if (held < 0 && free_slot < 0)
                free_slot = i;
            else if (held >= 0 && (oldest < 0 || held < z->grads[oldest].bucket))
                oldest = i;
        }
        if (free_slot >= 0) {
            z->grads[free_slot].bucket = bucket;
            z->grads[free_slot].data = aligned_like(z->grads[free_slot].base, d->buckets[bucket].offset);
            z->slot_of[bucket] = free_slot;
        } else {
            status = dp_strategy_wait_bucket(d, &d->buckets[z->grads[oldest].bucket]);
        }
    }
    return status;
}

/* The unit of u holding flat offset `offset`: units lie in ascending offsets. */
static int unit_at(const dp_strategy_units *u, size_t offset)
{
    int lo = 0, hi = u->layout.segments - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (u->offset[mid] <= offset)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

int dp_zero_segment_is_cut(const dp_strategy *d, int segment)
{
    return d->layout.count[segment] > d->block_floats;
}

/* Waiting for a gather or a slot inside a module's pass is communication, as in the before hook. */
static void count_wait(dp_strategy *d, double entered)
{
    double spent = MPI_Wtime() - entered;
    d->times.exposed += spent;
    *(d->zero->backward ? &d->times.in_backward : &d->times.in_forward) += spent;
}

/* A whole segment's gradient memory: its bucket's slot, taken when backward reaches the bucket. */
static int bind_gradients(dp_strategy *d, int segment, float **grads)
{
    if (dp_zero_segment_is_cut(d, segment))
        return 0; /* its pieces are placed one by one (dp_zero_place) */
    int unit = d->grads.first[segment], bucket = d->bucket_of[unit];
    const dp_bucket *b = &d->buckets[bucket];
    int status = unit == b->last_segment ? acquire_slot(d, bucket) : 0;
    if (!status)
        *grads = d->zero->grads[d->zero->slot_of[bucket]].data + (d->layout.offset[segment] - b->offset);
    return status;
}

/* Where backward writes the gradient piece [offset, offset + count): its bucket's slot, taken
 * at the bucket's first piece (backward reports pieces from the highest offsets down). */
int dp_zero_place(void *arg, size_t offset, size_t count, float **data)
{
    dp_strategy *d = arg;
    int bucket = d->bucket_of[unit_at(&d->grads, offset)];
    const dp_bucket *b = &d->buckets[bucket];
    if (offset < b->offset || offset + count > b->offset + b->count)
        return dp_fail(DP_EINVAL, "a gradient piece [%zu, %zu) crosses the edge of bucket %d [%zu, %zu)", offset,
                       offset + count, bucket, b->offset, b->offset + b->count);
    double entered = MPI_Wtime();
    int status = offset + count == b->offset + b->count ? acquire_slot(d, bucket) : 0;
    if (!status)
        *data = d->zero->grads[d->zero->slot_of[bucket]].data + (offset - b->offset);
    count_wait(d, entered);
    return status;
}

static float *bucket_data(dp_strategy *d, dp_bucket *b)
{
    zero_grad_slot *slot = &d->zero->grads[d->zero->slot_of[b - d->buckets]];
    if (!slot->host)
        return slot->data;
    backend(d)->download(backend(d), slot->host, slot->data, b->count * sizeof(float));
    return slot->host;
}

/* This rank's part of the reduced bucket into the gradient shard (the step's first
 * micro-batch copies, later ones add), and the slot is free again. */
static void bucket_done(dp_strategy *d, dp_bucket *b)
{
    struct dp_zero *z = d->zero;
    int bucket = (int)(b - d->buckets);
    zero_grad_slot *slot = &z->grads[z->slot_of[bucket]];
    dp_range mine = dp_zero_overlap(z->shard, b->offset, b->count);
    size_t n = dp_range_size(mine), at = mine.begin - b->offset;
    const dp_backend *be = backend(d);
    if (n && slot->host)
        be->upload(be, slot->data + at, slot->host + at, n * sizeof(float));
    if (n)
        be->accumulate(be, z->grad_shard + (mine.begin - z->shard.begin), slot->data + at, n, z->micro > 0);
    slot->bucket = -1;
    z->slot_of[bucket] = -1;
}

/* ---- stage 3: parameters gathered module by module ---- */

static zero_gather_slot *holding(struct dp_zero *z, int unit)
{
    for (int i = 0; i < z->gather_slots; i++)
        if (z->gathers[i].unit == unit)
            return &z->gathers[i];
    return NULL;
}

static int is_column_unit(const dp_strategy *d, int unit)
{
    return unit >= d->gathers.layout.segments;
}

/* Where column unit k's all-gather runs in slot g: its host copy, else the packed block at the
 * slot's start or, gathered padded, past it. */
static float *column_buffer(const dp_strategy *d, const zero_gather_slot *g, int k)
{
    return g->host ? g->host : g->base + (g->part ? dp_zero_column_floats(d, k) : 0);
}

/* Starts the all-gather of column unit `unit` into slot g, this rank's part packed in. */
static int start_column_gather(dp_strategy *d, zero_gather_slot *g, int unit)
{
    int k = unit - d->gathers.layout.segments;
    size_t mine;
    dp_request_args args = {.kind = DP_ALLGATHER, .label = g->label};
    g->data = g->base;
    g->part = dp_zero_column_layout(d, k, &args, &mine);
    args.buf = column_buffer(d, g, k);
    dp_zero_pack_columns(d, k, args.buf + mine, g->host != NULL);
    g->unit = unit;
    g->started_at = MPI_Wtime();
    snprintf(g->label, sizeof g->label, "parameters of column unit %d", k);
    return dp_comm_start(d->comm, &args, &g->request);
}

/* Starts the all-gather of unit's parameters into slot g: this rank's part copied in, the
 * others' arriving (each rank's block of the unit is its shard's part of it). */
static int start_gather(dp_strategy *d, zero_gather_slot *g, int unit)
{
    if (is_column_unit(d, unit))
        return start_column_gather(d, g, unit);
    struct dp_zero *z = d->zero;
    const dp_backend *be = backend(d);
    size_t offset = d->gathers.offset[unit], count = d->gathers.count[unit];
    dp_range mine = dp_zero_overlap(z->shard, offset, count);
    size_t n = dp_range_size(mine);
    const float *source = z->param_shard + (mine.begin - z->shard.begin);
    g->data = aligned_like(g->base, offset);
    float *buf = g->host ? g->host : g->data;
    if (n && g->host)
        be->download(be, g->host + (mine.begin - offset), source, n * sizeof(float));
    else if (n)
        be->accumulate(be, g->data + (mine.begin - offset), source, n, 0);
    g->unit = unit;
    g->started_at = MPI_Wtime();
    snprintf(g->label, sizeof g->label, "the parameters of unit %d", unit);
    dp_request_args args = {.kind = DP_ALLGATHER, .buf = buf, .count = count, .label = g->label,
                            .parent_count = d->layout.total, .parent_offset = offset};
    return dp_comm_start(d->comm, &args, &g->request);
}

static int finish_gather(dp_strategy *d, zero_gather_slot *g)
{
    if (!g->request)
        return 0;
    int status = dp_request_wait(&g->request);
    if (status)
        return status;
    double done = MPI_Wtime();
    int k = g->unit - d->gathers.layout.segments, columns = is_column_unit(d, g->unit);
    if (columns && g->part)
        dp_zero_lay_out_columns(d, k, column_buffer(d, g, k), g->part, g->data, g->host != NULL);
    else if (g->host)
        backend(d)->upload(backend(d), g->data, g->host,
                           (columns ? dp_zero_column_floats(d, k) : d->gathers.count[g->unit]) * sizeof(float));
    d->times.busy += done - g->started_at;
    if (d->on_span)
        d->on_span(d->span_arg, g->label, g->started_at, done);
    return 0;
}

/* A slot other than `keep` for a new gather (an empty one if there is), its own gather (a
 * prefetch) completed first. */
static int free_gather_slot(dp_strategy *d, const zero_gather_slot *keep, zero_gather_slot **out)
{
    zero_gather_slot *g = NULL;
    for (int i = d->zero->gather_slots - 1; i >= 0; i--) {
        zero_gather_slot *candidate = &d->zero->gathers[i];
        if (candidate != keep && (!g || candidate->unit < 0))
            g = candidate;
    }
    *out = g;
    return finish_gather(d, g);
}

int dp_zero_gathered(dp_strategy *d, int unit, zero_gather_slot **slot)
{
    zero_gather_slot *g = holding(d->zero, unit);
    int status = 0;
    if (!g && !(status = free_gather_slot(d, NULL, &g)))
        status = start_gather(d, g, unit);
    if (!status)
        status = finish_gather(d, g);
    *slot = g;
    return status;
}

/* The unit backward reads first of segment s: its first column block where it is cut (none
 * where a column does not fit), else its one unit. */
static int first_in_backward(const dp_strategy *d, int s)
{
    int first = d->zero->columns.first[s];
    if (!dp_zero_segment_is_cut(d, s))
        return d->gathers.first[s];
    return first >= 0 ? d->gathers.layout.segments + first : -1;
}

/* The unit backward reads after `unit` (-1: none): the next column block of its weight, or
 * the segment before's first. */
static int next_in_backward(const dp_strategy *d, int unit)
{
    const zero_columns *c = &d->zero->columns;
    int k = unit - d->gathers.layout.segments, s;
    if (!is_column_unit(d, unit))
        s = d->gathers.segment[unit];
    else if (k + 1 < c->units && c->segment[k + 1] == c->segment[k])
        return unit + 1;
    else
        s = c->segment[k];
    return s > 0 ? first_in_backward(d, s - 1) : -1;
}

/* Unit's parameters whole in a slot, and the next unit the pass reads prefetched into the
 * other (forward goes up, backward down). */
static int gather_with_prefetch(dp_strategy *d, int unit, int backward, zero_gather_slot **slot)
{
    zero_gather_slot *spare;
    int status = dp_zero_gathered(d, unit, slot);
    int next = backward ? next_in_backward(d, unit) : unit + 1;
    int prefetch = d->zero->gather_slots > 1 && next >= 0 && (backward || next < d->gathers.layout.segments);
    if (!status && prefetch && !holding(d->zero, next) && !(status = free_gather_slot(d, *slot, &spare)))
        status = start_gather(d, spare, next);
    return status;
}

/* Unit's parameters at *data for a module's pass, the wait counted as communication. */
static int fetch_unit(dp_strategy *d, int unit, const float **data)
{
    zero_gather_slot *g;
    double entered = MPI_Wtime();
    int status = gather_with_prefetch(d, unit, d->zero->backward, &g);
    count_wait(d, entered);
    *data = status ? NULL : g->data;
    return status;
}

/* A cut segment's module reads its parameters unit by unit (dp_param_pieces). */
int dp_zero_fetch(void *arg, size_t offset, size_t count, const float **data)
{
    dp_strategy *d = arg;
    int unit = unit_at(&d->gathers, offset);
    if (d->gathers.offset[unit] != offset || d->gathers.count[unit] != count)
        return dp_fail(DP_EINVAL, "parameters [%zu, %zu) asked for are not a unit of the budget's plan", offset,
                       offset + count);
    return fetch_unit(d, unit, data);
}

/* A cut weight's module reads it in blocks of whole columns for its input gradient (backward). */
int dp_zero_fetch_columns(void *arg, size_t offset, size_t first, size_t *end, const float **data)
{
    dp_strategy *d = arg;
    const zero_columns *c = &d->zero->columns;
    int s = d->gathers.segment[unit_at(&d->gathers, offset)];
    size_t rows = d->layout.rows[s], width = d->layout.row ? d->layout.row[s] : 0;
    if (d->layout.offset[s] != offset || !dp_zero_segment_is_cut(d, s) || !width)
        return dp_fail(DP_EINVAL, "columns of parameters at %zu asked for are not of a weight the budget cuts", offset);
    if (!c->per[s]) { /* the least budget rounded up, so that giving it works */
        double mb = (double)(dp_zero_column_need(d, s) + width) * dp_zero_block_slots(d->type, &d->config) / MIB_FLOATS;
        return dp_fail(DP_EINVAL, "--zero-live-mb: a gathered block (%zu floats) is smaller than a column of the "
                       "layer whose parameters are [%zu, %zu) (%zu floats: %zu rows%s); give at least %.3f MiB",
                       d->zero->unit_floats, offset, offset + d->layout.count[s], dp_zero_column_need(d, s), rows,
                       d->comm->size > 2 ? " and every rank's part padded to the largest" : "", ceil(mb * 1000) / 1000);
    }
    if (first % c->per[s] || first >= width)
        return dp_fail(DP_EINVAL, "columns from %zu of the weight at %zu are not a block of the budget's plan", first,
                       offset);
    *end = first + c->per[s] < width ? first + c->per[s] : width;
    return fetch_unit(d, d->gathers.layout.segments + c->first[s] + (int)(first / c->per[s]), data);
}

static int before_module(dp_strategy *d, int segment, int backward, float **weights, float **grads)
{
    zero_gather_slot *g;
    int status = 0;
    d->zero->backward = backward;
    if (d->type->shards_params && !dp_zero_segment_is_cut(d, segment) &&
        !(status = gather_with_prefetch(d, d->gathers.first[segment], backward, &g)))
        *weights = g->data;
    if (!status && backward && d->communicate)
        status = bind_gradients(d, segment, grads);
    return status;
}

/* ---- after the update ---- */

/* Stages 1 and 2: the updated shards to every rank, so each holds the whole model again. */
static int gather_updated_parameters(dp_strategy *d)
{
    if (d->comm->size == 1)
        return 0;
    const dp_backend *be = backend(d);
    size_t total = d->layout.total;
    dp_range mine = d->zero->shard;
    float *buf = d->buffers.weights;
    if (d->buffers.staged) {
        buf = d->buffers.comm_grads;
        be->download(be, buf + mine.begin, d->buffers.weights + mine.begin, dp_range_size(mine) * sizeof(float));
    }
    double started = MPI_Wtime();
    dp_request_args args = {.kind = DP_ALLGATHER, .buf = buf, .count = total, .label = "the updated parameters"};
    int status = dp_comm_run(d->comm, &args);
    if (!status && d->buffers.staged)
        be->upload(be, d->buffers.weights, buf, total * sizeof(float));
    double done = MPI_Wtime();
    d->times.busy += done - started;
    if (d->on_span)
        d->on_span(d->span_arg, "the updated parameters", started, done);
    return status;
}

/* Stage 3: gathered parameters are stale; the next forward's first module is fetched now. */
static int forget_gathered_parameters(dp_strategy *d)
{
    struct dp_zero *z = d->zero;
    int status = 0;
    for (int i = 0; !status && i < z->gather_slots; i++) {
        status = finish_gather(d, &z->gathers[i]);
        z->gathers[i].unit = -1;
    }
    int prefetch = z->gather_slots > 1 && d->gathers.layout.segments > 0;
    return status || !prefetch ? status : start_gather(d, &z->gathers[0], 0);
}

static int after_update(dp_strategy *d)
{
    d->zero->micro = 0;
    return d->type->shards_params ? forget_gathered_parameters(d) : gather_updated_parameters(d);
}

void dp_strategy_update_memory(const dp_strategy *d, float **params, float **grads)
{
    size_t begin, end;
    dp_strategy_shard(d, &begin, &end);
    *params = d->type->shards_params ? d->zero->param_shard : d->buffers.weights + begin;
    *grads = d->type->shards_grads ? d->zero->grad_shard : d->buffers.grads + begin;
}

const dp_strategy_type dp_strategy_zero1 = {
    .name = "zero-1",
    .gradient_collective = DP_REDUCE_SCATTER,
    .collective_name = "reduce-scatter",
    .shards_state = 1,
    .open = zero_open,
    .close = zero_close,
    .after_update = after_update,
};

const dp_strategy_type dp_strategy_zero2 = {
    .name = "zero-2",
    .gradient_collective = DP_REDUCE_SCATTER,
    .collective_name = "reduce-scatter",
    .shards_state = 1,
    .shards_grads = 1,
    .reduces_every_micro = 1,
    .open = zero_open,
    .close = zero_close,
    .before_module = before_module,
    .bucket_data = bucket_data,
    .bucket_done = bucket_done,
    .after_update = after_update,
};

const dp_strategy_type dp_strategy_zero3 = {
    .name = "zero-3",
    .gradient_collective = DP_REDUCE_SCATTER,
    .collective_name = "reduce-scatter",
    .shards_state = 1,
    .shards_grads = 1,
    .shards_params = 1,
    .reduces_every_micro = 1,
    .open = zero_open,
    .close = zero_close,
    .before_module = before_module,
    .bucket_data = bucket_data,
    .bucket_done = bucket_done,
    .after_update = after_update,
};
