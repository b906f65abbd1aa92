/* --cuda-graph: the steady-state step replayed from a CUDA graph. A full step's forward, loss,
 * backward and update are captured once on the backend's stream and launched on later full
 * steps, so the host queues one graph instead of every kernel and GEMM. What changes between
 * steps is read from backend memory written before each launch: the rows (each of the step's
 * micro-batches, one or --accum's K, has its own buffers, a slot of the row source, all filled
 * before the launch), the step number (dropout's masks) and the optimizer's coefficients
 * (learning rate, AdamW's step; dp_engine_prepare_step). What the host keeps of a step
 * (BatchNorm's num_batches_tracked) each launch adds as the capture did. What a graph cannot
 * replay runs eagerly: a shorter step (the epoch's last, with fewer or shorter micro-batches),
 * the first full step (a warm-up, so that nothing loads inside the capture); log lines,
 * checks, checkpoints and evaluation read the device between steps, after a replay as after
 * an eager step. On W > 1 ranks with nccl, the buckets' collectives are captured too: each
 * started on NCCL's stream when backward finishes its bucket, after an event recorded on the
 * compute stream, and joined back by an event the compute stream waits for before the update,
 * so the host neither polls nor waits inside the step, and every rank replays the same
 * collectives in the same order. Steps that need the host inside them are not captured at
 * all: the reasons are listed in unsupported() and said by the banner (auto) or the error (on). */
#include "src/engine/parts.h"

#include "dp/error.h"
#include "dp/watchdog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Why this engine's steps cannot be captured (a phrase), or NULL when they can. */
static const char *unsupported(const dp_engine *e, const dp_engine_config *c, char *why, size_t size)
{
    if (!e->be->capture_begin)
        snprintf(why, size, "the %s backend has no CUDA graphs", e->be->name);
    else if (!e->be->supports(e->be, "capture", DP_DTYPE_F32, why, size))
        return why;
    else if (e->comm->size > 1 && !dp_comm_joins_on_device(e->comm))
        snprintf(why, size, "%d ranks with --allreduce %s: its collectives run on the host between backward's "
                 "modules (--allreduce nccl's are captured)", e->comm->size, dp_comm_algorithm_name(e->comm));
    else if (!dp_strategy_capturable(c->strategy, why, size))
        return why;
    else if (c->skip_nonfinite)
        snprintf(why, size, "--on-nan skip decides on the host between the counting and the applying pass");
    else if (c->clip_grad_norm > 0.0f)
        snprintf(why, size, "--clip-grad-norm reads the gradient's norm on the host before the update's pass");
    else if (c->traced)
        snprintf(why, size, "--trace marks every module's pass on the device's timer");
    else if (e->comm->size > 1 && e->model.sync_batchnorms)
        snprintf(why, size, "SyncBatchNorm on %d ranks sums its statistics over the ranks on the host",
                 e->comm->size);
    else if (e->comm->size > 1 && c->graph == DP_GRAPH_AUTO) /* the one line to change once a GPU measures it */
        snprintf(why, size, "%d ranks: not yet measured on a GPU; --cuda-graph on enables it", e->comm->size);
    else
        return NULL;
    return why;
}

int dp_engine_plan_graph(dp_engine *e, const dp_engine_config *c)
{
    char why[256];
    const char *reason = c->graph == DP_GRAPH_OFF ? NULL : unsupported(e, c, why, sizeof why);
    e->graph_use = c->graph != DP_GRAPH_OFF && !reason;
    if (c->graph == DP_GRAPH_ON && reason)
        return dp_fail(DP_EINVAL, "--cuda-graph on: steps cannot be captured here: %s (--cuda-graph auto runs them "
                       "eagerly)", reason);
    if (e->graph_use && e->accum > 1)
        snprintf(e->graph_text, sizeof e->graph_text, "on: full steps of %ld micro-batches of %zu rows, each "
                 "micro-batch's rows in its own buffers, replayed from one graph after an eager warm-up step; "
                 "shorter steps run eagerly", e->accum, e->micro_batch);
    else if (e->graph_use)
        snprintf(e->graph_text, sizeof e->graph_text, "on: full steps of %zu rows replayed from one graph after an "
                 "eager warm-up step; shorter steps run eagerly", e->micro_batch);
    if (e->graph_use && e->comm->size > 1) {
        size_t used = strlen(e->graph_text);
        snprintf(e->graph_text + used, sizeof e->graph_text - used, "; the gradients' NCCL collectives inside it, "
                 "joined to the step by events");
    } else if (!e->graph_use)
        snprintf(e->graph_text, sizeof e->graph_text, "off%s%s", reason ? " (auto): " : "", reason ? reason : "");
    return 0;
}

