/* Local SGD (--average-every K): no gradient all-reduce; every rank takes its own optimizer
 * steps on its own slices, and every K steps the replicas' parameters, optimizer state and
 * running statistics are replaced by their mean, weighted by the samples each rank took, through
 * all-reduces with the run's algorithm (docs/STRATEGIES.md, "--average-every"). Before the mean
 * replaces them, the parameters' distance from it is measured: the replicas' divergence. */
#include "src/strategy/strategy_type.h"

#include "dp/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct dp_local_sgd {
    dp_replica_tensor *tensors; /* the parameters first */
    int count;
    size_t total;        /* floats of every tensor together */
    float *host;         /* every tensor, one after the other: weighted, then the mean */
    float *mine;         /* this rank's parameters before the averaging */
    float *device;       /* where the all-reduce runs when it wants GPU memory; NULL: in host */
    size_t chunk;        /* floats per all-reduce */
    double *rank_divergence; /* one per rank */
    double samples;      /* this rank's samples since the replicas last met */
};

static int local_open(dp_strategy *d)
{
    d->state = dp_calloc(1, sizeof(struct dp_local_sgd), "the local-sgd state");
    return d->state ? 0 : DP_ENOMEM;
}

static void local_close(dp_strategy *d)
{
    struct dp_local_sgd *a = d->state;
    if (!a)
        return;
    dp_strategy_free_host_buffer(d, a->host);
    dp_strategy_free_host_buffer(d, a->mine);
    free(a->tensors);
    free(a->rank_divergence);
    free(a);
    d->state = NULL;
}

static int local_set_replica(dp_strategy *d, const dp_replica_tensor *tensors, int count)
{
    struct dp_local_sgd *a = d->state;
    if (!a || count < 1)
        return dp_fail(DP_EINVAL, "only local-sgd averages replicas, and it needs the parameters to average");
    const dp_backend *be = d->buffers.be;
    a->count = count;
    a->total = 0;
    for (int i = 0; i < count; i++)
        a->total += tensors[i].count;
    /* GPU memory for an algorithm that sums it there (nccl, CUDA-aware MPI): the gradient buffer,
     * free between an update and the next backward, carries the mean chunk by chunk. */
    a->device = !be->host_memory && !d->buffers.staged ? d->buffers.grads : NULL;
    a->chunk = a->device && d->layout.total < a->total ? d->layout.total : a->total;
    a->tensors = dp_calloc((size_t)count, sizeof *a->tensors, "the averaged tensors");
    a->mine = dp_strategy_host_buffer(d, (tensors[0].count ? tensors[0].count : 1) * sizeof(float), "this rank's parameters");
    a->rank_divergence = dp_calloc((size_t)d->comm->size, sizeof *a->rank_divergence, "the ranks' divergences");
    a->host = dp_strategy_host_buffer(d, (a->total ? a->total : 1) * sizeof(float), "the replicas' average");
    if (!a->tensors || !a->mine || !a->rank_divergence || !a->host)
        return DP_ENOMEM;
    memcpy(a->tensors, tensors, (size_t)count * sizeof *tensors);
    return d->comm->size > 1 ? dp_comm_reserve(d->comm, a->chunk, 1, 0) : 0;
}

/* host = the sum over ranks of host, a chunk per all-reduce (through GPU memory where the
 * algorithm sums there). */
static int sum_over_ranks(dp_strategy *d)
{
    struct dp_local_sgd *a = d->state;
    const dp_backend *be = d->buffers.be;
    int status = 0;
    for (size_t at = 0; !status && at < a->total; at += a->chunk) {
        size_t n = a->total - at < a->chunk ? a->total - at : a->chunk;
        float *buf = a->device ? a->device : a->host + at;
        if (a->device)
            be->upload(be, buf, a->host + at, n * sizeof(float));
        dp_request_args args = {.kind = DP_ALLREDUCE, .buf = buf, .count = n, .label = "the replicas' average"};
        status = dp_comm_run(d->comm, &args);
        if (!status && a->device)
            be->download(be, a->host + at, buf, n * sizeof(float));
    }
    return status;
}

