/* A strategy's life and its hooks: buckets planned over the layout (buckets.c) and their
 * requests reserved, then per step: before each module's pass (progress between backward's
 * modules, the type's own materialising), each final piece of gradient counted into its
 * bucket, which starts when full, the wait in finish, the type's after_update; and the time
 * each took and how much of it backward hid. The ZeRO stages hook in where they differ. */
#include "dp/strategy.h"

#include "dp/error.h"
#include "dp/partition.h"
#include "src/strategy/strategy_type.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* DDP's first bucket: small, so the first collective starts early in backward. */
#define FIRST_BUCKET_MB 1.0
/* DDP's bucket_cap_mb default, and the share of the gradients an automatic bucket holds at most. */
#define DDP_BUCKET_MB 25.0
#define AUTO_BUCKETS 8.0

dp_strategy_config dp_strategy_default_config(const dp_strategy_choice *choice, int overlap, double bucket_mb,
                                              size_t total_floats)
{
    if (bucket_mb <= 0.0) {
        double share = (double)total_floats / MIB_FLOATS / AUTO_BUCKETS;
        bucket_mb = share < DDP_BUCKET_MB ? share : DDP_BUCKET_MB;
        bucket_mb = bucket_mb > FIRST_BUCKET_MB ? bucket_mb : FIRST_BUCKET_MB;
    }
    return (dp_strategy_config){.choice = *choice, .overlap = overlap, .bucket_mb = bucket_mb,
                                .first_bucket_mb = FIRST_BUCKET_MB < bucket_mb ? FIRST_BUCKET_MB : bucket_mb};
}

void *dp_strategy_host_buffer(const dp_strategy *d, size_t bytes, const char *what)
{
    const dp_backend *be = d->buffers.be;
    void *p = be->host_memory ? be->alloc(be, bytes, DP_MEM_WORKING, what) : be->alloc_host(be, bytes, what);
    if (p)
        memset(p, 0, bytes);
    return p;
}

void dp_strategy_free_host_buffer(const dp_strategy *d, void *p)
{
    const dp_backend *be = d->buffers.be;
    if (p && be->host_memory)
        be->free(be, p);
    else if (p)
        be->free_host(be, p);
}

int dp_strategy_alloc_units(dp_strategy_units *u, int n, int segments)
{
    u->first = dp_calloc((size_t)(segments ? segments : 1), sizeof *u->first, "the unit map");
    size_t slots = (size_t)(n ? n : 1);
    u->offset = dp_calloc(slots, sizeof *u->offset, "the units");
    u->count = dp_calloc(slots, sizeof *u->count, "the units");
    u->segment = dp_calloc(slots, sizeof *u->segment, "the units");
    return u->first && u->offset && u->count && u->segment ? 0 : DP_ENOMEM;
}

static void free_units(dp_strategy_units *u)
{
    free(u->offset);
    free(u->count);
    free(u->segment);
    free(u->first);
}

size_t dp_strategy_ddp_piece(const dp_strategy *d, int world)
{
    double floats = d->config.first_bucket_mb * MIB_FLOATS;
    return world == 1 ? 0 : floats >= 1.0 ? (size_t)floats : 1;
}

/* Without a budget every segment is one unit, gathered and bucketed whole. */
static int plan_segments(dp_strategy *d, int world)
{
    const dp_strategy_layout *l = &d->layout;
    d->block_floats = SIZE_MAX;
    d->piece_floats = dp_strategy_ddp_piece(d, world);
    dp_strategy_units *sets[] = {&d->gathers, &d->grads};
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) {
        dp_strategy_units *u = sets[i];
        int status = dp_strategy_alloc_units(u, l->segments, l->segments);
        for (int s = 0; !status && s < l->segments; s++) {
            u->first[s] = u->segment[s] = s;
            u->offset[s] = l->offset[s];
            u->count[s] = l->count[s];
        }
        u->layout = (dp_strategy_layout){.segments = l->segments, .offset = u->offset, .count = u->count,
                                         .total = l->total};
        if (status)
            return status;
    }
    return 0;
}

