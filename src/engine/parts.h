/* Inside engine/: what its files share. */
#ifndef DP_ENGINE_PARTS_H
#define DP_ENGINE_PARTS_H

#include "dp/engine.h"

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
