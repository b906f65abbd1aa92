/* Buckets: contiguous slices of the gradient planned in backward order, and each one's
 * collective started (through the bucket hook), progressed, completed into the gradients and
 * timed. Every strategy's buckets go through here. While a CUDA graph captures the step
 * (join_stream), the collectives are joined to the device's stream instead of polled and
 * waited for: the host takes no part in them until the step is over. */
#include "src/strategy/strategy_type.h"

#include "dp/error.h"

#include <stdio.h>
#include <string.h>

/* Buckets in backward order, from the buffer's end, each closed once it holds its cap (the
 * first's small, so the first collective starts early, as DDP does). They take whole
 * segments, as DDP's take whole tensors, unless split: then a bucket closes at its cap inside
 * a segment, and starts as soon as backward has reported every piece of it final (the model
 * reports a large Linear's weight gradient in row blocks); a bucket that would leave less than
 * half a cap behind takes the rest too, so no collective runs for a sliver (a model under
 * 1.5 MiB stays one bucket, as under DDP's rule). buckets (NULL: only counted) and
 * bucket_of (NULL, or room for l->segments: the bucket holding each segment's first float)
 * get the plan; returns the bucket count. */
int dp_bucket_plan(const dp_strategy_layout *l, const dp_strategy_config *config, int split, dp_bucket *buckets, int *bucket_of)
{
    int n = 0;
    size_t room = 0, held = 0; /* floats the open bucket may still take (0: none is open), and holds */
    for (int s = l->segments - 1; s >= 0; s--) {
        size_t left = l->count[s]; /* s's floats not yet in a bucket, its first ones */
        do {
            if (split == DP_BUCKETS_BOUNDED && held && left > room)
                room = 0; /* a segment that would overfill the open bucket starts the next */
            if (room == 0) {
                held = 0;
                double cap = (n == 0 ? config->first_bucket_mb : config->bucket_mb) * MIB_FLOATS;
                size_t below = l->offset[s] + left; /* floats in no bucket yet */
                room = cap >= 1.0 ? (size_t)cap : 1;
                if (split == DP_BUCKETS_SPLIT && (double)below < 1.5 * (double)room)
                    room = below;
                if (buckets) {
                    buckets[n] = (dp_bucket){.last_segment = s, .offset = l->offset[s] + left};
                    snprintf(buckets[n].label, sizeof buckets[n].label, "bucket %d", n);
                }
                n++;
            }
            size_t take = split == DP_BUCKETS_SPLIT && left > room ? room : left;
            held += take;
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
int dp_strategy_splits_segments(const dp_strategy_type *type, const dp_strategy_config *config)
{
    return config->overlap && !type->shards_grads ? DP_BUCKETS_SPLIT : DP_BUCKETS_WHOLE;
}

/* Starts bucket b's collective on the comm buffer, its slice copied there first if staged. */
int dp_strategy_start_bucket(dp_strategy *d, dp_bucket *b)
{
    float *data;
    if (d->type->bucket_data) {
        data = d->type->bucket_data(d, b);
    } else {
        if (d->buffers.to_comm)
            d->buffers.to_comm(d->buffers.arg, b->offset, b->count);
        data = d->buffers.comm_grads + b->offset;
    }
    /* --grad-dtype: the gradients' reductions may travel as bf16 (the comm's setting). */
    b->args = (dp_request_args){.kind = d->type->gradient_collective, .buf = data, .count = b->count,
                                .label = b->label, .parent_count = d->layout.total, .parent_offset = b->offset,
                                .dtype = d->comm->grad_dtype, .joined = d->join_stream != NULL};
    b->started = 1;
    b->completed = 0;
    b->started_at = MPI_Wtime();
    if (b >= d->buckets && b < d->buckets + d->nbuckets) { /* not --no-overlap's whole gradient */
        int index = (int)(b - d->buckets);
        if (d->polled_from == d->polled_to) /* none in flight: the window starts afresh */
            d->polled_from = d->polled_to = index;
        d->polled_from = index < d->polled_from ? index : d->polled_from;
        d->polled_to = index >= d->polled_to ? index + 1 : d->polled_to;
    }
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

/* Advances every collective in flight, noting the ones that have completed. Buckets start in
 * backward order, so the window from the oldest in flight to the newest started holds them
 * all: a step costs the buckets in flight at each call, not all of them each time. */
int dp_strategy_poll(dp_strategy *d)
{
    if (d->join_stream) /* the device completes them: nothing for the host to look at */
        return 0;
    int status = dp_comm_progress(d->comm);
    for (int i = d->polled_from; !status && i < d->polled_to; i++) {
        dp_bucket *b = &d->buckets[i];
        int done = 0;
        if (b->request && !(status = dp_request_collect(&b->request, &done)) && done)
            status = bucket_done(d, b);
    }
    while (d->polled_from < d->polled_to && !d->buckets[d->polled_from].request)
        d->polled_from++;
    return status;
}

/* Bucket b's collective complete: on the host (a wait), or for the work queued on join_stream. */
int dp_strategy_wait_bucket(dp_strategy *d, dp_bucket *b)
{
    int status = !b->request ? 0 : d->join_stream ? dp_request_join(&b->request, d->join_stream)
                                                  : dp_request_wait(&b->request);
    if (!status && b->started && !b->completed)
        status = bucket_done(d, b);
    return status;
}

/* The union of the spans of buckets[0..n) (they run in start order). Each started bucket is
 * counted once. */
void dp_strategy_account(dp_strategy *d, dp_bucket *buckets, int n)
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
int dp_strategy_reduce_whole(dp_strategy *d)
{
    dp_bucket whole = {.offset = 0, .count = d->layout.total};
    snprintf(whole.label, sizeof whole.label, "the gradient");
    int status = dp_strategy_start_bucket(d, &whole);
    if (!status)
        status = dp_strategy_wait_bucket(d, &whole);
    dp_strategy_account(d, &whole, 1);
    return status;
}

void dp_strategy_join_on(dp_strategy *d, void *stream)
{
    d->join_stream = stream;
}

void dp_strategy_account_buckets(dp_strategy *d)
{
    dp_strategy_account(d, d->buckets, d->nbuckets);
}
