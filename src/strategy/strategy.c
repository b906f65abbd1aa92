/* The strategies' shared machinery: buckets planned over the layout in backward order, their
 * collectives started as soon as backward has finished them (or all at once after it), and
 * the time each took and how much of it backward hid. The ZeRO stages hook in where they
 * differ (strategy.h). */
#include "dp/strategy.h"

#include "dp/error.h"
#include "dp/partition.h"
#include "src/strategy/strategy_type.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB_FLOATS ((double)(1 << 20) / sizeof(float))

/* DDP's first bucket: small, so the first collective starts early in backward. */
#define FIRST_BUCKET_MB 1.0
/* DDP's bucket_cap_mb default, and the share of the gradients an automatic bucket holds at most. */
#define DDP_BUCKET_MB 25.0
#define AUTO_BUCKETS 8.0

/* Every strategy, by name: a new one is a file and a row here. */
static const dp_strategy_type *const strategies[] = {
    &dp_strategy_ddp, &dp_strategy_zero1, &dp_strategy_zero2, &dp_strategy_zero3,
};

const dp_strategy_type *dp_strategy_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof strategies / sizeof *strategies; i++)
        if (strcmp(strategies[i]->name, name) == 0)
            return strategies[i];
    return NULL;
}

const char *dp_strategy_names(void)
{
    static char names[128];
    size_t used = 0;
    for (size_t i = 0; i < sizeof strategies / sizeof *strategies && used < sizeof names; i++)
        used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", strategies[i]->name);
    return names;
}

const char *dp_strategy_name_for_zero(int stage)
{
    static const char *const names[DP_ZERO_STAGES] = {"ddp", "zero-1", "zero-2", "zero-3"};
    return stage >= 0 && stage < DP_ZERO_STAGES ? names[stage] : NULL;
}

dp_strategy_config dp_strategy_default_config(const char *name, int overlap, double bucket_mb, size_t total_floats)
{
    if (bucket_mb <= 0.0) {
        double share = (double)total_floats / MIB_FLOATS / AUTO_BUCKETS;
        bucket_mb = share < DDP_BUCKET_MB ? share : DDP_BUCKET_MB;
        bucket_mb = bucket_mb > FIRST_BUCKET_MB ? bucket_mb : FIRST_BUCKET_MB;
    }
    return (dp_strategy_config){.name = name, .overlap = overlap, .bucket_mb = bucket_mb,
                                .first_bucket_mb = FIRST_BUCKET_MB < bucket_mb ? FIRST_BUCKET_MB : bucket_mb};
}

/* Buckets in backward order, from the buffer's end, each closed once it holds its cap (the
 * first's small, so the first collective starts early, as DDP does). They take whole
 * segments, as DDP's take whole tensors, unless split: then a bucket closes at its cap inside
 * a segment, and starts as soon as backward has reported every piece of it final (the model
 * reports a large Linear's weight gradient in row blocks); a bucket that would leave less than
 * half a cap behind takes the rest too, so no collective runs for a sliver (a model under
 * 1.5 MiB stays one bucket, as under DDP's rule). buckets (NULL: only counted) and
 * bucket_of (NULL, or room for l->segments: the bucket holding each segment's first float)
 * get the plan; returns the bucket count. */
static int plan(const dp_strategy_layout *l, const dp_strategy_config *config, int split, dp_bucket *buckets, int *bucket_of)
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
static int splits_segments(const dp_strategy_type *type, const dp_strategy_config *config)
{
    return config->overlap && !type->shards_grads;
}

static int plan_buckets(dp_strategy *d)
{
    const dp_strategy_layout *l = &d->layout;
    int split = splits_segments(d->type, &d->config);
    int n = plan(l, &d->config, split, NULL, NULL);
    d->buckets = dp_calloc((size_t)(n ? n : 1), sizeof *d->buckets, "the buckets");
    d->bucket_of = dp_calloc((size_t)(l->segments ? l->segments : 1), sizeof *d->bucket_of, "the bucket map");
    if (!d->buckets || !d->bucket_of)
        return DP_ENOMEM;
    d->nbuckets = plan(l, &d->config, split, d->buckets, d->bucket_of);
    return 0;
}

