/* The passes of one training step (DESIGN.md, "one training step"; step_run.c runs the step
 * around them):
 *
 *   for each micro-batch:   this rank's rows (--exact: for each of this rank's fixed row groups,
 *                           computed alone, then hooks.shard_done)
 *     for module i:         hooks.before(i, forward); forward(i)
 *     loss
 *     for module i reversed: hooks.before(i, backward); backward(i), each final gradient
 *                           piece to hooks.grad_ready
 *
 * Communication is driven from the hooks alone (the strategy progresses its requests in
 * before and grad_ready); the observer only watches. */
#include "config.h"

#include "src/engine/parts.h"

#include "dp/error.h"
#include "dp/nvtx.h"

#include <string.h>

static void observe_pass(const dp_engine *e, int module, int backward, int begin)
{
    if (begin) /* Nsight Systems' ranges, in the CUDA build */
        dp_nvtx_push(backward ? "backward module" : "forward module", module);
    else
        dp_nvtx_pop();
    if (e->observer.pass)
        e->observer.pass(e->observer.arg, module, backward, begin);
}

void dp_engine_observe_span(const dp_engine *e, const char *name, const char *category, double begin, double end)
{
    if (e->observer.span)
        e->observer.span(e->observer.arg, name, category, begin, end);
}

/* A group's loss total rounded by its rule, then added to the step's totals. */
static void add_rounded_totals(dp_engine *e, double (*round_total)(double))
{
    double loss = 0.0, correct = 0.0, totals[DP_TOTALS];
    dp_engine_take_totals(e, e->group_totals, &loss, &correct);
    e->be->download(e->be, totals, e->train_totals, sizeof totals);
    totals[DP_TOTAL_LOSS] += round_total(loss);
    totals[DP_TOTAL_CORRECT] += correct;
    e->be->upload(e->be, e->train_totals, totals, sizeof totals);
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

int dp_engine_evaluate(dp_engine *e, const dp_rows *rows, dp_loss loss, double *totals)
{
    dp_nn_context ctx = {.be = e->be, .training = 0};
    const float *out;
    int status = forward(e, &ctx, rows->x, rows->count, &out, 0);
    if (!status)
        dp_model_loss(&e->model, loss, out, rows->labels, rows->targets, rows->count, NULL, totals);
    return status;
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

/* Group k of `step` (the strategy's shape): its rows gathered into the source's `slot`, through
 * forward, loss (added into the step's totals, or the group's rounded by its rule) and
 * backward, then the strategy's group_done. */
static int run_group(dp_engine *e, dp_range step, size_t k, int slot, const dp_row_source *source,
                     dp_step_stats *stats)
{
    dp_row_group group;
    dp_strategy_group(e->strategy, step, k, &group);
    dp_nn_context ctx = {.be = e->be, .training = 1, .seed = e->seed, .step = e->step_number,
                         .first_sample = group.rows.begin - step.begin, .accumulate = group.accumulate,
                         .keep_running = !group.moves_running};
    /* One rank, or a group computed alone, has nothing to sum SyncBatchNorm's statistics with. */
    if (e->comm->size > 1 && !group.alone) {
        ctx.sum_doubles = sum_over_ranks;
        ctx.sum_arg = e->comm;
    }
    double started = MPI_Wtime();
    dp_rows rows;
    int status = source->gather(source->arg, group.rows.begin, group.rows.end, slot, &rows);
    dp_engine_observe_span(e, "gather the batch's rows", "data", started, MPI_Wtime());
    if (status)
        return status;
    const float *out;
    if ((status = forward(e, &ctx, rows.x, rows.count, &out, 1)))
        return status;
    dp_model_loss(&e->model, e->loss, out, rows.labels, rows.targets, rows.count, e->model.delta[0],
                  group.round_total ? e->group_totals : e->train_totals);
    dp_device_clock_mark(e);
    double forward_done = MPI_Wtime();
    status = backward(e, &ctx, rows.count, group.communicates);
    dp_device_clock_mark(e);
    stats->samples += rows.count;
    stats->split.forward += forward_done - started;
    stats->split.backward += MPI_Wtime() - forward_done;
    if (status)
        return status;
    double added = MPI_Wtime(); /* what the strategy does with the group's gradient is backward's work */
    if (group.round_total)
        add_rounded_totals(e, group.round_total);
    status = e->hooks.group_done(e->hooks.arg, group.last);
    double done = MPI_Wtime();
    stats->split.backward += done - added;
    if (group.done_span)
        dp_engine_observe_span(e, group.done_span, group.done_category, added, done);
    return status;
}

int dp_engine_row_groups(dp_engine *e, dp_range step, const dp_row_source *source, dp_step_stats *stats)
{
    int status = 0;
    for (size_t k = 0; !status && k < dp_strategy_groups(e->strategy, step); k++)
        status = run_group(e, step, k, e->graph_use ? (int)k : 0, source, stats);
    return status;
}

size_t dp_engine_row_groups_per_step(const dp_engine *e)
{
    return dp_strategy_groups(e->strategy, (dp_range){0, e->micro_batch * (size_t)e->accum});
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

void dp_engine_take_loss(dp_engine *e, double *loss_sum, double *correct)
{
    dp_engine_take_totals(e, e->train_totals, loss_sum, correct);
}
