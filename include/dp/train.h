/* The data-parallel training loop: broadcast, shard, local forward/backward, all-reduce,
 * identical update on every rank. */
#ifndef DP_TRAIN_H
#define DP_TRAIN_H

#include "dp/comm.h"
#include "dp/data.h"
#include "dp/options.h"

typedef struct dp_train_result {
    long steps;                /* optimizer steps this run took (after any --resume) */
    long skipped_steps;        /* updates dropped by --on-nan skip */
    long samples;              /* global samples trained on */
    double train_loss;         /* mean loss over the last epoch (or partial epoch) */
    int has_test;
    double test_loss, test_accuracy; /* after the last step */
    double wall_seconds, compute_seconds, comm_seconds; /* rank 0's, over the step loop */
} dp_train_result;

/* Rank 0 draws the initial parameters (--seed) or loads them (--init), then MPI_Bcast
 * gives every rank the same bytes in host_params (nparams floats). (src/train/state.c) */
int dp_train_init_params(const dp_options *o, dp_comm *comm, float *host_params);

/* Checks that the data fit the model (input width, label range, target width, loss kind). */
int dp_train_check_data(const dp_options *o, const dp_dataset *data, const char *role);

/* Trains per o on train (evaluating on test after each epoch when test is not NULL), from
 * --resume when given, writing checkpoints and --save on rank 0, under the --timeout
 * watchdog; copies the final parameters into host_params_out when not NULL. */
int dp_train(const dp_options *o, const dp_dataset *train, const dp_dataset *test,
             dp_comm *comm, float *host_params_out, dp_train_result *result);

/* The loss o selects for this data (auto: cross-entropy for labels, MSE for targets). */
dp_loss dp_train_loss_for(const dp_options *o, const dp_dataset *data);

#endif
