/* The engine: one owner for the training step (src/engine/step.c reads top to bottom as
 * DESIGN.md's "one training step"). It holds what a step computes with: the backend it runs
 * on, the model, the optimizer over this rank's range, the strategy whose hooks it calls, and
 * the step's device buffers (loss and count totals, the non-finite count, GPU gradient
 * staging). The run around it (epochs, evaluation, checkpoints, reports) is train/'s; rows come
 * from a dp_row_source; an observer sees the step's passes and phases without driving them.
 * `predict` opens a forward-only engine: a backend and a model, no strategy. */
#ifndef DP_ENGINE_H
#define DP_ENGINE_H

#include "dp/backend.h"
#include "dp/comm.h"
#include "dp/nn.h"
#include "dp/optim.h"
#include "dp/partition.h"
#include "dp/strategy.h"

#include <stddef.h>
#include <stdint.h>

/* Where a step's time went on this rank (seconds). */
typedef struct dp_time_split {
    double forward;    /* gathering rows, forward and loss */
    double backward;   /* backward, starting collectives as buckets fill */
    double exposed;    /* waiting for the collectives after backward: communication not hidden */
    double optimizer;  /* the optimizer pass, the checks, the buffers' broadcast */
    double comm;       /* the collectives, from start to seen complete */
    double hidden;     /* the part of comm during backward */
    /* A GPU's own time per phase, from events queued at the phases' boundaries (0 without a
     * device timer): forward and loss, backward, after backward until the update may start
     * (collectives, staging), the update, over device_steps steps (those it could time). The
     * host's times above include its waits for the device. */
    double device_forward, device_backward, device_wait, device_optimizer, device_steps;
} dp_time_split;

/* The device timer's marks of one step (src/engine/device_clock.c): the start, two per
 * micro-batch, two after backward; a step with more micro-batches goes untimed. */
#define DP_DEVICE_CLOCK_MARKS 67
typedef struct dp_device_clock {
    int mark[DP_DEVICE_CLOCK_MARKS];
    int count;
} dp_device_clock;

/* What one step did, for the run loop to report. */
typedef struct dp_step_stats {
    double samples;    /* this rank's rows */
    float lr;          /* the learning rate the update used */
    int has_norm;      /* --clip-grad-norm: grad_norm was computed */
    double grad_norm;  /* the L2 norm of the step's averaged gradient over every parameter and rank */
    int clipped;       /* the gradient was scaled by max / (norm + 1e-6) */
    double seconds;    /* the whole step */
    dp_time_split split;
    double sent[DP_COLLECTIVE_KINDS]; /* bytes this rank's collectives sent in the step */
    int averaged;      /* local-sgd: the replicas were averaged after the step (its after_update) */
    double divergence; /* then: the largest ||p_r - mean|| / ||mean|| over ranks before */
} dp_step_stats;

/* A micro-batch's rows where the backend computes. */
typedef struct dp_rows {
    const float *x;
    const int32_t *labels;   /* class labels, or NULL */
    const float *targets;    /* regression targets, or NULL */
    int count;
} dp_rows;

/* Where a step's rows come from: gather places the samples at positions [begin, end) of the
 * epoch's order in backend memory, in the source's buffer set `slot`, and says where
 * (train/batches.c). Slot k holds micro-batch k of a step replayed from a CUDA graph, so that
 * all its micro-batches' rows are in place before the one launch; other steps use slot 0. */
typedef struct dp_row_source {
    int (*gather)(void *arg, size_t begin, size_t end, int slot, dp_rows *rows);
    void *arg;
} dp_row_source;

/* Watches a step without driving it (tracing): each module's pass as it begins and ends, and
 * the engine's own phases as spans (MPI_Wtime). Either may be NULL. */
typedef struct dp_engine_observer {
    void (*pass)(void *arg, int module, int backward, int begin);
    void (*span)(void *arg, const char *name, const char *category, double begin, double end);
    void *arg;
} dp_engine_observer;

