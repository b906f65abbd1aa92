/* The strategies' shared machinery: buckets planned over the layout in backward order, their
 * collectives started as soon as backward has finished them (or all at once after it), and
 * the time each took and how much of it backward hid. The ZeRO stages hook in where they
 * differ (strategy.h). */
#include "dp/dist.h"

#include "dp/error.h"
#include "dp/partition.h"
#include "src/dist/strategy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB_FLOATS ((double)(1 << 20) / sizeof(float))

/* DDP's first bucket: small, so the first collective starts early in backward. */
#define FIRST_BUCKET_MB 1.0
/* DDP's bucket_cap_mb default, and the share of the gradients an automatic bucket holds at most. */
#define DDP_BUCKET_MB 25.0
#define AUTO_BUCKETS 8.0

dp_dist_config dp_dist_default_config(int overlap, double bucket_mb, int zero, size_t total_floats)
{
    if (bucket_mb <= 0.0) {
        double share = (double)total_floats / MIB_FLOATS / AUTO_BUCKETS;
        bucket_mb = share < DDP_BUCKET_MB ? share : DDP_BUCKET_MB;
        bucket_mb = bucket_mb > FIRST_BUCKET_MB ? bucket_mb : FIRST_BUCKET_MB;
    }
    return (dp_dist_config){.overlap = overlap, .bucket_mb = bucket_mb, .zero = zero,
                            .first_bucket_mb = FIRST_BUCKET_MB < bucket_mb ? FIRST_BUCKET_MB : bucket_mb};
}

static const dp_strategy_type *const stages[DP_ZERO_STAGES] = {
    &dp_strategy_ddp, &dp_strategy_zero1, &dp_strategy_zero2, &dp_strategy_zero3,
};

/* Buckets in backward order, from the buffer's end, each closed once it holds its cap (the
 * first's small, so the first collective starts early, as DDP does). They take whole
 * segments, as DDP's take whole tensors, unless split: then a bucket closes at its cap inside
 * a segment, and starts as soon as backward has reported every piece of it final (the model
 * reports a large Linear's weight gradient in row blocks); a bucket that would leave less than
 * half a cap behind takes the rest too, so no collective runs for a sliver (a model under
 * 1.5 MiB stays one bucket, as under DDP's rule). buckets (NULL: only counted) and
 * bucket_of (NULL, or room for l->segments: the bucket holding each segment's first float)
 * get the plan; returns the bucket count. */
static int plan(const dp_dist_layout *l, const dp_dist_config *config, int split, dp_bucket *buckets, int *bucket_of)
{
    int n = 0;
    size_t room = 0; /* floats the open bucket may still take; 0: none is open */
    for (int s = l->segments - 1; s >= 0; s--) {
        size_t left = l->count[s]; /* s's floats not yet in a bucket, its first ones */
        do {
            if (room == 0) {
                double cap = (n == 0 ? config->first_bucket_mb : config->bucket_mb) * MIB_FLOATS;
                size_t below = l->offset[s] + left; /* floats in no bucket yet */
                room = cap >= 1.0 ? (size_t)cap : 1;
                if (split && (double)below < 1.5 * (double)room)
                    room = below;
                if (buckets) {
                    buckets[n] = (dp_bucket){.last_segment = s, .offset = l->offset[s] + left};
                    snprintf(buckets[n].label, sizeof buckets[n].label, "bucket %d", n);
                }
                n++;
            }
            size_t take = split && left > room ? room : left;
            if (buckets) {
                buckets[n - 1].first_segment = s;
                buckets[n - 1].offset -= take;
                buckets[n - 1].count += take;
            }
            left -= take;
            room = take >= room ? 0 : room - take;
        } while (left > 0);
        if (bucket_of)
            bucket_of[s] = n - 1;
    }
    return n;
}

/* Whether buckets may cut segments: not where a bucket's working memory holds whole segments
 * (ZeRO-2 and 3), and only when they start during backward. */
static int splits_segments(const dp_strategy_type *type, const dp_dist_config *config)
{
    return config->overlap && !type->shards_grads;
}

static int plan_buckets(dp_dist *d)
{
    const dp_dist_layout *l = &d->layout;
    int split = splits_segments(d->type, &d->config);
    int n = plan(l, &d->config, split, NULL, NULL);
    d->buckets = dp_calloc((size_t)(n ? n : 1), sizeof *d->buckets, "the buckets");
    d->bucket_of = dp_calloc((size_t)(l->segments ? l->segments : 1), sizeof *d->bucket_of, "the bucket map");
    if (!d->buckets || !d->bucket_of)
        return DP_ENOMEM;
    d->nbuckets = plan(l, &d->config, split, d->buckets, d->bucket_of);
    return 0;
}

