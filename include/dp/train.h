/* The data-parallel training loop: broadcast, shard, local forward/backward, all-reduce,
 * identical update on every rank. */
#ifndef DP_TRAIN_H
#define DP_TRAIN_H

#include "dp/comm.h"
#include "dp/data.h"
#include "dp/engine.h"
#include "dp/memory.h"
#include "dp/options.h"

/* dp_worker's exit status after a preempted run has written its checkpoint: sysexits.h's
 * EX_TEMPFAIL, "try again later"; slurm/train.sbatch requeues the job on it. */
#define DP_EXIT_PREEMPTED 75

/* Where training time went (seconds, rank 0's): the phases of a step in order, which add up
 * to its wall time, then the collectives' own durations, mostly hidden behind backward. */

typedef struct dp_train_result {
    long steps;                /* optimizer steps this run took (after any --resume) */
    long skipped_steps;        /* updates dropped by --on-nan skip */
    long samples;              /* global samples trained on */
    double train_loss;         /* mean loss over the last epoch (or partial epoch) */
    int has_test;
    double test_loss, test_accuracy; /* after the last step */
    double wall_seconds;       /* rank 0's, over the step loop */
    dp_time_split split;       /* rank 0's */
    size_t nparams;            /* trainable parameters */
    float *params;             /* with keep_params: the final parameters (malloc'd; free them) */
    char strategy[96];         /* the strategy and its keys (dp_strategy_choice_text) */
    int world;                 /* ranks */
    double sent[DP_COLLECTIVE_KINDS]; /* bytes sent in the training steps per rank (mean over ranks), per kind */
    double memory_peak;        /* backend bytes at the peak, the largest over ranks */
    int memory_peak_rank;      /* the rank that held it */
    dp_memory_usage memory;    /* rank 0's allocation counter at the end (peaks per kind) */
    int preempted_signal;      /* a --preempt-signal stopped the run early (its number; 0: it ran to the end) */
    long preempted_step;       /* the step every rank stopped after, checkpointed */
    long stopped_early;        /* --early-stop ended the run after this step (0: it did not) */
    long clipped_steps;        /* --clip-grad-norm: steps whose gradient was scaled down */
} dp_train_result;

/* --data and its test set (--test-data, or --data's own test split; *has_test 0 when neither
 * exists), opened as the loss asks: float targets for --loss mse. */
int dp_train_open_datasets(const dp_options *o, dp_dataset *train, dp_dataset *test, int *has_test);

/* A preset --model's class count (dp_model_spec_set_classes): the rows of --init's output layer
 * where --init is given (fine-tuning, --predict: train may be NULL), else the training and test
 * labels' largest plus one, or the targets' columns. */
int dp_train_set_classes(dp_options *o, const dp_dataset *train, const dp_dataset *test);

/* The model's input width: what --layers starts with, or a --model spec's training data width. */
int dp_train_model_inputs(const dp_options *o, const dp_dataset *train);

/* Checks that the data fit the model (input width `inputs`, label range, loss kind) and the
 * output width the model makes of the training data's `sample`. */
int dp_train_check_data(const dp_options *o, const dp_dataset *data, const char *role, int inputs,
                        const dp_dims *sample);
/* A model that takes images (conv2d, pooling) needs the test samples in the training samples'
 * shape, not only their element count. */
int dp_train_check_image_shapes(const dp_options *o, const dp_dataset *train, const dp_dataset *test);

/* Handles o's --preempt-signal set from now on (with --checkpoint-dir), so that a signal
 * before dp_train, while the data load, stops the run at its first steps instead of the process. */
int dp_train_catch_preemption(const dp_options *o);

/* Trains per o on train (evaluating on test after each epoch when test is not NULL), from
 * --resume when given, writing checkpoints and --save on rank 0, under the --timeout
 * watchdog; with keep_params, result->params gets the final parameters. */
int dp_train(const dp_options *o, const dp_dataset *train, const dp_dataset *test,
             dp_comm *comm, dp_train_result *result, int keep_params);

/* --predict: data-parallel inference of the --init model on o->predict_path, written by rank 0
 * to o->output_path (src/train/predict.c). */
int dp_predict(const dp_options *o, dp_comm *comm);

/* --memory-plan: each ZeRO stage's memory and communication per rank for o's model (or
 * --params) over --world ranks (default: world), printed to stdout; src/train/memory_plan.c. */
int dp_memory_plan_print(const dp_options *o, int world);

/* The loss o selects for this data (auto: cross-entropy for labels, MSE for targets). */
dp_loss dp_train_loss_for(const dp_options *o, const dp_dataset *data);

#endif
