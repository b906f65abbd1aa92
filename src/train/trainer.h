/* The trainer's state, shared by the step loop (train.c), the training-state files
 * (state.c: initial parameters, resume, checkpoints, --save) and the safety checks (checks.c). */
#ifndef DP_TRAINER_H
#define DP_TRAINER_H

#include "dp/backend.h"
#include "dp/engine.h"
#include "dp/checkpoint.h"
#include "dp/comm.h"
#include "dp/data.h"
#include "dp/strategy.h"
#include "dp/nn.h"
#include "dp/optim.h"
#include "dp/options.h"
#include "dp/sampler.h"
#include "dp/watchdog.h"
#include "src/train/preempt.h"
#include "src/train/report.h"
#include "src/train/staging.h"
#include "src/train/tensorboard.h"
#include "src/train/trace.h"

/* batches.c: one micro-batch's rows read through the datasets' readers into backend memory
 * (the engine's dp_row_source), and the test set's rows for evaluation; with the sets held on
 * the device (resident.c), the rows gathered there instead. */
typedef struct dp_batches {
    const dp_backend *be;
    const dp_dataset *train, *test;
    const dp_sampler *sampler;     /* the epoch's order */
    dp_row_buffers *slots;         /* backend memory: slot 0 a micro-batch's or evaluation's rows
                                      (max_rows); slots 1.. the further micro-batches of a step that
                                      a CUDA graph replays (one micro-batch's rows each) */
    int slot_count;
    size_t slot_bytes;             /* what slots 1.. take, counted as data */
    dp_row_buffers stage;          /* a device backend: page-locked host rows read for one batch
                                      (NULL on a host backend, which reads into x and the rest) */
    size_t *row_index;             /* evaluation's contiguous rows as the reader's index list */
    size_t rows;                   /* rows the batch buffers and their staging hold (max_rows) */
    int resident;                  /* the sets are held in backend memory (resident.c) */
    dp_row_buffers train_set, test_set; /* the sets held whole in backend memory (resident.c) */
    int32_t *order;                /* backend memory: the epoch's order, the gathers' row indices */
    int32_t *stage_order;          /* page-locked host memory it is uploaded from */
    long order_epoch;              /* the sampler's epoch `order` holds; -1: none yet */
    char placement[512];           /* where the rows live, for the banner */
} dp_batches;

/* A step's module passes timed by the backend's timer (timer_mark slots), turned into spans
 * once the step's work has finished. */
typedef struct dp_device_span {
    char name[DP_TRACE_NAME_MAX];
    const char *category;
    int begin, end; /* timer slots */
} dp_device_span;

typedef struct dp_device_spans {
    dp_device_span *pending;       /* this step's passes; NULL: not timing the device */
    size_t count, capacity;
    int *module_mark;              /* the slot marked when each module's current pass began */
    int anchor;                    /* the slot marked when the idle device and the host agreed */
    double anchor_time;            /* MPI_Wtime then */
    int in_step;                   /* evaluation's passes outside steps are not timed */
} dp_device_spans;

/* timeline.c: --trace, as the engine's observer (it watches; it drives nothing). */
typedef struct dp_timeline {
    dp_trace trace;                /* spans of this rank's work */
    const dp_model *model;
    const dp_backend *be;
    double *module_began;          /* when each module's current pass began */
    dp_device_spans device_spans;  /* on a GPU: the passes as the device's timer saw them */
} dp_timeline;

/* Host copies of the engine's state buffers (dp_engine_state: parameters, statistics, optimizer
 * state), for checkpoints, hashes and --save (state.c, shards.c, checks.c). */
typedef struct dp_host_state {
    float *state[DP_STATE_OPTIMIZER + DP_OPTIMIZER_MAX_STATE];
    float *gathered;               /* --zero 3: one module's gathered parameters, for the replica check */
    uint64_t *rank_hashes;         /* one per rank, for --check-replicas */
} dp_host_state;

