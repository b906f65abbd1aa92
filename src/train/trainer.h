/* The trainer's state, shared by the step loop (train.c), the training-state files
 * (state.c: initial parameters, resume, checkpoints, --save) and the safety checks (checks.c). */
#ifndef DP_TRAINER_H
#define DP_TRAINER_H

#include "dp/backend.h"
#include "dp/checkpoint.h"
#include "dp/comm.h"
#include "dp/data.h"
#include "dp/dist.h"
#include "dp/nn.h"
#include "dp/optim.h"
#include "dp/options.h"
#include "dp/sampler.h"
#include "dp/watchdog.h"
#include "src/train/report.h"
#include "src/train/trace.h"

/* A dataset where the backend computes: on a host backend the dataset's own arrays, on a
 * device a copy made once (owned), so steps gather their rows without host copies. */
typedef struct dp_resident {
    float *features, *targets;
    int32_t *labels;
    int owned;
} dp_resident;

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

typedef struct trainer {
    const dp_options *o;
    dp_comm *comm;
    const dp_backend *be;
    const dp_dataset *train, *test;
    dp_plan plan;
    dp_model model;
    dp_optimizer opt;
    dp_dist dist;                  /* how gradients are reduced: buckets, overlap */
    int *segment_of;               /* module -> its slice of the flat buffers in dist's layout (-1: none) */
    size_t *segment_offset, *segment_count;
    int dist_status;               /* the first error of a collective started from backward's hook */
    dp_trace trace;                /* --trace: spans of this rank's work */
    double *module_began;          /* when each module's current pass began */
    dp_device_spans device_spans;  /* --trace on a GPU: the passes as the device's timer saw them */
    FILE *metrics;                 /* rank 0: --metrics, written as training goes */
    dp_sampler sampler;
    dp_watchdog watchdog;
    int max_rows;
    long start_step;               /* optimizer steps already taken when this run began */
    long steps_done;               /* optimizer steps taken, for the learning-rate schedule */
    long skipped_steps;            /* updates dropped by --on-nan skip */
    double sent[DP_COLLECTIVE_KINDS]; /* bytes sent by this rank's collectives inside training steps */
    dp_resident train_rows, test_rows; /* the datasets in backend memory */
    const size_t *order;           /* the epoch's sample order in backend memory */
    size_t *device_order;          /* its device copy; NULL on a host backend */
    float *dev_x, *dev_targets;    /* one micro-batch's rows in backend memory */
    int32_t *dev_labels;
    int stage_gradients;           /* GPU gradients go through host_grads to the all-reduce */
    float *host_grads;             /* page-locked staging for that; NULL when unused */
    double *train_totals;          /* backend memory: training loss and correct count since last read */
    double *eval_totals;           /* backend memory: the same for evaluation */
    double *nonfinite;             /* backend memory: the optimizer pass's non-finite gradient count */
    int broadcast_buffers;         /* plain BatchNorm on W > 1 ranks: rank 0's running statistics win */
    /* host copies for checkpoints, hashes and --save */
    float *host_params, *host_buffers, *host_state[DP_OPTIMIZER_MAX_STATE];
    float *host_gathered;          /* --zero 3: one module's gathered parameters, for the replica check */
    uint64_t *rank_hashes;         /* one per rank, for --check-replicas */
    char run_id[DP_CHECKPOINT_RUN_ID_LEN + 1]; /* rank 0: whose checkpoints these are (outputs.c) */
    int made_checkpoint_dir;       /* rank 0: this run created --checkpoint-dir (outputs.c) */
} trainer;

/* device.c: the backend each rank computes on, and the gradients' way to the all-reduce. */
int dp_trainer_open_device(trainer *t);
int dp_trainer_allocate_staging(trainer *t); /* once the model's size is known */
/* How the gradients reach the collectives: in place, or through the host staging buffer. */
dp_dist_buffers dp_trainer_gradient_buffers(trainer *t);

/* reduce.c: the strategy that reduces gradients, fed by backward's hook. */
int dp_trainer_open_dist(trainer *t);
void dp_trainer_close_dist(trainer *t);

/* timeline.c: the hook between modules (progress; --trace spans), the trace file. */
int dp_trainer_open_timeline(trainer *t);
/* Around a training step: on a GPU under --trace, the device's timer is anchored to the host's
 * clock at the start and the step's passes become device-lane spans at the end. */
void dp_trainer_timeline_step_begin(trainer *t);
void dp_trainer_timeline_step_end(trainer *t);
int dp_trainer_write_timeline(trainer *t);  /* collective */
void dp_trainer_close_timeline(trainer *t);

/* metrics.c: --metrics lines on rank 0; closing with result writes the summary line. */
int dp_trainer_metrics_line(trainer *t, long step, long epoch, const dp_interval *iv);
int dp_trainer_close_metrics(trainer *t, const dp_train_result *result);
void dp_trainer_close_device(trainer *t);
const char *dp_trainer_gradient_path(const trainer *t);

/* batches.c: the datasets placed in backend memory, batches gathered there. */
int dp_trainer_place_data(trainer *t);
void dp_trainer_free_data(trainer *t);
void dp_trainer_set_epoch(trainer *t, long epoch);
/* Gathers training samples at epoch positions [begin, end) into dev_x and dev_labels or
 * dev_targets; returns the row count. */
int dp_trainer_gather(trainer *t, size_t begin, size_t end);
/* The test set's rows from `begin` on, where they lie in backend memory (NULL: absent). */
void dp_trainer_test_rows(const trainer *t, size_t begin, const float **x, const int32_t **labels,
                          const float **targets);

/* Sums count doubles over the ranks in place: SyncBatchNorm's statistics (dp_nn_context). */
int dp_trainer_sum_doubles(void *comm, double *values, int count);

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
/* Every rank reads what it holds (its shard, or the whole) from the `shards` files beside
 * index_path, whatever this run's stage and world size, into params (the parameters' memory:
 * the strategy's shard in stage 3, else the model's whole buffer) and the optimizer state. */
int dp_trainer_read_shards(trainer *t, const char *index_path, long step, int shards, float *params);
int dp_trainer_export(trainer *t, float **params_out);
/* Rank 0 reads --init (parameters and buffers) into the host copies; NULL path: draws them. */
int dp_trainer_load_model(const dp_options *o, const dp_model *m, float *params, float *buffers,
                          int64_t *counters);
/* Rank 0's model state (parameters, buffers, counters) to every rank, then into the model. */
int dp_trainer_share_model(dp_comm *comm, dp_model *m, float *params, float *buffers);

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

/* checks.c */
/* Finishes the gradient (1 / global sample count) and updates: one fused pass with --on-nan
 * abort, a counting pass first with --on-nan skip. A non-finite gradient fails naming the
 * step and the first tensor (abort), or drops the update (skip); the decision is the same on
 * every rank because the all-reduced gradient is. */
int dp_trainer_update(trainer *t, float grad_scale, float lr);
int dp_trainer_check_replicas(trainer *t);
int dp_trainer_inject_corruption(trainer *t);

#endif
