/* The trainer's state, shared by the step loop (train.c), the training-state files
 * (state.c: initial parameters, resume, checkpoints, --save) and the safety checks (checks.c). */
#ifndef DP_TRAINER_H
#define DP_TRAINER_H

#include "dp/backend.h"
#include "dp/comm.h"
#include "dp/data.h"
#include "dp/mlp.h"
#include "dp/optim.h"
#include "dp/options.h"
#include "dp/sampler.h"
#include "dp/watchdog.h"
#include "src/train/report.h"

/* A dataset where the backend computes: on a host backend the dataset's own arrays, on a
 * device a copy made once (owned), so steps gather their rows without host copies. */
typedef struct dp_resident {
    float *features, *targets;
    int32_t *labels;
    int owned;
} dp_resident;

typedef struct trainer {
    const dp_options *o;
    dp_comm *comm;
    const dp_backend *be;
    const dp_dataset *train, *test;
    dp_plan plan;
    dp_mlp model;
    dp_sgd opt;
    dp_sampler sampler;
    dp_watchdog watchdog;
    int max_rows;
    long start_step;               /* optimizer steps already taken when this run began */
    long steps_done;               /* optimizer steps taken, for the learning-rate schedule */
    long skipped_steps;            /* updates dropped by --on-nan skip */
    dp_resident train_rows, test_rows; /* the datasets in backend memory */
    const size_t *order;           /* the epoch's sample order in backend memory */
    size_t *device_order;          /* its device copy; NULL on a host backend */
    float *dev_x, *dev_targets;    /* one micro-batch's rows in backend memory */
    int32_t *dev_labels;
    int stage_gradients;           /* GPU gradients go through host_grads to the all-reduce */
    float *host_grads;             /* page-locked staging for that; NULL when unused */
    float *host_params, *host_velocity; /* host copies for checkpoints, hashes and --save */
    uint64_t *rank_hashes;         /* one per rank, for --check-replicas */
} trainer;

/* device.c: the backend each rank computes on, and the gradients' way to the all-reduce. */
int dp_trainer_open_device(trainer *t);
void dp_trainer_close_device(trainer *t);
int dp_trainer_sync_gradients(trainer *t); /* all-reduce(SUM) of model.grads over the ranks */
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

/* state.c */
int dp_trainer_start_state(trainer *t);          /* --resume, else init + broadcast */
int dp_trainer_checkpoint(trainer *t);           /* rank 0 writes DIR/step-N.safetensors */
int dp_trainer_export(trainer *t, float *host_params_out);

/* checks.c */
/* 1 when the all-reduced gradient is finite; else reports the layer and, with --on-nan
 * abort, fails (the decision is the same on every rank: the gradient is). */
int dp_trainer_check_gradient(trainer *t, double local_loss, int *finite);
int dp_trainer_check_replicas(trainer *t);
void dp_trainer_inject_corruption(trainer *t);

#endif