int dp_dist_plan_sizes(const dp_dist_layout *layout, const dp_dist_config *config, int *buckets,
                       size_t *largest_bucket)
{
    int split = splits_segments(stages[config->zero], config);
    int n = plan(layout, config, split, NULL, NULL);
    dp_bucket *planned = dp_calloc((size_t)(n ? n : 1), sizeof *planned, "the buckets");
    *buckets = 0;
    *largest_bucket = 0;
    if (!planned)
        return DP_ENOMEM;
    *buckets = plan(layout, config, split, planned, NULL);
    for (int b = 0; b < *buckets; b++)
        *largest_bucket = planned[b].count > *largest_bucket ? planned[b].count : *largest_bucket;
    free(planned);
    return 0;
}

static size_t largest_bucket(const dp_dist *d)
{
    size_t largest = 0;
    for (int b = 0; b < d->nbuckets; b++)
        if (d->buckets[b].count > largest)
            largest = d->buckets[b].count;
    return largest;
}

unsigned dp_dist_model_owns(int stage)
{
    const dp_strategy_type *type = stages[stage];
    return (type->shards_params ? 0u : 1u) | (type->shards_grads ? 0u : 2u);
}

int dp_dist_init(dp_dist *d, dp_comm *comm, const dp_dist_layout *layout, const dp_dist_buffers *buffers,
                 const dp_dist_config *config)
{
    memset(d, 0, sizeof *d);
    if (config->zero < 0 || config->zero >= DP_ZERO_STAGES)
        return dp_fail(DP_EINVAL, "--zero %d: the stages are 0 (DDP), 1, 2 and 3", config->zero);
    d->type = stages[config->zero];
    d->stage = config->zero;
    d->comm = comm;
    d->layout = *layout;
    d->buffers = *buffers;
    d->config = *config;
    int status = plan_buckets(d);
    if (status)
        return status;
    if (d->type->open)
        status = d->type->open(d);
    else if (comm->size > 1) /* Every bucket may be in flight at once; --no-overlap: one request of it all. */
        status = config->overlap ? dp_comm_reserve(comm, largest_bucket(d), d->nbuckets, layout->total)
                                 : dp_comm_reserve(comm, layout->total, 1, 0);
    if (!status && comm->size > 1 && config->overlap && config->progress_us > 0)
        status = dp_comm_start_progress_thread(comm, config->progress_us);
    return status;
}

void dp_dist_free(dp_dist *d)
{
    if (d->comm && d->comm->size > 1 && d->config.progress_us > 0)
        dp_comm_stop_progress_thread(d->comm);
    if (d->type && d->type->close)
        d->type->close(d);
    free(d->buckets);
    free(d->bucket_of);
    memset(d, 0, sizeof *d);
}

void dp_dist_begin_micro(dp_dist *d, int communicate)
{
    /* Stages 2 and 3 keep no full gradient to add micro-batches in: each one is reduced. */
    d->communicate = d->type->reduces_every_micro || (communicate && d->comm->size > 1);
    for (int i = 0; i < d->nbuckets; i++)
        d->buckets[i].pending = d->buckets[i].count;
}

int dp_dist_backward_accumulates(const dp_dist *d)
{
    return !d->type->reduces_every_micro;
}

int dp_dist_before_module(dp_dist *d, int segment, int backward, float **weights, float **grads)
{
    *weights = *grads = NULL;
    if (!d->type->before_module)
        return 0;
    /* Waiting here for a gather or a bucket's memory is communication the rank does instead of computing. */
    double entered = MPI_Wtime();
    int status = d->type->before_module(d, segment, backward, weights, grads);
    double spent = MPI_Wtime() - entered;
    d->times.exposed += spent;
    if (backward)
        d->times.in_backward += spent;
    else
        d->times.in_forward += spent;
    return status;
}

/* Starts bucket b's collective on the comm buffer, its slice copied there first if staged. */
static int start_bucket(dp_dist *d, dp_bucket *b)
{
    float *data;
    if (d->type->bucket_data) {
        data = d->type->bucket_data(d, b);
    } else {
        if (d->buffers.to_comm)
            d->buffers.to_comm(d->buffers.arg, b->offset, b->count);
        data = d->buffers.comm_grads + b->offset;
    }
    dp_request_args args = {.kind = d->type->gradient_collective, .buf = data,
                            .count = b->count, .label = b->label, .parent_count = d->layout.total,
                            .parent_offset = b->offset};
    b->started = 1;
    b->completed = 0;
    b->started_at = MPI_Wtime();
    int index = (int)(b - d->buckets);
    if (d->polled_from == d->polled_to) /* none in flight: the window starts afresh */
        d->polled_from = d->polled_to = index;
    d->polled_from = index < d->polled_from ? index : d->polled_from;
    d->polled_to = index >= d->polled_to ? index + 1 : d->polled_to;
    return dp_comm_start(d->comm, &args, &b->request);
}