/* The device a rank computes on. */
typedef struct dp_engine_device {
    dp_device device;
    int share_gpu;
    dp_precision precision; /* --precision: the GEMMs' inputs */
    int cuda_aware;       /* --cuda-aware: MPI may be handed GPU memory */
    int unfused;          /* --fuse off: the backend fuses no GEMM epilogue */
    const char *sums_on_host; /* why the strategy's collectives add in host memory, or NULL */
} dp_engine_device;

/* What the training engine is built from. */
typedef struct dp_engine_config {
    const dp_model_spec *model;
    dp_dims input;                /* one sample's shape */
    int max_rows;                  /* most rows one forward takes (a rank's slice; evaluation reads as many at once) */
    dp_loss loss;
    dp_optimizer_config optimizer;
    const dp_strategy_choice *strategy; /* which strategy, and its keys */
    int overlap;                   /* 0: --no-overlap */
    double bucket_mb;              /* 0: auto */
    long progress_us;              /* a progress thread every so many us; 0: none */
    size_t micro_batch;            /* global rows per micro-batch (--batch) */
    uint64_t seed;                 /* dropout masks */
    int skip_nonfinite;            /* --on-nan skip: a non-finite gradient drops the update */
    long accum;                    /* micro-batches per optimizer step */
    long total_steps;              /* optimizer steps in the run (local SGD averages after the last) */
    dp_graph_mode graph;           /* --cuda-graph */
    int traced;                    /* --trace: every module's pass is marked on the device's timer */
    float clip_grad_norm;          /* > 0: the averaged gradient's largest L2 norm (clip_grad_norm_) */
} dp_engine_config;

/* The engine at work: what a step computes with (engine/parts.h has its fields). */
typedef struct dp_engine dp_engine;

/* The backend this rank computes on: the GPU binding planned over the node's ranks by GPU
 * identity, --device auto resolved alike on every rank, the gradients' path to the collectives
 * (collective). */
int dp_engine_open_device(dp_engine **out, dp_comm *comm, const dp_engine_device *device);
/* The model, strategy, optimizer and step buffers (collective). */
int dp_engine_build(dp_engine *e, const dp_engine_config *config);
/* A forward-only engine's model (predict). */
int dp_engine_build_forward(dp_engine *e, const dp_model_spec *spec, const dp_dims *input, int max_rows);
/* Frees everything, the backend last (NULL: nothing). */
void dp_engine_close(dp_engine *e);

/* One optimizer step over the samples at positions `step` of the epoch's order: micro-batches
 * of this rank's rows through forward, loss and backward between the strategy's hooks, then
 * the update at rate lr. stats gets what the step did. */
int dp_engine_step(dp_engine *e, dp_range step, const dp_row_source *source, float lr, dp_step_stats *stats);

/* Forward of rows samples x through every module, each after the strategy's before hook
 * (ZeRO-3 gathers its parameters); *out gets the output. Evaluation and predict. */
int dp_engine_forward(dp_engine *e, const dp_nn_context *ctx, const float *x, int rows, const float **out);

/* What the loss adds into backend totals (dp_model_loss): the summed loss, the correct count. */
enum dp_total { DP_TOTAL_LOSS, DP_TOTAL_CORRECT, DP_TOTALS };

/* DP_TOTALS doubles of backend memory set to zero, for a pass's loss totals (the caller frees
 * them with the backend); NULL with the error recorded on failure. */
double *dp_engine_new_totals(const dp_engine *e, const char *what);

/* The loss and correct count accumulated in backend totals since the last read, added to
 * *loss_sum and *correct; the totals are zeroed. */
void dp_engine_take_totals(dp_engine *e, double *totals, double *loss_sum, double *correct);

/* --cuda-graph as this engine runs it, for the banner: "on: ..." or "off (auto): why". */
const char *dp_engine_graph_describe(const dp_engine *e);
/* The buffer sets a row source needs (dp_row_source's slots): a step's micro-batches where
 * graphs replay steps, else 1. */
int dp_engine_row_slots(const dp_engine *e);

