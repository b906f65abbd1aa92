/* Inside engine/: what its files share. */
#ifndef DP_ENGINE_PARTS_H
#define DP_ENGINE_PARTS_H

#include "dp/engine.h"

/* The engine: one owner for the training step. It holds what a step computes with: the
 * backend it runs on, the model, the optimizer over this rank's range, the strategy whose hooks
 * it calls, and the step's device buffers (loss and count totals, the non-finite count, GPU
 * gradient staging). */
struct dp_engine {
    const dp_backend *be;
    dp_comm *comm;
    dp_model model;
    dp_optimizer opt;
    dp_strategy *strategy;         /* NULL: a forward-only engine */
    dp_step_hooks hooks;           /* the strategy's (its own attach) */
    dp_engine_observer observer;
    dp_loss loss;
    size_t micro_batch;
    long accum;                    /* micro-batches per optimizer step */
    uint64_t seed;
    int skip_nonfinite;
    int *segment_of;               /* module -> its slice of the flat buffers in the layout (-1: none) */
    size_t *segment_offset, *segment_count;
    size_t *segment_row, *segment_rows; /* the weight rows a ZeRO budget may cut each in */
    size_t piece_floats;           /* backward reports gradients in pieces of at most this */
    int stage_gradients;           /* GPU gradients go through host_grads to the collectives */
    char auto_choice[160];         /* --allreduce auto: what it chose and why, for the banner */
    float *host_grads;             /* page-locked staging for that; NULL when unused */
    double *train_totals;          /* backend memory: training loss and correct count since last read */
    double *group_totals;          /* backend memory: one row group's loss and count, where its total is rounded */
    double *nonfinite;             /* backend memory: the optimizer pass's non-finite gradient count */
    int broadcast_buffers;         /* W > 1 and the strategy leaves running statistics per rank: rank 0's win */
    float *host_buffers;           /* host staging for that broadcast */
    uint64_t *rank_values;         /* one per rank: the first non-finite tensor's agreement */
    long steps_done;               /* optimizer steps taken, for the schedule and the dropout masks */
    long total_steps;              /* in the run */
    uint64_t *step_number;         /* backend memory: steps_done as the step's kernels read it (dropout) */
    uint64_t *host_step_number;    /* its page-locked staging */
    long skipped_steps;            /* updates dropped by --on-nan skip */
    float clip_grad_norm;          /* --clip-grad-norm: the averaged gradient's largest L2 norm; 0: none */
    double *squares;               /* backend memory: its sum of squares over this rank's range */
    float grad_scale, lr;          /* the step's, as prepared (clipping prepares the pass again) */
    double grad_norm;              /* the last update's norm, before clipping */
    int clipped;                   /* and whether it scaled the gradient down */
    dp_device_clock device_clock;  /* this step's marks on the device's timer */
    int graph_use;                 /* --cuda-graph: full steps replay `graph` */
    int graph_warm;                /* a full step ran eagerly: the next one is captured */
    void *graph;                   /* the captured full step (the backend's), NULL before */
    dp_device_clock graph_clock;   /* the marks the graph's launches make on the device's timer */
    dp_rows *graph_rows;           /* where the captured step reads each micro-batch's rows (accum of them) */
    int64_t *graph_counts;         /* what each launch adds to the model's counters (BatchNorm's batches) */
    dp_comm_traffic graph_traffic; /* what each launch's collectives send (counted once, at the capture) */
    char graph_text[320];          /* --cuda-graph's state for the banner: on, or off and why */
};

/* device.c: where the collectives find the gradients (in place, or staged through host_grads). */
dp_strategy_buffers dp_engine_gradient_buffers(dp_engine *e);

/* update.c: finishes the gradient (grad_scale: 1 / global sample count) and updates: one fused
 * pass with --on-nan abort, a counting pass first with --on-nan skip. A non-finite gradient
 * fails naming the step and the first tensor (abort), or drops the update (skip); the decision
 * is the same on every rank because the reduced gradient is. prepare_step writes what changes
 * from step to step (the step number, the optimizer's coefficients) to backend memory before
 * any of the step's work is queued (a replayed graph reads them there); update runs the passes and checks; a graph captures update_pass (--on-nan
 * abort's one pass) and its replays are followed by update_check. */
void dp_engine_prepare_step(dp_engine *e, float grad_scale, float lr);
/* --clip-grad-norm (a step that clips is never a graph's): the norm of the averaged gradient over
 * every rank, and the update's coefficients prepared again with the gradient scaled down. */
int dp_engine_clip(dp_engine *e);
/* BatchNorm's running statistics after a step: any non-finite value (a batch's variance that
 * overflowed) stops the run naming the tensor, as the update's own check does for parameters. */
int dp_engine_check_statistics(dp_engine *e);
int dp_engine_update(dp_engine *e, float lr);
void dp_engine_update_pass(dp_engine *e);
int dp_engine_update_check(dp_engine *e, float lr);

/* step.c: this rank's row groups of the step, as the strategy shapes it (micro-batches, or
 * --exact's fixed shards), through forward, loss and backward between the strategy's hooks,
 * group k's rows in the source's slot k where graphs replay steps; a span of the step shown
 * to the observer (--trace, the timeline). */
int dp_engine_row_groups(dp_engine *e, dp_range step, const dp_row_source *source, dp_step_stats *stats);
void dp_engine_observe_span(const dp_engine *e, const char *name, const char *category, double begin, double end);

/* graph.c (--cuda-graph): whether graphs replay full steps, decided at build (on where
 * unsupported fails naming why); whether `step` runs from the graph (a full step, after one
 * eager warm-up: cuBLAS and the kernels load outside a capture); that step: rows gathered,
 * then the graph of forward, loss, backward and the update captured (the first time) and
 * launched, then the update's check; *reduce_done gets when the check returned. */
int dp_engine_plan_graph(dp_engine *e, const dp_engine_config *c);
int dp_engine_graph_takes(dp_engine *e, dp_range step);
int dp_engine_graph_step(dp_engine *e, dp_range step, const dp_row_source *source, float lr, dp_step_stats *stats,
                         double *reduce_done);
void dp_engine_graph_free(dp_engine *e);

/* device_clock.c: a mark on the device's timer at a phase boundary (nothing on the CPU), and
 * at the step's end the marks read into split's device times (waiting for the device). */
void dp_device_clock_mark(dp_engine *e);
void dp_device_clock_finish(dp_engine *e, dp_time_split *split);

#endif