/* Bucket b's collective has completed: its result goes back to the gradients. */
static void bucket_done(dp_dist *d, dp_bucket *b)
{
    b->done_at = MPI_Wtime();
    b->completed = 1;
    if (d->type->bucket_done)
        d->type->bucket_done(d, b);
    else if (d->buffers.from_comm)
        d->buffers.from_comm(d->buffers.arg, b->offset, b->count);
    if (d->on_span)
        d->on_span(d->span_arg, b->label, b->started_at, b->done_at);
}

/* Advances every collective in flight, noting the ones that have completed. Buckets start in
 * backward order, so the window from the oldest in flight to the newest started holds them
 * all: a step costs the buckets in flight at each call, not all of them each time. */
static int poll(dp_dist *d)
{
    int status = dp_comm_progress(d->comm);
    for (int i = d->polled_from; !status && i < d->polled_to; i++) {
        dp_bucket *b = &d->buckets[i];
        int done = 0;
        if (b->request && !(status = dp_request_collect(&b->request, &done)) && done)
            bucket_done(d, b);
    }
    while (d->polled_from < d->polled_to && !d->buckets[d->polled_from].request)
        d->polled_from++;
    return status;
}

int dp_dist_progress(dp_dist *d)
{
    if (!d->communicate || !d->config.overlap || dp_comm_outstanding(d->comm) == 0)
        return 0;
    double entered = MPI_Wtime();
    int status = poll(d);
    double spent = MPI_Wtime() - entered;
    d->times.exposed += spent;
    d->times.in_backward += spent;
    return status;
}

int dp_dist_wait_bucket(dp_dist *d, dp_bucket *b)
{
    int status = b->request ? dp_request_wait(&b->request) : 0;
    if (!status && b->started && !b->completed)
        bucket_done(d, b);
    return status;
}

size_t dp_dist_piece_floats(const dp_dist *d)
{
    /* The same pieces in every stage, with or without overlap: a blocked product may round
     * unlike the whole one (OpenBLAS's small-matrix kernels), and the stages promise ring
     * DDP's bits. */
    if (d->comm->size == 1)
        return 0;
    double floats = d->config.first_bucket_mb * MIB_FLOATS;
    return floats >= 1.0 ? (size_t)floats : 1;
}

/* The first bucket starting below `end`: buckets run in backward order, from the highest
 * offsets down, so a binary search finds where a reported range begins to overlap. */