/* --keep-best and --early-stop (best.c): the K best evaluations, best first, and the best so far. */
#define DP_BEST_MAX 20
typedef struct dp_best {
    int tracking;                  /* --keep-best or --early-stop */
    int metric;                    /* dp_best_metric */
    int have;                      /* an evaluation has been judged */
    double value;                  /* the best so far, of evaluation step `step` */
    long step;
    long since;                    /* evaluations since it */
    int count;                     /* the kept best checkpoints' steps and values */
    long steps[DP_BEST_MAX];
    double values[DP_BEST_MAX];
} dp_best;

/* A training run: the engine that steps, and the pieces around it, each owning its state. */
typedef struct trainer {
    const dp_options *o;
    dp_comm *comm;
    const dp_dataset *train, *test;
    dp_plan plan;
    dp_lr_plan lr;                 /* the learning rate as a function of the global step */
    dp_engine *engine;             /* backend, model, optimizer, strategy, the step */
    dp_batches batches;
    dp_timeline timeline;
    FILE *metrics;                 /* rank 0: --metrics, written as training goes */
    FILE *csv;                     /* rank 0: --csv */
    dp_tensorboard tensorboard;    /* rank 0: --tensorboard */
    double *interval_sums;         /* 3 + W doubles: an interval's sums, every rank's busy time at its index */
    dp_best best;                  /* --keep-best, --early-stop */
    dp_sampler sampler;
    dp_watchdog watchdog;
    dp_preempt preempt;            /* --preempt-signal: the handlers and the ranks' agreement */
    dp_host_state host;
    double *eval_totals;           /* backend memory: evaluation's loss and correct count */
    int max_rows;
    long start_step;               /* optimizer steps already taken when this run began */
    int resumed;                   /* it continues a checkpoint (--resume) */
    double sent[DP_COLLECTIVE_KINDS]; /* bytes sent by this rank's collectives inside training steps */
    char run_id[DP_CHECKPOINT_RUN_ID_LEN + 1]; /* rank 0: whose checkpoints these are (outputs.c) */
    int made_checkpoint_dir;       /* rank 0: this run created --checkpoint-dir (outputs.c) */
} trainer;

/* The engine's device request from the options. */
dp_engine_device dp_trainer_device(const dp_options *o);

/* timeline.c: --trace spans, the engine's observer; the trace file. */
int dp_trainer_open_timeline(trainer *t);
/* Around a training step: on a GPU under --trace, the device's timer is anchored to the host's
 * clock at the start and the step's passes become device-lane spans at the end. */
void dp_trainer_timeline_step_begin(trainer *t);
void dp_trainer_timeline_step_end(trainer *t);
int dp_trainer_write_timeline(trainer *t);  /* collective */
void dp_trainer_close_timeline(trainer *t);

/* metrics.c: --metrics lines, --csv rows and --tensorboard events on rank 0; closing with result
 * writes the summary line. */
int dp_trainer_open_outputs(trainer *t);   /* --tensorboard's file (at start-up: its directory is an output) */
int dp_trainer_metrics_line(trainer *t, long step, long epoch, const dp_interval *iv);
/* An evaluation's test loss and accuracy (every evaluation: epochs' ends and --eval-every). */
int dp_trainer_metrics_eval(trainer *t, long step, long epoch, const dp_train_result *eval);
/* local-sgd: one line per averaging, {"average":{"step":S,"divergence":D}}. */
int dp_trainer_metrics_average(trainer *t, long step, double divergence);
int dp_trainer_close_metrics(trainer *t, const dp_train_result *result);

/* batches.c: room for max_rows rows of a micro-batch (targets: `outputs` per row), and for
 * slots - 1 further micro-batches of micro_rows rows (dp_engine_row_slots); a test set must
 * have the training set's width. On a device backend, `placement` decides whether the sets
 * are held in its memory (resident.c). */
int dp_batches_open(dp_batches *b, const dp_backend *be, const dp_dataset *train, const dp_dataset *test,
                    const dp_sampler *sampler, int max_rows, int outputs, dp_data_placement placement, int slots,
                    size_t micro_rows);