int dp_strategy_plan_sizes(const dp_strategy_layout *layout, const dp_strategy_config *config, int *buckets,
                       size_t *largest_bucket)
{
    const dp_strategy_type *type = dp_strategy_find(config->name);
    if (!type)
        return dp_fail(DP_EINVAL, "no strategy called '%s' (known: %s)", config->name ? config->name : "",
                       dp_strategy_names());
    int split = splits_segments(type, config);
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

static size_t largest_bucket(const dp_strategy *d)
{
    size_t largest = 0;
    for (int b = 0; b < d->nbuckets; b++)
        if (d->buckets[b].count > largest)
            largest = d->buckets[b].count;
    return largest;
}

unsigned dp_strategy_model_owns(const char *name)
{
    const dp_strategy_type *type = dp_strategy_find(name);
    if (!type)
        return 3u;
    return (type->shards_params ? 0u : 1u) | (type->shards_grads ? 0u : 2u);
}

int dp_strategy_init(dp_strategy *d, dp_comm *comm, const dp_strategy_layout *layout, const dp_strategy_buffers *buffers,
                 const dp_strategy_config *config)
{
    memset(d, 0, sizeof *d);
    d->type = dp_strategy_find(config->name);
    if (!d->type)
        return dp_fail(DP_EINVAL, "no strategy called '%s' (known: %s)", config->name ? config->name : "",
                       dp_strategy_names());
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

void dp_strategy_free(dp_strategy *d)
{
    if (d->comm && d->comm->size > 1 && d->config.progress_us > 0)
        dp_comm_stop_progress_thread(d->comm);
    if (d->type && d->type->close)
        d->type->close(d);
    free(d->buckets);
    free(d->bucket_of);
    memset(d, 0, sizeof *d);
}

/* A micro-batch's backward begins: whether it communicates, and every bucket waits for all of
 * its floats again. */
static void begin_micro(dp_strategy *d, int communicate)
{
    /* Stages 2 and 3 keep no full gradient to add micro-batches in: each one is reduced. */
    d->communicate = d->type->reduces_every_micro || (communicate && d->comm->size > 1);
    for (int i = 0; i < d->nbuckets; i++)
        d->buckets[i].pending = d->buckets[i].count;
}

int dp_strategy_backward_accumulates(const dp_strategy *d)
{
    return !d->type->reduces_every_micro;
}

static int progress(dp_strategy *d);

/* The before hook: at backward's start the micro-batch's plan; between backward's modules the
 * collectives in flight advance; the strategy's own hook materialises what it shards. */
static int before_module(void *arg, const dp_pass *pass, float **weights, float **grads)
{
    dp_strategy *d = arg;
    *weights = *grads = NULL;
    if (pass->backward && pass->first)
        begin_micro(d, pass->communicates);
    int status = pass->backward && !pass->first ? progress(d) : 0;
    if (status || !d->type->before_module || pass->segment < 0)
        return status;
    int segment = pass->segment, backward = pass->backward;
    /* Waiting here for a gather or a bucket's memory is communication the rank does instead of computing. */
    double entered = MPI_Wtime();
    status = d->type->before_module(d, segment, backward, weights, grads);
    double spent = MPI_Wtime() - entered;
    d->times.exposed += spent;
    if (backward)
        d->times.in_backward += spent;
    else
        d->times.in_forward += spent;
    return status;
}

/* Starts bucket b's collective on the comm buffer, its slice copied there first if staged. */
static int start_bucket(dp_strategy *d, dp_bucket *b)
{
    float *data;
    if (d->type->bucket_data) {
        data = d->type->bucket_data(d, b);
    } else {
        if (d->buffers.to_comm)
            d->buffers.to_comm(d->buffers.arg, b->offset, b->count);
        data = d->buffers.comm_grads + b->offset;
    }
    b->args = (dp_request_args){.kind = d->type->gradient_collective, .buf = data, .count = b->count,
                                .label = b->label, .parent_count = d->layout.total, .parent_offset = b->offset};
    b->started = 1;
    b->completed = 0;
    b->started_at = MPI_Wtime();
    const dp_bucket_hook *hook = &d->bucket_hook;
    return hook->start ? hook->start(hook->arg, d->comm, &b->args, &b->request)
                       : dp_comm_start(d->comm, &b->args, &b->request);
}

/* Bucket b's collective has completed: the bucket hook's last word on it, then its result goes
 * back to the gradients. */
static int bucket_done(dp_strategy *d, dp_bucket *b)
{
    b->done_at = MPI_Wtime();
    b->completed = 1;
    int status = d->bucket_hook.done ? d->bucket_hook.done(d->bucket_hook.arg, &b->args) : 0;
    if (status)
        return status;
    if (d->type->bucket_done)
        d->type->bucket_done(d, b);
    else if (d->buffers.from_comm)
        d->buffers.from_comm(d->buffers.arg, b->offset, b->count);
    if (d->on_span)
        d->on_span(d->span_arg, b->label, b->started_at, b->done_at);
    return 0;
}

/* Advances every collective in flight, noting the ones that have completed. */
static int poll(dp_strategy *d)
{
    int status = dp_comm_progress(d->comm);
    for (int i = 0; !status && i < d->nbuckets; i++) {
        dp_bucket *b = &d->buckets[i];
        int done = 0;
        if (b->request && !(status = dp_request_test(&b->request, &done)) && done)
            status = bucket_done(d, b);
    }
    return status;
}

static int progress(dp_strategy *d)
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

int dp_strategy_wait_bucket(dp_strategy *d, dp_bucket *b)
{
    int status = b->request ? dp_request_wait(&b->request) : 0;
    if (!status && b->started && !b->completed)
        status = bucket_done(d, b);
    return status;
}

size_t dp_strategy_piece_floats(const dp_strategy *d)
{
    /* The same pieces in every stage, with or without overlap: a blocked product may round
     * unlike the whole one (OpenBLAS's small-matrix kernels), and the stages promise ring
     * DDP's bits. */
    if (d->comm->size == 1)
        return 0;
    double floats = d->config.first_bucket_mb * MIB_FLOATS;
    return floats >= 1.0 ? (size_t)floats : 1;
}

static int grad_ready(void *arg, size_t offset, size_t count)
{
    dp_strategy *d = arg;
    double entered = MPI_Wtime();
    /* Without overlap, stages 2 and 3 still reduce each bucket as it fills (synchronously):
     * its working memory is needed for the next. */
    if (!d->communicate || (!d->config.overlap && !d->type->reduces_every_micro))
        return 0;
    int status = 0;
    for (int i = 0; !status && i < d->nbuckets; i++) {
        dp_bucket *b = &d->buckets[i];
        size_t begin = offset > b->offset ? offset : b->offset;
        size_t end = offset + count < b->offset + b->count ? offset + count : b->offset + b->count;
        if (begin >= end)
            continue;
        b->pending -= end - begin;
        if (b->pending == 0)
            status = start_bucket(d, b);
        if (!status && b->pending == 0 && !d->config.overlap)
            status = dp_strategy_wait_bucket(d, b);
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
static void account(dp_strategy *d, dp_bucket *buckets, int n)
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
static int reduce_whole(dp_strategy *d)
{
    dp_bucket whole = {.offset = 0, .count = d->layout.total};
    snprintf(whole.label, sizeof whole.label, "the gradient");
    int status = start_bucket(d, &whole);
    if (!status)
        status = dp_request_wait(&whole.request);
    if (!status)
        status = bucket_done(d, &whole);
    account(d, &whole, 1);
    return status;
}

void dp_strategy_account_buckets(dp_strategy *d)
{
    account(d, d->buckets, d->nbuckets);
}

static int finish(void *arg)
{
    dp_strategy *d = arg;
    if (!d->communicate)
        return 0;
    double started = MPI_Wtime();
    int status = 0;
    if (d->type->reduces_every_micro) {
        /* Every bucket was started as backward filled it. */
        for (int i = 0; !status && i < d->nbuckets; i++)
            status = dp_strategy_wait_bucket(d, &d->buckets[i]);
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
                status = bucket_done(d, b);
        }
        account(d, d->buckets, d->nbuckets);
    }
    d->times.exposed += MPI_Wtime() - started;
    return status;
}

void dp_strategy_shard(const dp_strategy *d, size_t *begin, size_t *end)
{
    dp_range shard = d->type->shards_state ? dp_partition(d->layout.total, d->comm->size, d->comm->rank)
                                           : (dp_range){0, d->layout.total};
    *begin = shard.begin;
    *end = shard.end;
}

int dp_strategy_shards_params(const dp_strategy *d)
{
    return d->type->shards_params;
}

int dp_strategy_shards_state(const dp_strategy *d)
{
    return d->type->shards_state;
}

static int after_update(void *arg)
{
    dp_strategy *d = arg;
    if (!d->type->after_update)
        return 0;
    double started = MPI_Wtime();
    int status = d->type->after_update(d);
    double spent = MPI_Wtime() - started;
    d->times.exposed += spent;
    d->times.in_update += spent;
    return status;
}

void dp_strategy_attach(dp_strategy *d, dp_step_hooks *hooks)
{
    *hooks = (dp_step_hooks){.before = before_module, .grad_ready = grad_ready, .finish = finish,
                             .after_update = after_update, .arg = d};
}

void dp_strategy_set_bucket_hook(dp_strategy *d, const dp_bucket_hook *hook)
{
    d->bucket_hook = *hook;
}

dp_strategy_times dp_strategy_take_times(dp_strategy *d)
{
    dp_strategy_times times = d->times;
    times.hidden = times.busy > times.exposed ? times.busy - times.exposed : 0.0;
    memset(&d->times, 0, sizeof d->times);
    return times;
}

/* The buckets' part of the description; returns the characters written. */
static int describe_buckets(const dp_strategy *d, char *text, size_t size)
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

void dp_strategy_describe(const dp_strategy *d, char *text, size_t size)
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