static int first_bucket_below(const dp_dist *d, size_t end)
{
    int lo = 0, hi = d->nbuckets;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (d->buckets[mid].offset >= end)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int dp_dist_grad_ready(dp_dist *d, size_t offset, size_t count)
{
    double entered = MPI_Wtime();
    /* Without overlap, stages 2 and 3 still reduce each bucket as it fills (synchronously):
     * its working memory is needed for the next. */
    if (!d->communicate || (!d->config.overlap && !d->type->reduces_every_micro))
        return 0;
    int status = 0;
    for (int i = first_bucket_below(d, offset + count); !status && i < d->nbuckets; i++) {
        dp_bucket *b = &d->buckets[i];
        size_t begin = offset > b->offset ? offset : b->offset;
        size_t end = offset + count < b->offset + b->count ? offset + count : b->offset + b->count;
        if (begin >= end)
            break; /* this bucket and every later one lie below the range */
        b->pending -= end - begin;
        if (b->pending == 0)
            status = start_bucket(d, b);
        if (!status && b->pending == 0 && !d->config.overlap)
            status = dp_dist_wait_bucket(d, b);
    }
    if (!status)
        status = poll(d);
    /* Time in these calls is communication the rank does instead of computing. */
    double spent = MPI_Wtime() - entered;
    d->times.exposed += spent;
    d->times.in_backward += spent;
    return status;
}

/* The union of the spans of buckets[0..n) (they run in start order). Each started bucket is
 * counted once. */
static void account(dp_dist *d, dp_bucket *buckets, int n)
{
    double covered_to = -1e300;
    for (int i = 0; i < n; i++) {
        dp_bucket *b = &buckets[i];
        if (!b->started)
            continue;
        double begin = b->started_at > covered_to ? b->started_at : covered_to;
        if (b->done_at > begin) {
            d->times.busy += b->done_at - begin;
            covered_to = b->done_at;
        }
        d->times.requests++;
        b->started = 0;
    }
}

/* --no-overlap: the whole gradient in one collective after backward, as version 1 did. */
static int reduce_whole(dp_dist *d)
{
    dp_bucket whole = {.offset = 0, .count = d->layout.total};
    snprintf(whole.label, sizeof whole.label, "the gradient");
    int status = start_bucket(d, &whole);
    if (!status)
        status = dp_request_wait(&whole.request);
    if (!status)
        bucket_done(d, &whole);
    account(d, &whole, 1);
    return status;
}

void dp_dist_account_buckets(dp_dist *d)
{
    account(d, d->buckets, d->nbuckets);
}

int dp_dist_finish(dp_dist *d)
{
    if (!d->communicate)
        return 0;
    double started = MPI_Wtime();
    int status = 0;
    if (d->type->reduces_every_micro) {
        /* Every bucket was started as backward filled it. */
        for (int i = 0; !status && i < d->nbuckets; i++)
            status = dp_dist_wait_bucket(d, &d->buckets[i]);
        account(d, d->buckets, d->nbuckets);
    } else if (!d->config.overlap) {
        status = reduce_whole(d);
    } else {
        for (int i = 0; !status && i < d->nbuckets; i++) {
            dp_bucket *b = &d->buckets[i];
            if (!b->started)
                status = start_bucket(d, b);
        }
        for (int i = 0; !status && i < d->nbuckets; i++) {
            dp_bucket *b = &d->buckets[i];
            if (b->request && !(status = dp_request_wait(&b->request)))
                bucket_done(d, b);
        }
        account(d, d->buckets, d->nbuckets);
    }
    d->times.exposed += MPI_Wtime() - started;
    return status;
}

void dp_dist_shard(const dp_dist *d, size_t *begin, size_t *end)
{
    dp_range shard = d->type->shards_state ? dp_partition(d->layout.total, d->comm->size, d->comm->rank)
                                           : (dp_range){0, d->layout.total};
    *begin = shard.begin;
    *end = shard.end;
}

int dp_dist_shards_params(const dp_dist *d)
{
    return d->type->shards_params;
}

int dp_dist_shards_state(const dp_dist *d)
{
    return d->type->shards_state;
}

int dp_dist_after_update(dp_dist *d)
{
    if (!d->type->after_update)
        return 0;
    double started = MPI_Wtime();
    int status = d->type->after_update(d);
    double spent = MPI_Wtime() - started;
    d->times.exposed += spent;
    d->times.in_update += spent;
    return status;
}

dp_dist_times dp_dist_take_times(dp_dist *d)
{
    dp_dist_times times = d->times;
    times.hidden = times.busy > times.exposed ? times.busy - times.exposed : 0.0;
    memset(&d->times, 0, sizeof d->times);
    return times;
}

/* The buckets' part of the description; returns the characters written. */
static int describe_buckets(const dp_dist *d, char *text, size_t size)
{
    if (d->comm->size == 1)
        return snprintf(text, size, "%s on one rank: nothing to reduce", d->type->name);
    if (!d->config.overlap && d->type->reduces_every_micro)
        return snprintf(text, size, "%s, %d bucket%s in backward order, each %s run as backward finishes it, one "
                        "at a time (--no-overlap)", d->type->name, d->nbuckets, d->nbuckets == 1 ? "" : "s",
                        d->type->collective_name);
    if (!d->config.overlap)
        return snprintf(text, size, "%s, one %s of the whole gradient after backward (--no-overlap)", d->type->name,
                        d->type->collective_name);
    return snprintf(text, size, "%s, %d bucket%s (first %g MiB, then %g MiB) in backward order, each %s started "
                    "as backward finishes it", d->type->name, d->nbuckets, d->nbuckets == 1 ? "" : "s",
                    d->config.first_bucket_mb, d->config.bucket_mb, d->type->collective_name);
}

void dp_dist_describe(const dp_dist *d, char *text, size_t size)
{
    int used = describe_buckets(d, text, size);
    if (used >= 0 && (size_t)used < size && d->comm->size > 1 && d->config.overlap && d->config.progress_us > 0)
        used += snprintf(text + used, size - (size_t)used, ", a progress thread every %ld us",
                         d->config.progress_us);
    if (used < 0 || (size_t)used >= size || !d->type->shards_state)
        return;
    if (!d->type->shards_params)
        snprintf(text + used, size - (size_t)used, "; the updated shards all-gathered after the optimizer");
    else
        snprintf(text + used, size - (size_t)used, "; each module's parameters all-gathered before its forward and "
                 "backward%s", d->config.overlap ? ", the next module's prefetched" : "");
}