/* The units the type plans (ZeRO under a budget cuts large segments), else the segments. */
static int plan_units(dp_strategy *d, int world)
{
    return d->type->plan_units ? d->type->plan_units(d, world) : plan_segments(d, world);
}

/* Buckets over the units, none larger than a unit may be under the budget. */
static int plan_buckets(dp_strategy *d)
{
    const dp_strategy_layout *l = &d->grads.layout;
    dp_strategy_config *config = &d->config; /* its caps as planned: the banner says them */
    double block_mb = (double)d->block_floats / MIB_FLOATS;
    config->bucket_mb = config->bucket_mb < block_mb ? config->bucket_mb : block_mb;
    config->first_bucket_mb = config->first_bucket_mb < block_mb ? config->first_bucket_mb : block_mb;
    int split = d->block_floats != SIZE_MAX ? DP_BUCKETS_BOUNDED : dp_strategy_splits_segments(d->type, config);
    int n = dp_bucket_plan(l, config, split, NULL, NULL);
    d->buckets = dp_calloc((size_t)(n ? n : 1), sizeof *d->buckets, "the buckets");
    d->bucket_of = dp_calloc((size_t)(l->segments ? l->segments : 1), sizeof *d->bucket_of, "the bucket map");
    if (!d->buckets || !d->bucket_of)
        return DP_ENOMEM;
    d->nbuckets = dp_bucket_plan(l, config, split, d->buckets, d->bucket_of);
    return 0;
}

static void free_plan(dp_strategy *d)
{
    free(d->buckets);
    free(d->bucket_of);
    free_units(&d->gathers);
    free_units(&d->grads);
}

size_t dp_strategy_largest_bucket(const dp_strategy *d)
{
    size_t largest = 0;
    for (int b = 0; b < d->nbuckets; b++)
        largest = d->buckets[b].count > largest ? d->buckets[b].count : largest;
    return largest;
}

size_t dp_strategy_spans_per_step(const dp_strategy *d, size_t groups)
{
    size_t per_group = (size_t)d->nbuckets + (d->type->spans_per_group ? d->type->spans_per_group(d) : 0);
    return groups * per_group + 2; /* and after the last group: ZeRO-1 and 2's all-gather, or --exact's sums */
}

size_t dp_strategy_largest_unit(const dp_strategy *d)
{
    size_t largest = 0;
    for (int u = 0; u < d->gathers.layout.segments; u++)
        largest = d->gathers.count[u] > largest ? d->gathers.count[u] : largest;
    return largest;
}

int dp_strategy_plan_sizes(const dp_strategy_layout *layout, const dp_strategy_config *config, int world,
                           int *buckets, size_t *largest_bucket, size_t *largest_unit)
{
    dp_strategy d = {.type = dp_strategy_find(config->choice.name), .layout = *layout, .config = *config};
    *buckets = 0;
    *largest_bucket = *largest_unit = 0;
    if (!d.type)
        return dp_fail(DP_EINVAL, "no strategy called '%s' (known: %s)", config->choice.name,
                       dp_strategy_names());
    int status = plan_units(&d, world);
    if (!status)
        status = plan_buckets(&d);
    if (!status) {
        *buckets = d.nbuckets;
        *largest_bucket = dp_strategy_largest_bucket(&d);
        *largest_unit = dp_strategy_largest_unit(&d);
    }
    free_plan(&d);
    return status;
}

/* Buckets in flight during backward may want a thread to move them; local steps send none. */
static int runs_progress_thread(const dp_strategy *d)
{
    return d->comm->size > 1 && d->config.overlap && d->config.progress_us > 0 && !d->type->local_steps;
}

