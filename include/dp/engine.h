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
} dp_engine_device;

/* What the training engine is built from. */
typedef struct dp_engine_config {
    const dp_model_spec *model;
    dp_dims input;                /* one sample's shape */
    int max_rows;                  /* most rows one forward takes (a slice, or an evaluation chunk) */
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
} dp_engine_config;

typedef struct dp_engine {
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
    dp_device_clock device_clock;  /* this step's marks on the device's timer */
    int graph_use;                 /* --cuda-graph: full steps replay `graph` */
    int graph_warm;                /* a full step ran eagerly: the next one is captured */
    void *graph;                   /* the captured full step (the backend's), NULL before */
    dp_device_clock graph_clock;   /* the marks the graph's launches make on the device's timer */
    dp_rows *graph_rows;           /* where the captured step reads each micro-batch's rows (accum of them) */
    int64_t *graph_counts;         /* what each launch adds to the model's counters (BatchNorm's batches) */
    dp_comm_traffic graph_traffic; /* what each launch's collectives send (counted once, at the capture) */
    char graph_text[320];          /* --cuda-graph's state for the banner: on, or off and why */
} dp_engine;

/* The backend this rank computes on: the GPU binding planned over the node's ranks by GPU
 * identity, --device auto resolved alike on every rank, the gradients' path to the collectives
 * (collective). */
int dp_engine_open_device(dp_engine *e, dp_comm *comm, const dp_engine_device *device);
/* The model, strategy, optimizer and step buffers (collective). */
int dp_engine_build(dp_engine *e, const dp_engine_config *config);
/* A forward-only engine's model (predict). */
int dp_engine_build_forward(dp_engine *e, const dp_model_spec *spec, const dp_dims *input, int max_rows);
/* Frees everything, the backend last. */
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
 * --exact's run of shards): the timeline's room per step. */
size_t dp_engine_row_groups_per_step(const dp_engine *e);

/* How gradients reach the collectives, for the banner. */
const char *dp_engine_gradient_path(const dp_engine *e);

#endif