/* The row groups this rank computes in a full step (the strategy's shape: micro-batches, or
 * --exact's run of fixed row groups): the timeline's room per step. */
size_t dp_engine_row_groups_per_step(const dp_engine *e);

/* What the engine is made of, read-only: the backend, the model, the optimizer, the strategy
 * (NULL in a forward-only engine), and the optimizer steps taken and skipped (--on-nan skip). */
const dp_backend *dp_engine_backend(const dp_engine *e);
const dp_model *dp_engine_model(const dp_engine *e);
const dp_optimizer *dp_engine_optimizer(const dp_engine *e);
dp_strategy *dp_engine_strategy(const dp_engine *e);
long dp_engine_steps_done(const dp_engine *e);
long dp_engine_skipped_steps(const dp_engine *e);
/* observer watches the steps from now on (the timeline). */
void dp_engine_set_observer(dp_engine *e, const dp_engine_observer *observer);

/* The training loss and correct count of the steps since the last call, added to *loss_sum and
 * *correct (the device's totals read, then zeroed). */
void dp_engine_take_loss(dp_engine *e, double *loss_sum, double *correct);
/* Evaluation: rows through the model in eval mode, its loss and correct count added into
 * totals (backend memory of dp_engine_new_totals). */
int dp_engine_evaluate(dp_engine *e, const dp_rows *rows, dp_loss loss, double *totals);

/* The engine's state as its components hold it (their state_dict): the model's parameters,
 * its running statistics (with their int64 counters), then each optimizer state buffer. */
enum { DP_STATE_PARAMETERS, DP_STATE_STATISTICS, DP_STATE_OPTIMIZER };
typedef struct dp_state_buffer {
    const char *name;               /* the optimizer state's checkpoint name; else what it is */
    const dp_param_table *tensors;  /* the model's named tensors over it; NULL: one flat tensor */
    size_t floats;                  /* the whole buffer */
    dp_range held;                  /* what this rank holds: the whole, or its shard (the strategy's) */
    float *data;                    /* backend memory holding `held` */
    int64_t *counters;              /* the statistics' int64 counters (host memory); NULL elsewhere */
} dp_state_buffer;
int dp_engine_state_count(const dp_engine *e);
dp_state_buffer dp_engine_state(const dp_engine *e, int i);
/* Whether b is held as this rank's shard, not whole. */
int dp_state_is_sharded(const dp_state_buffer *b);
/* Collective: buffer i whole in host on rank root (every rank when root < 0); where sharded,
 * other ranks' host holds their part as staging. */
int dp_engine_gather_state(dp_engine *e, int i, float *host, int root);
/* Collective: the window of sharded buffer i into host on rank root, which holds the window
 * alone (a streamed --save gathers piece by piece); elsewhere host stages the rank's shard. */
int dp_engine_gather_state_window(dp_engine *e, int i, dp_range window, float *host, int root);
/* Collective: rank root's whole buffer i in host (root < 0: every rank's own) into every rank's
 * memory: broadcast where held whole (with the counters), scattered where sharded. */
int dp_engine_scatter_state(dp_engine *e, int i, float *host, int root);
/* The part `part` (within what this rank holds) of buffer i into host; host (what this rank
 * holds, from its first element) into buffer i's memory. */
void dp_engine_download_held(const dp_engine *e, int i, dp_range part, float *host);
void dp_engine_upload_held(dp_engine *e, int i, const float *host);
/* The optimizer's update count (AdamW's optimizer.step), NULL where it keeps none; rank root's
 * to every rank (collective). */
int64_t *dp_engine_update_count(dp_engine *e);
int dp_engine_share_update_count(dp_engine *e, int root);
/* A resumed run continues after steps_done optimizer steps. */
void dp_engine_resume_at(dp_engine *e, long steps_done);

/* How gradients reach the collectives, for the banner. */
const char *dp_engine_gradient_path(const dp_engine *e);
/* What --allreduce auto chose on this device and why ("" when another algorithm was named). */
const char *dp_engine_algorithm_choice(const dp_engine *e);

#endif
