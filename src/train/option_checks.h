/* Inside train/: the options' ids, shared by the table that parses them (options.c) and the
 * checks of their combinations (option_checks.c). */
#ifndef DP_TRAIN_OPTION_CHECKS_H
#define DP_TRAIN_OPTION_CHECKS_H

#include "dp/options.h"

enum option_id {
    OPT_DATA = 256, OPT_TEST_DATA, OPT_LAYERS, OPT_LOSS, OPT_BATCH, OPT_ACCUM, OPT_LR, OPT_LR_SCHEDULE,
    OPT_MOMENTUM, OPT_WEIGHT_DECAY, OPT_EPOCHS, OPT_STEPS, OPT_DROP_LAST, OPT_SEED,
    OPT_ALLREDUCE, OPT_HIER_INNER, OPT_SEGMENT_BYTES, OPT_AUTO_TABLE, OPT_LOG_EVERY, OPT_QUIET, OPT_THREADS, OPT_SAVE, OPT_INIT,
    OPT_CHECKPOINT_DIR, OPT_CHECKPOINT_EVERY, OPT_KEEP, OPT_RESUME, OPT_TIMEOUT,
    OPT_CHECK_REPLICAS, OPT_ON_NAN, OPT_DEBUG_CORRUPT, OPT_DEVICE, OPT_SHARE_GPU, OPT_TF32,
    OPT_CUDA_AWARE, OPT_CUDA_GRAPH, OPT_MODEL, OPT_SYNC_BN, OPT_OPTIMIZER, OPT_BETAS, OPT_EPS, OPT_DECAY_ALL,
    OPT_PREDICT, OPT_OUTPUT, OPT_PREDICT_CLASSES, OPT_BUCKET_MB, OPT_NO_OVERLAP, OPT_PROGRESS_THREAD, OPT_TRACE, OPT_METRICS,
    OPT_ZERO, OPT_ZERO_LIVE_MB, OPT_MAX_MEMORY_MB, OPT_CHECKPOINT_SHARDS, OPT_PREEMPT_SIGNAL, OPT_MEMORY_PLAN, OPT_PARAMS, OPT_WORLD, OPT_PRECISION,
    OPT_AVERAGE_EVERY, OPT_EXACT, OPT_EXACT_SHARD, OPT_GRAD_DTYPE, OPT_STRATEGY,
    OPT_FUSE, OPT_DATA_ON_DEVICE,
    OPT_HELP, OPT_VERSION
};

/* After parsing: the model spec built, optimizer defaults applied, and every combination the
 * run cannot honour refused naming the options (seen[id]: the option's long name where it was
 * given on the command line, else NULL). */
int dp_options_check_combination(dp_options *o, int world, const char *const *seen);

/* The strategy from --strategy or the options that name one, then the keys' own options
 * (args[id]: the text given to option id); two options naming strategies are refused. */
int dp_options_choose_strategy(dp_options *o, const char *const *seen, const char *const *args);

#endif
