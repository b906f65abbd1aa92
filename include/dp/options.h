/* dp_worker's command lines (training, dp_worker predict, dp_worker plan): the values every
 * option sets, parsed and validated with messages that name the option and the problem. Each
 * option is declared once, as a row of src/train/option_rows.c. */
#ifndef DP_OPTIONS_H
#define DP_OPTIONS_H

#include "dp/backend.h"
#include "dp/comm.h"
#include "dp/nn.h"
#include "dp/optim.h"
#include "dp/strategy.h"

#include <stdint.h>
#include <stdio.h>

#define DP_PATH_MAX 1024

typedef enum dp_loss_choice { DP_LOSS_AUTO, DP_LOSS_CHOICE_XENT, DP_LOSS_CHOICE_MSE } dp_loss_choice;

/* --precision's names, by dp_precision. */
extern const char *const dp_precision_names[DP_PRECISIONS];

/* --data-on-device: the training and test sets held whole in a device backend's memory, each
 * step's rows gathered there (on), read on the host and uploaded per micro-batch (off), or on
 * where they fit auto's share of the GPU's memory (auto). */
typedef enum dp_data_placement { DP_DATA_OFF, DP_DATA_ON, DP_DATA_AUTO } dp_data_placement;

/* --best-metric: what makes a checkpoint better than another. */
typedef enum dp_best_metric { DP_BEST_TEST_LOSS, DP_BEST_TEST_ACC } dp_best_metric;