int dp_strategy_open(dp_strategy **out, dp_comm *comm, const dp_strategy_layout *layout,
                     const dp_strategy_buffers *buffers, const dp_strategy_config *config)
{
    dp_strategy *d = *out = dp_calloc(1, sizeof *d, "the strategy");
    if (!d)
        return DP_ENOMEM;
    d->type = dp_strategy_find(config->choice.name);
    if (!d->type)
        return dp_fail(DP_EINVAL, "no strategy called '%s' (known: %s)", config->choice.name,
                       dp_strategy_names());
    d->comm = comm;
    d->bucket_hook = (dp_bucket_hook){.start = d->type->bucket_start, .arg = d};
    d->layout = *layout;
    d->buffers = *buffers;
    d->config = *config;
    int status = plan_units(d, comm->size);
    if (!status)
        status = plan_buckets(d);
    if (status)
        return status;
    if (d->type->open)
        status = d->type->open(d);
    else if (comm->size > 1) /* Every bucket may be in flight at once; --no-overlap: one request of it all. */
        status = config->overlap ? dp_comm_reserve(comm, dp_strategy_largest_bucket(d), d->nbuckets, layout->total)
                                 : dp_comm_reserve(comm, layout->total, 1, 0);
    if (!status && runs_progress_thread(d))
        status = dp_comm_start_progress_thread(comm, config->progress_us);
    return status;
}

void dp_strategy_close(dp_strategy *d)
{
    if (!d)
        return;
    if (d->comm && runs_progress_thread(d))
        dp_comm_stop_progress_thread(d->comm);
    if (d->type && d->type->close)
        d->type->close(d);
    free_plan(d);
    free(d);
}

/* A micro-batch's backward begins: whether it communicates, and every bucket waits for all of
 * its floats again. */
static void begin_micro(dp_strategy *d, int communicate)
{
    /* Stages 2 and 3 keep no full gradient to add micro-batches in: each one is reduced. */
    d->communicate = !d->type->local_steps && (d->type->reduces_every_micro || (communicate && d->comm->size > 1));
    for (int i = 0; i < d->nbuckets; i++)
        d->buckets[i].pending = d->buckets[i].count;
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

static int progress(dp_strategy *d)
{
    if (!d->communicate || !d->config.overlap || dp_comm_outstanding(d->comm) == 0)
        return 0;
    double entered = MPI_Wtime();
    int status = dp_strategy_poll(d);
    double spent = MPI_Wtime() - entered;
    d->times.exposed += spent;
    d->times.in_backward += spent;
    return status;
}

size_t dp_strategy_block(const dp_strategy *d)
{
    return d->block_floats == SIZE_MAX ? 0 : d->block_floats;
}

size_t dp_strategy_piece_floats(const dp_strategy *d)
{
    return d->piece_floats;
}

/* The first bucket starting below `end`: buckets run in backward order, from the highest
 * offsets down, so a binary search finds where a reported range begins to overlap. */
static int first_bucket_below(const dp_strategy *d, size_t end)
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

static int grad_ready(void *arg, size_t offset, size_t count)
{
    dp_strategy *d = arg;
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
            status = dp_strategy_start_bucket(d, b);
        if (!status && b->pending == 0 && !d->config.overlap)
            status = dp_strategy_wait_bucket(d, b);
    }
    if (!status)
        status = dp_strategy_poll(d);
    /* Time in these calls is communication the rank does instead of computing. */
    double spent = MPI_Wtime() - entered;
    d->times.exposed += spent;
    d->times.in_backward += spent;
    return status;
}