const char *dp_engine_graph_describe(const dp_engine *e)
{
    return e->graph_text;
}

int dp_engine_row_slots(const dp_engine *e)
{
    return e->graph_use ? (int)e->accum : 1;
}

int dp_engine_graph_takes(dp_engine *e, dp_range step)
{
    if (!e->graph_use || dp_range_size(step) != e->micro_batch * (size_t)e->accum)
        return 0;
    if (e->graph_warm)
        return 1;
    e->graph_warm = 1; /* this one runs eagerly */
    return 0;
}

/* The rows gathered before the capture, each micro-batch's in its slot, handed to the
 * captured step as its row source. */
static int held_rows(void *arg, size_t begin, size_t end, int slot, dp_rows *rows)
{
    (void)begin;
    (void)end;
    *rows = ((const dp_rows *)arg)[slot];
    return 0;
}

/* The model's host counters (BatchNorm's num_batches_tracked) move as the captured step's
 * passes are recorded, for its first launch; later launches add the same. */
static size_t counter_count(const dp_engine *e)
{
    return e->model.buffers.totals[DP_DTYPE_I64];
}

/* What the comm sent from `before` to now. */
static dp_comm_traffic traffic_since(const dp_comm *c, const dp_comm_traffic *before)
{
    dp_comm_traffic sent;
    for (int kind = 0; kind < DP_COLLECTIVE_KINDS; kind++) {
        sent.bytes[kind] = c->traffic.bytes[kind] - before->bytes[kind];
        sent.modelled[kind] = c->traffic.modelled[kind] - before->modelled[kind];
        sent.requests[kind] = c->traffic.requests[kind] - before->requests[kind];
    }
    return sent;
}

/* A launch's collectives, counted as the capture counted them. */
static void count_replayed_traffic(dp_comm *c, const dp_comm_traffic *sent)
{
    for (int kind = 0; kind < DP_COLLECTIVE_KINDS; kind++) {
        c->traffic.bytes[kind] += sent->bytes[kind];
        c->traffic.modelled[kind] += sent->modelled[kind];
        c->traffic.requests[kind] += sent->requests[kind];
    }
}

/* Records the step on rows (each micro-batch's, in backend memory already): nothing runs
 * until the launch; e->graph_rows keeps where they are. The buckets' collectives join the
 * backend's stream on the device while it captures. */
static int capture(dp_engine *e, dp_range step, dp_step_stats *stats)
{
    dp_row_source held = {.gather = held_rows, .arg = e->graph_rows};
    size_t counters = counter_count(e);
    e->graph_counts = dp_calloc(counters + 1, sizeof *e->graph_counts, "a graph's counter steps");
    if (!e->graph_counts)
        return DP_ENOMEM;
    for (size_t i = 0; i < counters; i++)
        e->graph_counts[i] = -e->model.counters[i];
    dp_comm_traffic before = e->comm->traffic;
    int status = e->be->capture_begin(e->be);
    if (status)
        return status;
    dp_strategy_join_on(e->strategy, e->be->stream);
    /* As the eager step, marks on the device's timer included (the graph's own event records). */
    dp_device_clock_mark(e);
    status = dp_engine_row_groups(e, step, &held, stats);
    if (!status)
        status = e->hooks.finish(e->hooks.arg);
    dp_device_clock_mark(e);
    if (!status)
        dp_engine_update_pass(e);
    dp_strategy_join_on(e->strategy, NULL);
    e->graph_traffic = traffic_since(e->comm, &before);
    char cause[512]; /* the step's own failure: ending the broken capture fails too */
    snprintf(cause, sizeof cause, "%s", status ? dp_last_error() : "");
    void *graph = e->be->capture_end(e->be);
    if (status || !graph) {
        if (graph)
            e->be->graph_free(e->be, graph);
        if (status)
            dp_fail(status, "%s", cause);
        return dp_fail_context(status ? status : DP_EDEVICE, "--cuda-graph: the step could not be captured: ");
    }
    e->graph = graph;
    for (size_t i = 0; i < counters; i++)
        e->graph_counts[i] += e->model.counters[i];
    e->graph_clock = e->device_clock;
    *stats = (dp_step_stats){0};
    return 0;
}

