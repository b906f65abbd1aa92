/* Progress output on rank 0: banner, step lines, epoch lines and the final summary. */
#ifndef DP_REPORT_H
#define DP_REPORT_H

#include "dp/comm.h"
#include "dp/data.h"
#include "dp/engine.h"
#include "dp/strategy.h"
#include "dp/nn.h"
#include "dp/optim.h"
#include "dp/options.h"
#include "dp/train.h"

typedef struct dp_plan {
    size_t step_batch;       /* samples per optimizer step (batch * accum) */
    long steps_per_epoch;
    long total_steps;
    size_t nparams;
    dp_loss loss;
} dp_plan;

typedef struct dp_interval {
    double loss_sum, samples, correct; /* summed over ranks */
    double seconds;
    dp_time_split split;
    long steps;
    float lr;          /* the last step's learning rate */
    int has_norm;      /* --clip-grad-norm: the steps' gradient norms were computed */
    double grad_norm;  /* the last step's, before clipping */
    long clipped;      /* steps whose gradient was scaled down */
    double busy;       /* this rank's compute time (forward, backward, optimizer: no waits for others) */
    int ranks;         /* after the reduction: the ranks compared (W > 1), their ms per step of busy */
    double rank_ms_min, rank_ms_median, rank_ms_max;
    int slowest_rank;
    long averagings;   /* local-sgd: the replicas' averagings in the interval */
    double divergence; /* and the largest divergence they found */
} dp_interval;

/* backend: the backend's own description; gradient_path: how gradients reach the collectives. */
void dp_report_banner(const dp_options *o, const dp_comm *comm, const dp_plan *plan, dp_engine *engine,
                      const dp_dataset *train, const dp_dataset *test);
/* The shortest decimal that reads back as value: options quoted as given, exact in records. */
const char *dp_float_text(float value, char text[24]);

void dp_report_step(const dp_plan *plan, long step, long epoch, const dp_interval *iv);
/* An evaluation between epochs' ends (--eval-every). */
void dp_report_eval(const dp_plan *plan, long step, long epoch, const dp_train_result *eval);
void dp_report_epoch(const dp_plan *plan, long epoch, long epochs, const dp_interval *train,
                     const dp_train_result *eval);
void dp_report_summary(const dp_plan *plan, const dp_train_result *r);
/* The run stopped early for `signal`, with a checkpoint of the step it stopped after. */
void dp_report_preempted(const dp_options *o, const dp_plan *plan, const dp_train_result *r, const char *signal);

#endif
