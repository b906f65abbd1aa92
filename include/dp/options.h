/* dp_worker's command line: every option, its default, and validation with messages that
 * name the option and the problem. */
#ifndef DP_OPTIONS_H
#define DP_OPTIONS_H

#include "dp/backend.h"
#include "dp/comm.h"
#include "dp/mlp.h"
#include "dp/optim.h"

#include <stdint.h>
#include <stdio.h>

#define DP_PATH_MAX 1024

typedef enum dp_loss_choice { DP_LOSS_AUTO, DP_LOSS_CHOICE_XENT, DP_LOSS_CHOICE_MSE } dp_loss_choice;

typedef struct dp_options {
    char data[DP_PATH_MAX];
    char test_data[DP_PATH_MAX];  /* "" : the test split of --data where it has one */
    char layers_spec[DP_PATH_MAX];
    int widths[DP_MLP_MAX_LAYERS + 1];
    int nwidths;
    dp_loss_choice loss;
    long batch;                   /* global batch of one micro-batch, over all ranks */
    long accum;                   /* micro-batches per optimizer step */
    float lr, momentum, weight_decay;
    dp_lr_schedule lr_schedule;
    long epochs;
    long steps;                   /* > 0: train exactly this many optimizer steps */
    int drop_last;
    uint64_t seed;
    char allreduce[64];
    long segment_bytes;           /* ring-pipelined segment size */
    char auto_table[DP_PATH_MAX]; /* --allreduce auto's table (dp_bench --tune); "": built-in */
    long log_every;
    int quiet;
    int threads;                  /* BLAS threads per rank */
    dp_device device;             /* where each rank computes (auto: a GPU when every rank has one) */
    int share_gpu;                /* more ranks on a node than GPUs may take turns on a GPU */
    int tf32;                     /* GEMMs on TF32 tensor cores instead of exact FP32 */
    dp_cuda_aware cuda_aware;     /* whether MPI is handed GPU memory */
    char save_path[DP_PATH_MAX];
    char init_path[DP_PATH_MAX];
    char checkpoint_dir[DP_PATH_MAX];
    long checkpoint_every;        /* steps between checkpoints; 0: only at the end */
    long keep;                    /* checkpoints kept in checkpoint_dir */
    char resume[DP_PATH_MAX];     /* checkpoint file or directory to continue from */
    double timeout;               /* watchdog seconds per collective; 0 disables */
    long check_replicas;          /* steps between replica hash comparisons; 0 disables */
    int skip_nonfinite;           /* --on-nan skip: drop the step instead of aborting */
    int corrupt_rank;             /* --debug-corrupt RANK:STEP, for testing; -1: off */
    long corrupt_step;
} dp_options;

enum { DP_OPTIONS_RUN = 0, DP_OPTIONS_EXIT = 1 };

void dp_options_defaults(dp_options *o);

/* Parses argv into o (defaults first). Returns DP_OPTIONS_RUN, DP_OPTIONS_EXIT after
 * printing --help or --version to out (when not NULL), or a negative error naming the bad option. world is
 * the number of ranks, for checks such as the batch being at least one sample per rank. */
int dp_options_parse(dp_options *o, int argc, char **argv, int world, FILE *out);

void dp_options_print_help(FILE *out);

#endif