typedef struct dp_options {
    char data[DP_PATH_MAX];
    char test_data[DP_PATH_MAX];  /* "" : the test split of --data where it has one */
    char layers_spec[DP_PATH_MAX]; /* --layers W0,W1,...: version 1's MLP */
    char model_text[DP_PATH_MAX];  /* --model: "" unless given (it then replaces --layers) */
    dp_model_spec model;          /* what --model or --layers describe */
    int sync_bn;                  /* every BatchNorm is a SyncBatchNorm */
    dp_loss_choice loss;
    long batch;                   /* global batch of one micro-batch, over all ranks */
    long accum;                   /* micro-batches per optimizer step */
    dp_optimizer_kind optimizer;
    float lr, momentum, weight_decay; /* lr and weight decay default per optimizer */
    float beta1, beta2, eps;      /* AdamW */
    int decay_all;                /* AdamW: decay biases and normalisation weights too */
    dp_lr_schedule lr_schedule;
    long lr_step_every;           /* --lr-schedule step:EVERY,GAMMA */
    float lr_step_gamma;
    float lr_min;                 /* --lr-min: cosine's and linear's last rate */
    long warmup_steps;            /* --warmup-steps: linear warm-up over so many steps; 0: none */
    float warmup_start_factor;    /* its first rate, as a factor of --lr */
    float clip_grad_norm;         /* --clip-grad-norm: the gradient's largest global L2 norm; 0: no clipping */
    long eval_every;              /* --eval-every: evaluate every so many steps too; 0: at epochs' ends only */
    long keep_best;               /* --keep-best: the best checkpoints kept besides --keep's; 0: none */
    int best_metric;              /* --best-metric: dp_best_metric */
    long early_stop;              /* --early-stop: evaluations without improvement before stopping; 0: never */
    char tensorboard_dir[DP_PATH_MAX]; /* --tensorboard: TensorBoard's event file goes there */
    char csv_path[DP_PATH_MAX];   /* --csv: one row per progress line */
    int straggle_rank;            /* --debug-straggle RANK:MS, for testing; -1: off */
    long straggle_ms;
    long epochs;
    long steps;                   /* > 0: train exactly this many optimizer steps */
    int drop_last;
    uint64_t seed;
    char allreduce[64];
    char hier_inner[64];          /* --allreduce hier: the algorithm among the nodes' leaders */
    dp_dtype grad_dtype;          /* --grad-dtype: what the gradients' reductions send and add */
    long segment_bytes;           /* ring-pipelined segment size */
    double bucket_mb;             /* gradient buckets' cap, MiB; 0: auto (dp_strategy_default_config) */
    int no_overlap;               /* one collective of the whole gradient after backward */
    long progress_us;             /* > 0: a thread progresses collectives every so many microseconds;
                                   * 0: none; -1 (auto): 1000 when the job spans hosts */
    dp_strategy_choice strategy;  /* --strategy NAME[:KEY=VALUE,...], or the options that name one
                                   * (--zero, --exact, --average-every; --zero-live-mb, --exact-shard) */
    double max_memory_mb;         /* per-rank limit on backend memory (the allocation counter); 0: none */
    int memory_plan;              /* --memory-plan: print each stage's memory per rank and exit */
    double plan_params;           /* --params: the parameter count --memory-plan assumes (0: the model's) */
    long plan_world;              /* --world: the ranks --memory-plan assumes (0: this job's) */
    dp_precision precision;       /* --precision: the GEMMs' inputs; --memory-plan's bytes per parameter */
    char trace_path[DP_PATH_MAX]; /* --trace: the timeline (Chrome trace JSON) */
    char metrics_path[DP_PATH_MAX]; /* --metrics: one JSON object per logged step */
    char auto_table[DP_PATH_MAX]; /* --allreduce auto's table (dp_bench --tune); "": built-in */
    long log_every;
    int quiet;
    int threads;                  /* BLAS threads per rank; 0: the cores available to the rank */
    dp_device device;             /* where each rank computes (auto: a GPU when every rank has one) */
    int share_gpu;                /* more ranks on a node than GPUs may take turns on a GPU */
    dp_cuda_aware cuda_aware;     /* whether MPI is handed GPU memory */
    int unfused;                  /* --fuse off: no GEMM epilogues, the passes as kernels of their own */
    dp_graph_mode cuda_graph;     /* --cuda-graph: full steps replayed from a captured graph */
    dp_data_placement data_on_device; /* --data-on-device: the datasets held in GPU memory (src/train/resident.c) */
    char save_path[DP_PATH_MAX];
    char init_path[DP_PATH_MAX];
    char checkpoint_dir[DP_PATH_MAX];
    long checkpoint_every;        /* steps between checkpoints; 0: only at the end */
    long keep;                    /* checkpoints kept in checkpoint_dir */
    int checkpoint_shards;        /* one file per rank (its shard) and an index, nothing gathered */
    char resume[DP_PATH_MAX];     /* checkpoint file or directory to continue from; "auto": --checkpoint-dir's newest complete one, if any */
    unsigned preempt_signals;     /* with --checkpoint-dir: signals that end the run with a checkpoint (src/train/preempt.h) */
    double timeout;               /* watchdog seconds per collective; 0 disables */
    long check_replicas;          /* steps between replica hash comparisons; 0 disables */
    int skip_nonfinite;           /* --on-nan skip: drop the step instead of aborting */
    int corrupt_rank;             /* --debug-corrupt RANK:STEP, for testing; -1: off */
    long corrupt_step;
    char predict_path[DP_PATH_MAX]; /* --predict: inference on these inputs instead of training */
    char output_path[DP_PATH_MAX];  /* where --predict writes its outputs */
    int predict_classes;            /* --predict-classes: argmax indices instead of the outputs */
} dp_options;

/* --resume auto: continue from --checkpoint-dir's newest complete checkpoint, if any. */
int dp_options_resume_auto(const dp_options *o);

/* The learning rate over the run the options describe, of total_steps steps. */
dp_lr_plan dp_options_lr_plan(const dp_options *o, long total_steps);

/* The optimizer the options describe. */
dp_optimizer_config dp_options_optimizer(const dp_options *o);

enum { DP_OPTIONS_RUN = 0, DP_OPTIONS_EXIT = 1 };

void dp_options_defaults(dp_options *o);

/* Parses argv into o (defaults first): training's options, or after a first argument "predict"
 * or "plan" that program's (as --predict FILE and --memory-plan set them). Returns
 * DP_OPTIONS_RUN, DP_OPTIONS_EXIT after printing --help or --version to out (when not NULL),
 * or a negative error naming the bad option. world is the number of ranks, for checks such as
 * the batch being at least one sample per rank. */
int dp_options_parse(dp_options *o, int argc, char **argv, int world, FILE *out);

/* Training's --help. */
void dp_options_print_help(FILE *out);

#endif