/* ||mine - mean|| / ||mean|| over the parameters, in double; every rank's, then the largest. */
static int measure_divergence(dp_strategy *d, double *divergence)
{
    struct dp_local_sgd *a = d->state;
    double apart = 0.0, norm = 0.0;
    for (size_t i = 0; i < a->tensors[0].count; i++) {
        double diff = (double)a->mine[i] - (double)a->host[i];
        apart += diff * diff;
        norm += (double)a->host[i] * (double)a->host[i];
    }
    memset(a->rank_divergence, 0, (size_t)d->comm->size * sizeof *a->rank_divergence);
    a->rank_divergence[d->comm->rank] = norm > 0.0 ? sqrt(apart / norm) : apart > 0.0 ? INFINITY : 0.0;
    int status = dp_comm_sum_doubles(d->comm, a->rank_divergence, d->comm->size);
    *divergence = 0.0;
    for (int r = 0; !status && r < d->comm->size; r++)
        *divergence = a->rank_divergence[r] > *divergence ? a->rank_divergence[r] : *divergence;
    return status;
}

/* Every replica tensor becomes the replicas' mean weighted by the samples each rank took since
 * the last averaging (`samples`: this rank's), through all-reduces with the comm's algorithm,
 * bitwise the same on every rank afterwards; *divergence gets what the parameters were before. */
static int average(dp_strategy *d, double samples, double *divergence)
{
    struct dp_local_sgd *a = d->state;
    const dp_backend *be = d->buffers.be;
    *divergence = 0.0;
    if (!a || !a->host)
        return dp_fail(DP_EINVAL, "the replicas cannot be averaged: dp_strategy_set_replica was not called");
    if (d->comm->size == 1)
        return 0;
    double all_samples = samples;
    int status = dp_comm_sum_doubles(d->comm, &all_samples, 1);
    if (status)
        return status;
    /* Weighted by samples, K = 1 is DDP's mean gradient exactly, uneven slices included. */
    float weight = all_samples > 0.0 ? (float)(samples / all_samples) : 1.0f / (float)d->comm->size;
    size_t at = 0;
    for (int i = 0; i < a->count; at += a->tensors[i++].count)
        be->download(be, a->host + at, a->tensors[i].data, a->tensors[i].count * sizeof(float));
    memcpy(a->mine, a->host, a->tensors[0].count * sizeof(float));
    for (size_t i = 0; i < a->total; i++)
        a->host[i] *= weight;
    if ((status = sum_over_ranks(d)) || (status = measure_divergence(d, divergence)))
        return status;
    at = 0;
    for (int i = 0; i < a->count; at += a->tensors[i++].count)
        be->upload(be, a->tensors[i].data, a->host + at, a->tensors[i].count * sizeof(float));
    return 0;
}

static long every(const dp_strategy *d)
{
    return (long)dp_strategy_key_value(&d->config.choice, "every");
}

/* Every K steps by the global count, so a resume keeps the schedule, and after the last, so
 * --save and the last checkpoint hold one model. The averaging is communication. */
static int local_after_update(dp_strategy *d, const dp_update_done *done, dp_update_report *report)
{
    struct dp_local_sgd *a = d->state;
    a->samples += done->rows;
    if (done->steps_done % every(d) && done->steps_done != done->total_steps)
        return 0;
    double started = MPI_Wtime();
    int status = average(d, a->samples, &report->divergence);
    a->samples = 0.0;
    report->averaged = 1;
    double ended = MPI_Wtime();
    d->times.busy += ended - started;
    if (d->on_span)
        d->on_span(d->span_arg, "average the replicas", started, ended);
    return status;
}

static int local_replicas_agree(const dp_strategy *d, long steps_done)
{
    return steps_done % every(d) == 0;
}