void dp_batches_close(dp_batches *b);
/* Backend memory of one set of batch buffers for `rows` rows (inputs, labels, targets). */
size_t dp_batches_rows_bytes(size_t rows, size_t width, size_t outputs);
/* Backend memory of slots 1.. (a CUDA graph's further micro-batches) for `slots` slots. */
size_t dp_batches_slot_bytes(int slots, size_t micro_rows, size_t width, size_t outputs);
/* The engine's row source: the training samples at epoch positions [begin, end). */
dp_row_source dp_batches_source(dp_batches *b);
/* The batch buffers of `slot` holding n rows of data: features, and its labels or its targets
 * (here, for batches.c's reads and resident.c's gathers alike). */
static inline dp_rows dp_batches_rows(const dp_batches *b, int slot, const dp_dataset *data, size_t n)
{
    const dp_row_buffers *to = &b->slots[slot];
    return (dp_rows){.x = to->x, .labels = data->labels ? to->labels : NULL,
                     .targets = data->labels ? NULL : to->targets, .count = (int)n};
}
/* The test set's rows [begin, end) (at most max_rows) read into the batch buffers. */
int dp_batches_read_test(dp_batches *b, size_t begin, size_t end, dp_rows *rows);

/* resident.c: --data-on-device. */
/* auto holds the sets when they take at most 1/DP_RESIDENT_AUTO_SHARE of the GPU's memory:
 * Fashion-MNIST's 210 MiB is 0.3% of an 80 GiB H100, and the widest example (8192 features x
 * 4096 rows) keeps its model, activations and cuBLAS's workspace in a few GiB, so a quarter
 * leaves any model that trained before its room; only sets of a quarter of the GPU are declined. */
#define DP_RESIDENT_AUTO_SHARE 4
/* Backend memory the sets take held whole: features, labels or targets, the epoch's order. */
size_t dp_resident_bytes(const dp_dataset *train, const dp_dataset *test);
/* "X MiB (training set A MiB, test set B MiB, the epoch's order C MiB)": what holding them takes. */
void dp_resident_describe(const dp_dataset *train, const dp_dataset *test, char *text, size_t size);
/* Decides by `placement` whether b's sets are held on its device (b->placement says so and
 * why) and, if so, uploads them through the batch staging. */
int dp_resident_open(dp_batches *b, dp_data_placement placement);
void dp_resident_close(dp_batches *b);
/* The training samples at epoch positions [begin, end), gathered on the device. */
int dp_resident_train_rows(dp_batches *b, size_t begin, size_t end, int slot, dp_rows *rows);
/* The test set's rows [begin, end) where they are held (no copy). */
void dp_resident_test_rows(const dp_batches *b, size_t begin, size_t end, dp_rows *rows);

/* state.c */
int dp_trainer_allocate_host_copies(trainer *t); /* once the model, strategy and optimizer exist */
int dp_trainer_start_state(trainer *t);          /* --resume, else init or --init, + broadcast */
/* Collective: rank 0 writes DIR/step-N.safetensors, whole (ZeRO's shards gathered to it) or,
 * with --checkpoint-shards, as the index of every rank's shard file. */
int dp_trainer_checkpoint(trainer *t);

/* shards.c: --checkpoint-shards. Every rank writes its part of the flat parameters and
 * optimizer state (dp_partition of the buffer over this run's ranks) with the run's metadata
 * (keys/values, count pairs); fails on every rank when any rank failed, so no index is
 * written for an incomplete checkpoint. */
int dp_trainer_write_shard(trainer *t, const char *const *keys, const char *const *values, int count);
/* Every rank reads what it holds (its shard, or the whole) of the parameters and the optimizer
 * state from the `shards` files beside index_path, whatever this run's stage and world size. */
int dp_trainer_read_shards(trainer *t, const char *index_path, long step, int shards);
int dp_trainer_export(trainer *t, float **params_out);
/* Rank 0 reads --init (parameters and buffers) into the host copies; NULL path: draws them. */
int dp_trainer_load_model(const dp_options *o, const dp_model *m, float *params, float *buffers,
                          int64_t *counters);
/* The same for the parameters' flat range `part` alone, into params[0, part size): read from
 * the file's byte ranges of those elements, or drawn bit for bit as the whole draw would. */
