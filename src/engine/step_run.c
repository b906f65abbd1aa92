/* One training step, top to bottom: the micro-batches' passes (step.c), replayed from a CUDA
 * graph (graph.c) or issued eagerly, then
 *
 *   hooks.finish            every collective done
 *   update                  scale, non-finite check, optimizer over this rank's range
 *   hooks.after_update      ZeRO: the parameters whole again, or forgotten; local SGD's averaging
 *
 * and what the step cost, split by phase. Above both
 * graph.c and step.c, so the choice between them is made here. */
#include "src/engine/parts.h"

#include "dp/error.h"

#include <string.h>

/* Plain BatchNorm's running statistics differ by rank: rank 0's go to all, as DDP's
 * broadcast_buffers does, so the replicas stay identical. */
static int share_buffers(dp_engine *e)
{
    size_t bytes = dp_params_floats(&e->model.buffers) * sizeof(float);
    e->be->download(e->be, e->host_buffers, e->model.buffer_values, bytes);
    int status = dp_comm_broadcast(e->comm, e->host_buffers, bytes, 0);
    if (!status)
        e->be->upload(e->be, e->model.buffer_values, e->host_buffers, bytes);
    return status;
}

/* The strategy's communication inside forward, backward and after the update counts as
 * communication, not computation; what the step's collectives sent. */
static void account(dp_engine *e, const dp_comm_traffic *before, double reduce_done, double done,
                    dp_step_stats *stats)
{
    dp_strategy_times comm = dp_strategy_take_times(e->strategy);
    stats->split.forward -= comm.in_forward;
    stats->split.backward -= comm.in_backward;
    stats->split.exposed += comm.exposed;
    stats->split.optimizer += done - reduce_done - comm.in_update;
    stats->split.comm += comm.busy;
    stats->split.hidden += comm.hidden;
    for (int kind = 0; kind < DP_COLLECTIVE_KINDS; kind++)
        stats->sent[kind] += (double)(e->comm->traffic.bytes[kind] - before->bytes[kind]);
}

/* The step issued operation by operation: the strategy's row groups, its finish, the update;
 * *reduce_done gets when the collectives were done. */
static int run_eagerly(dp_engine *e, dp_range step, const dp_row_source *source, float lr, dp_step_stats *stats,
                       double *reduce_done)
{
    dp_device_clock_mark(e);
    int status = dp_engine_row_groups(e, step, source, stats);
    /* Waiting for the device makes backward's time include its work. */
    if (!status && e->comm->size > 1)
        e->be->synchronize(e->be);
    if (status || (status = e->hooks.finish(e->hooks.arg)))
        return status;
    *reduce_done = MPI_Wtime();
    dp_device_clock_mark(e);
    return dp_engine_update(e, lr);
}

int dp_engine_step(dp_engine *e, dp_range step, const dp_row_source *source, float lr, dp_step_stats *stats)
{
    double started = MPI_Wtime();
    dp_comm_traffic traffic = e->comm->traffic;
    memset(stats, 0, sizeof *stats);
    dp_engine_prepare_step(e, dp_strategy_grad_scale(e->strategy, step), lr);
    double reduce_done = started;
    int status = dp_engine_graph_takes(e, step) ? dp_engine_graph_step(e, step, source, lr, stats, &reduce_done)
                                                : run_eagerly(e, step, source, lr, stats, &reduce_done);
    dp_update_done done_update = {.steps_done = e->steps_done + 1, .total_steps = e->total_steps,
                                  .rows = stats->samples};
    dp_update_report report;
    if (status || (status = e->hooks.after_update(e->hooks.arg, &done_update, &report)))
        return status;
    stats->averaged = report.averaged;
    stats->divergence = report.divergence;
    dp_device_clock_mark(e);
    if (e->broadcast_buffers && (status = share_buffers(e)))
        return status;
    if (e->model.batchnorms && (status = dp_engine_check_statistics(e)))
        return status;
    e->steps_done++;
    double done = MPI_Wtime();
    dp_engine_observe_span(e, "optimizer", "optimizer", reduce_done, done);
    account(e, &traffic, reduce_done, done, stats);
    dp_device_clock_finish(e, &stats->split);
    stats->seconds = done - started;
    stats->lr = lr;
    stats->has_norm = e->clip_grad_norm > 0.0f;
    stats->grad_norm = e->grad_norm;
    stats->clipped = e->clipped;
    return 0;
}
