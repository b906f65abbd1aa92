/* The run's settings as a checkpoint records them (run_fields.c): one field per setting, this
 * run's values, and what --resume makes of a checkpoint's. */
#ifndef DP_TRAIN_RUN_FIELDS_H
#define DP_TRAIN_RUN_FIELDS_H

#include "src/train/trainer.h"

#include "dp/checkpoint.h"

enum state_field {
    FIELD_MODEL, FIELD_STEP_BATCH, FIELD_DROP_LAST, FIELD_SEED, FIELD_TRAIN_SAMPLES, FIELD_OPTIMIZER,
    FIELD_OPTIMIZER_STATE, FIELD_WORLD_SIZE, FIELD_ALLREDUCE, FIELD_HIER_INNER, FIELD_BATCH, FIELD_ACCUM, FIELD_LR,
    FIELD_LR_SCHEDULE, FIELD_TOTAL_STEPS, FIELD_MOMENTUM, FIELD_WEIGHT_DECAY, FIELD_BETAS, FIELD_EPS,
    FIELD_DECAY_ALL, FIELD_MODULE_OPTIONS, FIELD_STRATEGY, FIELD_ZERO, FIELD_AVERAGE_EVERY, FIELD_EXACT_SHARD, FIELD_GRAD_DTYPE, FIELD_COMPUTE, FIELD_STEP, FIELD_EPOCH, FIELD_RUN_ID, FIELD_FORMAT,
    FIELD_VERSION, FIELD_SAMPLER, FIELD_LR_MIN, FIELD_WARMUP_STEPS, FIELD_WARMUP_START, FIELD_CLIP, FIELD_BEST_METRIC,
    FIELD_BEST_VALUE, FIELD_BEST_STEP, FIELD_EVALS_SINCE_BEST, FIELD_BEST_STEPS, FIELD_COUNT
};

typedef struct run_fields {
    char value[FIELD_COUNT][DP_META_VALUE_MAX];
} run_fields;

/* Field i's key in a checkpoint's metadata. */
const char *dp_run_field_key(int i);

/* This run's value of every field. */
void dp_run_fields_describe(const trainer *t, run_fields *f);

/* This run's fields as metadata pairs (those a checkpoint still writes), into keys and values;
 * returns how many. */
int dp_run_fields_metadata(const trainer *t, run_fields *f, const char **keys, const char **values);

/* A checkpoint's saved fields against this run's: the identity fields must match (else an
 * error naming path), the others are listed in `changed` where they differ. */
int dp_run_fields_compare(const char *path, const run_fields *mine, const dp_meta *saved, char *changed, size_t size);

#endif
