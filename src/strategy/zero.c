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
 *   parameters are all-gathered into a working buffer (zero_gather.c; the next module's
 *   gather started meanwhile), and the update touches the shard alone. Under a budget
 *   smaller than a layer forward reads its weight in blocks of rows, backward's input
 *   gradient in blocks of whole columns (zero_columns.c), so every GEMM sums each element as
 *   the unsharded one does. */
#include "src/strategy/zero_parts.h"

#include "dp/error.h"
#include "dp/zero_plan.h"

#include <stdlib.h>

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
    struct dp_zero *z = zero_of(d);
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
    d->state = NULL;
}

static int zero_open(dp_strategy *d)
{
    struct dp_zero *z = dp_calloc(1, sizeof *z, "the ZeRO state");
    if (!z)
        return DP_ENOMEM;
    d->state = z;
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
        zero_of(d)->micro++;
    }
    return status;
}

/* A free slot for bucket index `bucket`, waiting for the oldest bucket in flight if none is. */
static int acquire_slot(dp_strategy *d, int bucket)
{
    struct dp_zero *z = zero_of(d);
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
            z->grads[free_slot].data = dp_zero_aligned_like(z->grads[free_slot].base, d->buckets[bucket].offset);
            z->slot_of[bucket] = free_slot;
        } else {
            status = dp_strategy_wait_bucket(d, &d->buckets[z->grads[oldest].bucket]);
        }
    }
    return status;
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
        *grads = zero_of(d)->grads[zero_of(d)->slot_of[bucket]].data + (d->layout.offset[segment] - b->offset);
    return status;
}

/* Where backward writes the gradient piece [offset, offset + count): its bucket's slot, taken
 * at the bucket's first piece (backward reports pieces from the highest offsets down). */
int dp_zero_place(void *arg, size_t offset, size_t count, float **data)
{
    dp_strategy *d = arg;
    int bucket = d->bucket_of[dp_zero_unit_at(&d->grads, offset)];
    const dp_bucket *b = &d->buckets[bucket];
    if (offset < b->offset || offset + count > b->offset + b->count)
        return dp_fail(DP_EINVAL, "a gradient piece [%zu, %zu) crosses the edge of bucket %d [%zu, %zu)", offset,
                       offset + count, bucket, b->offset, b->offset + b->count);
    double entered = MPI_Wtime();
    int status = offset + count == b->offset + b->count ? acquire_slot(d, bucket) : 0;
    if (!status)
        *data = zero_of(d)->grads[zero_of(d)->slot_of[bucket]].data + (offset - b->offset);
    dp_zero_count_wait(d, entered);
    return status;
}

static float *bucket_data(dp_strategy *d, dp_bucket *b)
{
    zero_grad_slot *slot = &zero_of(d)->grads[zero_of(d)->slot_of[b - d->buckets]];
    if (!slot->host)
        return slot->data;
    backend(d)->download(backend(d), slot->host, slot->data, b->count * sizeof(float));
    return slot->host;
}

/* This rank's part of the reduced bucket into the gradient shard (the step's first
 * micro-batch copies, later ones add), and the slot is free again. */
