/* The passes of one training step (DESIGN.md, "one training step"; step_run.c runs the step
 * around them):
 *
 *   for each micro-batch:   this rank's rows (--exact: for each of this rank's fixed shards,
 *                           computed alone, then hooks.shard_done)
 *     for module i:         hooks.before(i, forward); forward(i)
 *     loss
 *     for module i reversed: hooks.before(i, backward); backward(i), each final gradient
 *                           piece to hooks.grad_ready
 *
 * Communication is driven from the hooks alone (the strategy progresses its requests in
 * before and grad_ready); the observer only watches. */
#include "src/engine/parts.h"

#include "dp/error.h"
#include "src/strategy/exact_sum.h"

#include <string.h>

static void observe_pass(const dp_engine *e, int module, int backward, int begin)
{
    if (e->observer.pass)
        e->observer.pass(e->observer.arg, module, backward, begin);
}

void dp_engine_observe_span(const dp_engine *e, const char *name, const char *category, double begin, double end)
{
    if (e->observer.span)
        e->observer.span(e->observer.arg, name, category, begin, end);
}

/* SyncBatchNorm's sums over the ranks (dp_nn_context.sum_doubles). */
static int sum_over_ranks(void *comm, double *values, int count)
{
    return dp_comm_sum_doubles(comm, values, count);
}

/* The strategy's before hook for module's pass; the module is pointed where it says. */
static int before(dp_engine *e, int module, int backward, int communicates)
{
    if (!e->hooks.before)
        return 0;
    int last = e->model.count - 1;
    dp_pass pass = {.module = module, .segment = e->segment_of[module], .backward = backward,
                    .first = backward ? module == last : module == 0, .communicates = communicates};
    float *weights, *grads;
    int status = e->hooks.before(e->hooks.arg, &pass, &weights, &grads);
    if (!status)
        dp_model_bind(&e->model, module, weights, grads);
    return status;
}

/* Forward through every module; a step's passes are observed, evaluation's are not. */
static int forward(dp_engine *e, const dp_nn_context *ctx, const float *x, int rows, const float **out, int observed)
{
    for (int i = 0; i < e->model.count; i++) {
        if (observed)
            observe_pass(e, i, 0, 1);
        int status = before(e, i, 0, 0);
        if (!status)
            status = dp_model_forward_module(&e->model, i, ctx, x, rows, &x);
        if (observed)
            observe_pass(e, i, 0, 0);
        if (status)
            return status;
    }
    *out = x;
    return 0;
}

int dp_engine_forward(dp_engine *e, const dp_nn_context *ctx, const float *x, int rows, const float **out)
{
    return forward(e, ctx, x, rows, out, 0);
}

/* Backward from the loss's gradient in delta[0], last module first. */
static int backward(dp_engine *e, const dp_nn_context *ctx, int rows, int communicates)
{
    dp_grad_pieces pieces = {.max_floats = e->piece_floats, .ready = e->hooks.grad_ready, .place = e->hooks.place,
                             .arg = e->hooks.arg};
    float *dy = e->model.delta[0];
    for (int i = e->model.count - 1; i >= 0; i--) {
        observe_pass(e, i, 1, 1);
        int status = before(e, i, 1, communicates);
        if (!status)
            status = dp_model_backward_module(&e->model, i, ctx, rows, &pieces, &dy);
        observe_pass(e, i, 1, 0);
        if (status)
            return status;
    }
    return 0;
}

/* Rows [rows_at.begin, rows_at.end) of `step`, gathered into the source's `slot`, through
 * forward, loss (added into totals) and backward, in the context ctx (first_sample is set here). */
static int run_rows(dp_engine *e, dp_range step, dp_range rows_at, int slot, dp_nn_context ctx, int communicates,
                    double *totals, const dp_row_source *source, dp_step_stats *stats)
{
    double started = MPI_Wtime();
    dp_rows rows;
    int status = source->gather(source->arg, rows_at.begin, rows_at.end, slot, &rows);
    dp_engine_observe_span(e, "gather the batch's rows", "data", started, MPI_Wtime());
    if (status)
        return status;
    ctx.first_sample = rows_at.begin - step.begin;
    const float *out;
    if ((status = forward(e, &ctx, rows.x, rows.count, &out, 1)))
        return status;
    dp_model_loss(&e->model, e->loss, out, rows.labels, rows.targets, rows.count, e->model.delta[0], totals);
    dp_device_clock_mark(e);
    double forward_done = MPI_Wtime();
    status = backward(e, &ctx, rows.count, communicates);
    dp_device_clock_mark(e);
    stats->samples += rows.count;
    stats->split.forward += forward_done - started;
    stats->split.backward += MPI_Wtime() - forward_done;
    return status;
}

/* One rank has nothing to sum SyncBatchNorm's statistics with: its step waits for no host. */
static dp_nn_context training_context(const dp_engine *e)
{
    return (dp_nn_context){.be = e->be, .training = 1, .seed = e->seed, .step = e->step_number,
                           .sum_doubles = e->comm->size > 1 ? sum_over_ranks : NULL, .sum_arg = e->comm};
}