/* Each rank keeps its statistics until the averaging. */
static int local_statistics(int batchnorms, int sync_batchnorms)
{
    (void)batchnorms;
    (void)sync_batchnorms;
    return 0;
}

/* Local SGD needs whole replicas, no communication between averagings, and checkpoints and
 * replica checks where the replicas are one model: right after an averaging. */
static int local_check(const dp_strategy_choice *c, const dp_strategy_run *run)
{
    long k = (long)dp_strategy_key_value(c, "every");
    if (run->grad_dtype != DP_DTYPE_F32)
        return dp_fail(DP_EINVAL, "%s and --grad-dtype %s: local SGD reduces no gradients (it averages the replicas "
                       "in float32)", c->label, dp_grad_dtype_name(run->grad_dtype));
    if (run->sync_batchnorms)
        return dp_fail(DP_EINVAL, "%s and SyncBatchNorm (--sync-bn or batchnorm(sync=1)): it sums statistics over the "
                       "ranks in every forward and backward, the communication local SGD avoids, across replicas "
                       "that differ; use plain batchnorm, whose running statistics are averaged with the parameters",
                       c->label);
    const char *option = run->checkpoint_every % k ? "--checkpoint-every" : run->check_replicas % k ? "--check-replicas"
                                                                                                    : NULL;
    if (option)
        return dp_fail(DP_EINVAL, "%s %ld and %s: the ranks hold one model only right after an averaging, every %ld "
                       "steps; use a multiple of %ld", option,
                       run->checkpoint_every % k ? run->checkpoint_every : run->check_replicas, c->label, k, k);
    return 0;
}

static int local_gradients(const dp_strategy *d, char *text, size_t size)
{
    snprintf(text, size, "each rank's own, never reduced (the replicas are averaged by all-reduce %s)",
             dp_comm_algorithm_name(d->comm));
    return 1;
}

/* The banner's strategy line. */
static int local_describe(const dp_strategy *d, char *text, size_t size)
{
    long k = (long)dp_strategy_key_value(&d->config.choice, "every");
    if (d->comm->size == 1)
        return snprintf(text, size, "%s on one rank: nothing to reduce", d->type->name);
    return snprintf(text, size, "%s: every %ld step%s the parameters, optimizer state and running statistics are "
                    "averaged, weighted by samples", d->type->name, k, k == 1 ? "" : "s");
}

static const dp_strategy_key keys[] = {
    {.name = "every", .metavar = "K", .fallback = 8, .least = 1, .most = 1e15, .whole = 1, .arithmetic = 1,
     .help = "optimizer steps between averagings (--average-every K)"},
};

/* This rank's parameters and the replica's average (parameters, optimizer state, running
 * statistics), host memory: backend memory only on a host backend. As local_set_replica. */
static double local_working_bytes(const dp_strategy_choice *c, const dp_strategy_sizes *s)
{
    (void)c;
    size_t params = s->params ? s->params : 1, total = s->params * (size_t)(1 + s->state_tensors) + s->buffer_floats;
    return s->on_device ? 0.0 : (double)(params + (total ? total : 1)) * sizeof(float);
}

const dp_strategy_type dp_strategy_local_sgd = {
    .name = "local-sgd",
    .summary = "local SGD (PostLocalSGDOptimizer): no gradient all-reduce; each rank steps on its own samples and "
               "every K steps the parameters, optimizer state and BatchNorm statistics are averaged, weighted by "
               "samples (docs/STRATEGIES.md; flawed by design: replicas drift between averagings)",
    .keys = keys,
    .key_count = 1,
    .check = local_check,
    .after_update = local_after_update,
    .set_replica = local_set_replica,
    .replicas_agree = local_replicas_agree,
    .per_rank_statistics = local_statistics,
    .scales_locally = 1,
    .describe = local_describe,
    .describe_gradients = local_gradients,
    .gradient_collective = DP_ALLREDUCE,
    .collective_name = "all-reduce",
    .local_steps = 1,
    .open = local_open,
    .close = local_close,
    .working_bytes = local_working_bytes,
};