static void bucket_done(dp_strategy *d, dp_bucket *b)
{
    struct dp_zero *z = zero_of(d);
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

static int before_module(dp_strategy *d, int segment, int backward, float **weights, float **grads)
{
    zero_gather_slot *g;
    int status = 0;
    zero_of(d)->backward = backward;
    if (d->type->shards_params && !dp_zero_segment_is_cut(d, segment) &&
        !(status = dp_zero_gather_with_prefetch(d, d->gathers.first[segment], backward, &g)))
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
    dp_range mine = zero_of(d)->shard;
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

static int after_update(dp_strategy *d, const dp_update_done *done, dp_update_report *report)
{
    (void)done;
    (void)report;
    zero_of(d)->micro = 0;
    return d->type->shards_params ? dp_zero_forget_gathered(d) : gather_updated_parameters(d);
}

void dp_strategy_update_memory(const dp_strategy *d, float **params, float **grads)
{
    size_t begin, end;
    dp_strategy_shard(d, &begin, &end);
    *params = d->type->shards_params ? zero_of(d)->param_shard : d->buffers.weights + begin;
    *grads = d->type->shards_grads ? zero_of(d)->grad_shard : d->buffers.grads + begin;
}

/* Stages 2 and 3's working set under a budget (DeepSpeed's stage3_max_live_parameters). */
static const dp_strategy_key budget_keys[] = {
    {.name = "live-mb", .metavar = "MB|auto|unlimited", .fallback = -1.0, .least = (double)sizeof(float) / (1 << 20), .most = 1e6,
     .least_why = "one float; a block must also hold a layer's row, which the plan checks", .words = {"auto", "unlimited"},
     .word_values = {-1.0, 0.0},
     .help = "the most MiB of gathered parameters and gradient blocks a rank holds at once; a Linear or Conv2d "
             "larger than its share is gathered and reduce-scattered in blocks of whole rows. auto: an eighth of "
             "the rank's sharded state, at least 1 MiB; unlimited: whole modules (--zero-live-mb)"},
};

/* The buckets, then what the stage shards and how its budget cuts modules. */
static int zero_describe(const dp_strategy *d, char *text, size_t size)
{
    int used = dp_strategy_describe_buckets(d, text, size);
    if (used < 0 || (size_t)used >= size)
        return used;
    if (!d->type->shards_params)
        used += snprintf(text + used, size - (size_t)used, "; the updated shards all-gathered after the optimizer");
    else
        used += snprintf(text + used, size - (size_t)used, "; each module's parameters all-gathered before its "
                         "forward and backward%s", d->config.overlap ? ", the next module's prefetched" : "");
    if (used >= 0 && (size_t)used < size && d->type->shards_grads && d->block_floats != SIZE_MAX)
        used += snprintf(text + used, size - (size_t)used, "; working set under --zero-live-mb %.3g MiB: modules over "
                         "%zu floats in blocks of rows%s", dp_strategy_live_mb(&d->config, d->layout.total, d->comm->size),
                         d->block_floats, d->type->shards_params ? " (input gradients from blocks of columns)" : "");
    return used;
}

/* Stage 3: each unit gathered for both passes, each column unit for the input gradients. */
static size_t gathers_per_group(const dp_strategy *d)
{
    size_t units = d->gathers.layout.segments > 0 ? (size_t)d->gathers.layout.segments : (size_t)d->layout.segments;
    return 2 * units + (zero_of(d) ? (size_t)zero_of(d)->columns.units : 0);
}

/* Under a budget a cut module places its gradient pieces, and in stage 3 reads its parameters
 * and its weight's columns, block by block through these. */
static void zero_attach(dp_strategy *d, dp_step_hooks *hooks)
{
    if (d->block_floats == SIZE_MAX)
        return;
    hooks->place = dp_zero_place;
    hooks->fetch = d->type->shards_params ? dp_zero_fetch : NULL;
    hooks->fetch_columns = d->type->shards_params ? dp_zero_fetch_columns : NULL;
}

const dp_strategy_type dp_strategy_zero1 = {
    .name = "zero-1",
    .summary = "ZeRO stage 1: the optimizer state sharded over the ranks; gradients reduce-scattered bucket by "
               "bucket, the updated shards all-gathered after the update (--zero 1)",
    .gradient_collective = DP_REDUCE_SCATTER,
    .collective_name = "reduce-scatter",
    .shards_state = 1,
    .plan_units = dp_zero_plan_units,
    .attach = zero_attach,
    .describe = zero_describe,
    .open = zero_open,
    .close = zero_close,
    .after_update = after_update,
};

const dp_strategy_type dp_strategy_zero2 = {
    .name = "zero-2",
    .summary = "ZeRO stage 2 (FSDP SHARD_GRAD_OP): the gradients sharded too, each bucket reduce-scattered into "
               "this rank's shard every micro-batch (--zero 2)",
    .keys = budget_keys,
    .key_count = 1,
    .gradient_collective = DP_REDUCE_SCATTER,
    .collective_name = "reduce-scatter",
    .shards_state = 1,
    .shards_grads = 1,
    .reduces_every_micro = 1,
    .plan_units = dp_zero_plan_units,
    .attach = zero_attach,
    .describe = zero_describe,
    .open = zero_open,
    .close = zero_close,
    .before_module = before_module,
    .bucket_data = bucket_data,
    .bucket_done = bucket_done,
    .after_update = after_update,
};

const dp_strategy_type dp_strategy_zero3 = {
    .name = "zero-3",
    .summary = "ZeRO stage 3 (FSDP FULL_SHARD): the parameters sharded too, each module's all-gathered before its "
               "forward and backward (--zero 3)",
    .keys = budget_keys,
    .key_count = 1,
    .gradient_collective = DP_REDUCE_SCATTER,
    .collective_name = "reduce-scatter",
    .shards_state = 1,
    .shards_grads = 1,
    .shards_params = 1,
    .reduces_every_micro = 1,
    .plan_units = dp_zero_plan_units,
    .attach = zero_attach,
    .spans_per_group = gathers_per_group,
    .describe = zero_describe,
    .open = zero_open,
    .close = zero_close,
    .before_module = before_module,
    .bucket_data = bucket_data,
    .bucket_done = bucket_done,
    .after_update = after_update,
};