static int finish(void *arg)
{
    dp_strategy *d = arg;
    if (!d->communicate && !d->type->finish)
        return 0;
    double started = MPI_Wtime();
    int status = 0;
    if (d->type->finish) {
        status = d->type->finish(d);
    } else if (d->type->reduces_every_micro) {
        /* Every bucket was started as backward filled it. */
        for (int i = 0; !status && i < d->nbuckets; i++)
            status = dp_strategy_wait_bucket(d, &d->buckets[i]);
        dp_strategy_account(d, d->buckets, d->nbuckets);
    } else if (!d->config.overlap) {
        status = dp_strategy_reduce_whole(d);
    } else {
        for (int i = 0; !status && i < d->nbuckets; i++) {
            dp_bucket *b = &d->buckets[i];
            if (!b->started)
                status = dp_strategy_start_bucket(d, b);
        }
        for (int i = 0; !status && i < d->nbuckets; i++)
            status = dp_strategy_wait_bucket(d, &d->buckets[i]);
        dp_strategy_account(d, d->buckets, d->nbuckets);
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

static int after_update(void *arg, const dp_update_done *done, dp_update_report *report)
{
    dp_strategy *d = arg;
    *report = (dp_update_report){0};
    if (!d->type->after_update)
        return 0;
    double started = MPI_Wtime();
    int status = d->type->after_update(d, done, report);
    double spent = MPI_Wtime() - started;
    d->times.exposed += spent;
    d->times.in_update += spent;
    return status;
}

static int group_done(void *arg, int last)
{
    dp_strategy *d = arg;
    return d->type->group_done ? d->type->group_done(d, last) : 0;
}

size_t dp_strategy_groups(const dp_strategy *d, dp_range step)
{
    return d->type->groups ? d->type->groups(d, step) : dp_strategy_micro_groups(d, step);
}

void dp_strategy_group(const dp_strategy *d, dp_range step, size_t k, dp_row_group *group)
{
    if (d->type->group)
        d->type->group(d, step, k, group);
    else
        dp_strategy_micro_group(d, step, k, group);
}

float dp_strategy_grad_scale(const dp_strategy *d, dp_range step)
{
    if (!d->type->scales_locally) /* sum then divide by the global count: exact for uneven slices */
        return 1.0f / (float)dp_range_size(step);
    double rows = 0.0;
    for (size_t k = 0; k < dp_strategy_groups(d, step); k++) {
        dp_row_group group;
        dp_strategy_group(d, step, k, &group);
        rows += (double)dp_range_size(group.rows);
    }
    return rows > 0.0 ? 1.0f / (float)rows : 0.0f;
}

int dp_strategy_set_replica(dp_strategy *d, const dp_replica_tensor *tensors, int count)
{
    return d->type->set_replica ? d->type->set_replica(d, tensors, count) : 0;
}

int dp_strategy_per_rank_statistics(const dp_strategy *d, int batchnorms, int sync_batchnorms)
{
    return d->type->per_rank_statistics ? d->type->per_rank_statistics(batchnorms, sync_batchnorms)
                                        : batchnorms > sync_batchnorms;
}

int dp_strategy_replicas_agree(const dp_strategy *d, long steps_done)
{
    return d->type->replicas_agree ? d->type->replicas_agree(d, steps_done) : 1;
}

void dp_strategy_attach(dp_strategy *d, dp_step_hooks *hooks)
{
    *hooks = (dp_step_hooks){.before = before_module, .grad_ready = grad_ready, .finish = finish,
                             .after_update = after_update, .group_done = group_done, .arg = d};
    if (d->type->attach)
        d->type->attach(d, hooks);
}

void dp_strategy_observe_spans(dp_strategy *d, dp_strategy_span_fn on_span, void *arg)
{
    d->on_span = on_span;
    d->span_arg = arg;
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
static int describe_bucket_plan(const dp_strategy *d, char *text, size_t size)
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

int dp_strategy_explain_nonfinite(dp_strategy *d, char *text, size_t size)
{
    text[0] = '\0';
    return d->type->explain_nonfinite ? d->type->explain_nonfinite(d, text, size) : 0;
}

int dp_strategy_bucket_count(const dp_strategy *d)
{
    return d->nbuckets;
}

const char *dp_strategy_collective(const dp_strategy *d)
{
    return d->type->collective_name;
}

int dp_strategy_describe_gradients(const dp_strategy *d, char *text, size_t size)
{
    return d->type->describe_gradients ? d->type->describe_gradients(d, text, size) : 0;
}

const dp_strategy_layout *dp_strategy_gathered_units(const dp_strategy *d)
{
    return d->type->shards_params ? &d->gathers.layout : NULL;
}

int dp_strategy_describe_buckets(const dp_strategy *d, char *text, size_t size)
{
    int used = describe_bucket_plan(d, text, size);
    if (used >= 0 && (size_t)used < size && d->comm->size > 1 && d->config.overlap && d->config.progress_us > 0)
        used += snprintf(text + used, size - (size_t)used, ", a progress thread every %ld us",
                         d->config.progress_us);
    return used;
}

void dp_strategy_describe(const dp_strategy *d, char *text, size_t size)
{
    if (d->type->describe)
        d->type->describe(d, text, size);
    else
        dp_strategy_describe_buckets(d, text, size);
}