/* Whether two gathers left their rows in the same place. */
static int same_rows(const dp_rows *a, const dp_rows *b)
{
    return a->x == b->x && a->labels == b->labels && a->targets == b->targets && a->count == b->count;
}

/* Each micro-batch's rows of `step` into its slot, before the launch; where the captured
 * step read them (the first time, into e->graph_rows); *samples gets this rank's rows. */
static int gather_step(dp_engine *e, dp_range step, const dp_row_source *source, int *samples)
{
    int capturing = !e->graph;
    if (capturing && !e->graph_rows) {
        e->graph_rows = dp_calloc((size_t)e->accum, sizeof *e->graph_rows, "a graph's micro-batch rows");
        if (!e->graph_rows)
            return DP_ENOMEM;
    }
    *samples = 0;
    for (int k = 0; k < (int)e->accum; k++) {
        dp_row_group group;
        dp_strategy_group(e->strategy, step, (size_t)k, &group);
        dp_rows rows;
        int status = source->gather(source->arg, group.rows.begin, group.rows.end, k, &rows);
        if (status)
            return status;
        if (capturing)
            e->graph_rows[k] = rows;
        else if (!same_rows(&rows, &e->graph_rows[k]))
            return dp_fail(DP_EINVAL, "--cuda-graph: step %ld's rows of micro-batch %d are not where the captured "
                           "step read them", e->steps_done + 1, k + 1);
        *samples += rows.count;
    }
    return 0;
}

/* The launch and the host's first wait for it (the non-finite count). On W > 1 the
 * watchdog watches them as one operation, as it watches an eager step's requests: a rank that
 * never joins the graph's collectives ends the job instead of leaving the others waiting. */
static int launch(dp_engine *e, float lr)
{
    dp_watchdog *w = e->comm->size > 1 ? e->comm->watchdog : NULL;
    dp_watch entry;
    snprintf(entry.what, sizeof entry.what, "a CUDA graph's step with its collectives (%s)",
             dp_comm_algorithm_name(e->comm));
    int status = w ? dp_watchdog_watch(w, &entry) : 0;
    if (status)
        return status;
    e->be->graph_launch(e->be, e->graph);
    status = dp_engine_update_check(e, lr);
    int unwatched = w ? dp_watchdog_unwatch(w, &entry) : 0;
    return status ? status : unwatched;
}

int dp_engine_graph_step(dp_engine *e, dp_range step, const dp_row_source *source, float lr, dp_step_stats *stats,
                         double *reduce_done)
{
    double started = MPI_Wtime();
    int samples;
    int status = gather_step(e, step, source, &samples);
    if (status)
        return status;
    double gathered = MPI_Wtime();
    if (!e->graph) {
        if ((status = capture(e, step, stats)))
            return status;
    } else {
        dp_optimizer_count_replayed(&e->opt); /* the capture counted its own */
        for (size_t i = 0; i < counter_count(e); i++)
            e->model.counters[i] += e->graph_counts[i];
        e->device_clock = e->graph_clock;     /* the launch makes the capture's marks */
        count_replayed_traffic(e->comm, &e->graph_traffic);
    }
    status = launch(e, lr);
    *reduce_done = MPI_Wtime();
    stats->samples = samples;
    stats->split.forward = gathered - started;
    stats->split.backward = *reduce_done - gathered;
    return status;
}

void dp_engine_graph_free(dp_engine *e)
{
    if (e->graph)
        e->be->graph_free(e->be, e->graph);
    e->graph = NULL;
    free(e->graph_counts);
    e->graph_counts = NULL;
    free(e->graph_rows);
    e->graph_rows = NULL;
}
