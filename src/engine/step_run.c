/* One training step, top to bottom: the micro-batches' passes (step.c), replayed from a CUDA
 * graph (graph.c) or issued eagerly, then
 *
 *   hooks.finish            every collective done
 *   update                  scale, non-finite check, optimizer over this rank's range
 *   hooks.after_update      ZeRO: the parameters whole again, or forgotten
 *
 * and what the step cost, split by phase; local SGD's averaging between steps. Above both
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
    dp_strategy_times comm = dp_strategy_take_times(&e->strategy);
    stats->split.forward -= comm.in_forward;
    stats->split.backward -= comm.in_backward;
    stats->split.exposed += comm.exposed;
    stats->split.optimizer += done - reduce_done - comm.in_update;
    stats->split.comm += comm.busy;
    stats->split.hidden += comm.hidden;
    for (int kind = 0; kind < DP_COLLECTIVE_KINDS; kind++)
        stats->sent[kind] += (double)(e->comm->traffic.bytes[kind] - before->bytes[kind]);
}

/* This rank's rows of `step`: its slices of the micro-batches (what a local step divides by). */
static double rank_rows(const dp_engine *e, dp_range step)
{
    double rows = 0.0;
    for (size_t k = 0; k < dp_engine_micro_count(e, step); k++)
        rows += (double)dp_range_size(dp_engine_micro_rows(e, step, k));
    return rows;
}

/* The step issued operation by operation: micro-batches (or --exact's shards), the strategy's
 * finish, the update; *reduce_done gets when the collectives were done. */
static int run_eagerly(dp_engine *e, dp_range step, const dp_row_source *source, float lr, dp_step_stats *stats,
                       double *reduce_done)
{
    dp_device_clock_mark(e);
    int status = e->exact_shard ? dp_engine_exact_shards(e, step, source, stats) : dp_engine_micro_batches(e, step, source, stats);
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
    /* Sum then divide by the global count: exact for uneven slices and short batches. Local
     * steps divide by this rank's count; the averaging weights each rank by it. */
    float scale = 1.0f / (float)dp_range_size(step);
    if (dp_strategy_local_steps(&e->strategy)) {
        double rows = rank_rows(e, step);
        scale = rows > 0.0 ? 1.0f / (float)rows : 0.0f;
    }
    dp_engine_prepare_step(e, scale, lr);
    double reduce_done = started;
    int status = dp_engine_graph_takes(e, step) ? dp_engine_graph_step(e, step, source, lr, stats, &reduce_done)
                                                : run_eagerly(e, step, source, lr, stats, &reduce_done);
    e->samples_since_average += stats->samples;
    if (status || (status = e->hooks.after_update(e->hooks.arg)))
        return status;
    dp_device_clock_mark(e);
    if (e->broadcast_buffers && (status = share_buffers(e)))
        return status;
    e->steps_done++;
    double done = MPI_Wtime();
    dp_engine_observe_span(e, "optimizer", "optimizer", reduce_done, done);
    account(e, &traffic, reduce_done, done, stats);
    dp_device_clock_finish(e, &stats->split);
    stats->seconds = done - started;
    return 0;
}

int dp_engine_average(dp_engine *e, dp_step_stats *stats)
{
    double started = MPI_Wtime();
    dp_comm_traffic traffic = e->comm->traffic;
    int status = dp_strategy_average(&e->strategy, e->samples_since_average, &stats->divergence);
    e->samples_since_average = 0.0;
    double done = MPI_Wtime();
    dp_engine_observe_span(e, "average the replicas", "comm", started, done);
    stats->averaged = 1;
    stats->seconds += done - started;
    stats->split.exposed += done - started;
    stats->split.comm += done - started;
    for (int kind = 0; kind < DP_COLLECTIVE_KINDS; kind++)
        stats->sent[kind] += (double)(e->comm->traffic.bytes[kind] - traffic.bytes[kind]);
    return status;
}