int dp_trainer_load_model_part(const dp_options *o, const dp_model *m, dp_range part, float *params, float *buffers,
                               int64_t *counters);

/* parts.c: ZeRO-3's ranged reads of whole files and streamed --save. */
/* The values read into parts checked as dp_train_check_loaded checks tensors. */
int dp_trainer_check_parts(const char *option, const char *path, const dp_tensor_part *parts, int count);
/* parts read from path, then checked. */
int dp_trainer_read_parts(const char *option, const char *path, dp_tensor_part *parts, int count);
/* This rank's shard of every parameter tensor (over host.params) and, with_state, of every
 * optimizer state (over host.optimizer); returns the count (at most params + state tensors). */
int dp_trainer_own_parts(const trainer *t, int with_state, dp_tensor_part *parts);
/* This rank's parts of path into the host copies, checked; then into the parameter shard and
 * (with_state) the optimizer state. */
int dp_trainer_read_own_parts(trainer *t, const char *option, const char *path, int with_state);
void dp_trainer_upload_own_parts(trainer *t, int with_state);
/* ZeRO-3's --save: the piece size (a block of the budget, or the largest unit), rank 0's
 * writer's fill (parameter tensor `tensor`'s elements gathered into buf; dp_tensor_fill_fn),
 * and the other ranks' side of it, the same pieces in the same order. */
size_t dp_trainer_save_piece(const trainer *t);
int dp_trainer_gather_parameter_piece(void *arg, int tensor, size_t first, size_t count, void *buf);
int dp_trainer_send_parameter_pieces(trainer *t);

/* inputs.c: what the run reads, checked before it is used. */
/* The test set's targets are of the training set's kind (labels or float targets): the loss
 * is chosen from the training data. */
int dp_train_check_test_targets(const dp_options *o, const dp_dataset *train, const dp_dataset *test);
/* Every value of the count tensors read from path (--init, --resume) is finite, and state that
 * has a range (variances, second moments, counters) lies in it. */
int dp_train_check_loaded(const char *option, const char *path, const dp_tensor_ref *refs, int count);

/* outputs.c: what the run writes, checked on the rank that writes it before training. */
int dp_trainer_check_outputs(const trainer *t);   /* --save, --checkpoint-dir can be written */
/* After a failed run: the --checkpoint-dir it created, removed if it is still empty. */
void dp_trainer_drop_empty_checkpoint_dir(const trainer *t);
/* No output names another output's file, an input's, or a checkpoint's in --checkpoint-dir. */
int dp_check_outputs_apart(const dp_options *o);
/* Collective: the run identity (rank 0's, given to all); no other run's checkpoints in the dir. */
int dp_trainer_claim_checkpoint_dir(trainer *t);

/* usage.c: what the run used, for the summary: bytes sent per rank (the mean over ranks) and
 * the largest peak of backend memory (collective). */
int dp_trainer_usage(trainer *t, dp_train_result *result);

/* best.c: --keep-best and --early-stop. */
void dp_best_start(dp_best *b, const dp_options *o);
const char *dp_best_metric_name(int metric);
/* Judges an evaluation at step; returns 1 when it enters the kept best (a checkpoint of the step
 * must be written), which only happens where can_keep. */
int dp_best_judge(dp_best *b, const dp_options *o, long step, double test_loss, double test_accuracy, int can_keep);
/* Whether --early-stop's patience has run out. */
int dp_best_stops(const dp_best *b, const dp_options *o);
/* The state as checkpoint metadata values ("" where untracked), each of size bytes. */
void dp_best_record(const dp_best *b, char *metric, char *value, char *step, char *since, char *kept, size_t size);
/* The state read back from those values (a different metric: afresh, with note saying so). */
int dp_best_restore(dp_best *b, const char *path, const char *metric, const char *value, const char *step,
                    const char *since, const char *kept, char *note, size_t size);

/* checks.c: replicas that drifted apart stop the job. */
int dp_trainer_check_replicas(trainer *t);
int dp_trainer_inject_corruption(trainer *t);

#endif