/* Micro-batch k of `step`, all ranks' rows. */
static dp_range micro_range(const dp_engine *e, dp_range step, size_t k)
{
    size_t begin = step.begin + k * e->micro_batch;
    return (dp_range){begin, begin + e->micro_batch < step.end ? begin + e->micro_batch : step.end};
}

size_t dp_engine_micro_count(const dp_engine *e, dp_range step)
{
    return (dp_range_size(step) + e->micro_batch - 1) / e->micro_batch;
}

dp_range dp_engine_micro_rows(const dp_engine *e, dp_range step, size_t k)
{
    dp_range micro = micro_range(e, step, k);
    dp_range mine = dp_partition(dp_range_size(micro), e->comm->size, e->comm->rank);
    return (dp_range){micro.begin + mine.begin, micro.begin + mine.end};
}

/* This rank's slice of micro-batch k of `step`, its rows in slot k where graphs replay steps.
 * Only the step's last micro-batch communicates where the strategy accumulates (DDP's no_sync). */
static int micro_batch(dp_engine *e, dp_range step, size_t k, const dp_row_source *source, dp_step_stats *stats)
{
    dp_nn_context ctx = training_context(e);
    /* Backward adds into the last micro-batch's gradients unless the strategy adds reduced shards. */
    ctx.accumulate = k != 0 && dp_strategy_backward_accumulates(&e->strategy);
    int slot = e->graph_use ? (int)k : 0;
    return run_rows(e, step, dp_engine_micro_rows(e, step, k), slot, ctx, k + 1 == dp_engine_micro_count(e, step),
                    e->train_totals, source, stats);
}

int dp_engine_micro_batches(dp_engine *e, dp_range step, const dp_row_source *source, dp_step_stats *stats)
{
    int status = 0;
    for (size_t k = 0; !status && k < dp_engine_micro_count(e, step); k++)
        status = micro_batch(e, step, k, source, stats);
    return status;
}

/* A shard's loss sum rounded to the grid on which sums are exact (src/strategy/exact_sum.h),
 * then added to the step's totals: the reported loss is the same for every W too. */
static void add_shard_totals(dp_engine *e)
{
    double loss = 0.0, correct = 0.0, totals[DP_TOTALS];
    dp_engine_take_totals(e, e->shard_totals, &loss, &correct);
    e->be->download(e->be, totals, e->train_totals, sizeof totals);
    totals[DP_TOTAL_LOSS] += dp_exact_round_total(loss);
    totals[DP_TOTAL_CORRECT] += correct;
    e->be->upload(e->be, e->train_totals, totals, sizeof totals);
}

/* --exact: the shards a step of `rows` rows is cut into (the last may be shorter). */
static size_t exact_shard_count(const dp_engine *e, size_t rows)
{
    return (rows + e->exact_shard - 1) / e->exact_shard;
}

size_t dp_engine_row_groups_per_step(const dp_engine *e)
{
    if (!e->exact_shard)
        return (size_t)e->accum;
    return dp_range_size(dp_partition(exact_shard_count(e, e->micro_batch * (size_t)e->accum), e->comm->size, 0));
}

/* --exact: the step cut into shards of e->exact_shard rows whatever W, this rank taking a
 * contiguous run of them. Each is computed alone (its own BatchNorm statistics, gradients
 * overwritten) so its bits do not depend on the rank, and handed to the strategy's exact sum.
 * Only the step's first shard, always rank 0's, moves BatchNorm's running statistics. */
int dp_engine_exact_shards(dp_engine *e, dp_range step, const dp_row_source *source, dp_step_stats *stats)
{
    dp_range mine = dp_partition(exact_shard_count(e, dp_range_size(step)), e->comm->size, e->comm->rank);
    int status = 0;
    for (size_t k = mine.begin; !status && k < mine.end; k++) {
        dp_nn_context ctx = training_context(e);
        ctx.sum_doubles = NULL;
        ctx.keep_running = k != 0;
        size_t begin = step.begin + k * e->exact_shard;
        dp_range rows = {begin, begin + e->exact_shard < step.end ? begin + e->exact_shard : step.end};
        status = run_rows(e, step, rows, 0, ctx, 0, e->shard_totals, source, stats);
        if (!status) {
            double started = MPI_Wtime(); /* adding the shard up counts as backward's work */
            add_shard_totals(e);
            status = e->hooks.shard_done(e->hooks.arg, k + 1 == mine.end);
            double done = MPI_Wtime();
            stats->split.backward += done - started;
            dp_engine_observe_span(e, "add the shard's gradient exactly", "exact", started, done);
        }
    }
    return status;
}

void dp_engine_take_totals(dp_engine *e, double *totals, double *loss_sum, double *correct)
{
    double host[DP_TOTALS];
    static const double zeros[DP_TOTALS];
    e->be->download(e->be, host, totals, sizeof host);
    e->be->upload(e->be, totals, zeros, sizeof zeros);
    *loss_sum += host[DP_TOTAL_LOSS];
    *correct += host[DP_TOTAL_CORRECT];
}
