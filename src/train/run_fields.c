/* The run's settings as a checkpoint records them: a table of fields, each with the role it
 * plays when resuming (an option's from its row), this run's values, and the comparison
 * --resume makes (identity fields must match, the others continue but not bit-exactly). */
#include "config.h"

#include "src/train/run_fields.h"

#include "src/train/option_table.h"

#include "dp/error.h"

#include <stdio.h>
#include <string.h>

/* What a recorded setting means to --resume. */
typedef enum field_role {
    FIELD_OPTION,   /* an option's value: its row says (dp_option_row.resume) */
    FIELD_IDENTITY, /* fixes the tensors or the sample order: must match */
    FIELD_EXACT,    /* changes the arithmetic: a different value continues, no longer bit-exact */
    FIELD_RECORD,   /* the position (step, epoch) or a note */
    FIELD_VERSION_3 /* read from version 3's checkpoints only, for what replaced it */
} field_role;

static const struct {
    const char *key;
    field_role role;
    const char *absent; /* the value a checkpoint written before the field existed meant */
} fields[FIELD_COUNT] = {
    [FIELD_MODEL] = {"model", FIELD_IDENTITY},
    [FIELD_STEP_BATCH] = {"step_batch", FIELD_IDENTITY},
    [FIELD_DROP_LAST] = {"drop_last", FIELD_OPTION},
    [FIELD_SEED] = {"seed", FIELD_OPTION},
    [FIELD_TRAIN_SAMPLES] = {"train_samples", FIELD_IDENTITY},
    [FIELD_OPTIMIZER] = {"optimizer", FIELD_OPTION},
    [FIELD_OPTIMIZER_STATE] = {"optimizer_state", FIELD_IDENTITY},
    [FIELD_WORLD_SIZE] = {"world_size", FIELD_EXACT},
    [FIELD_ALLREDUCE] = {"allreduce", FIELD_OPTION},
    /* hier's all-reduce among the nodes' leaders; empty where it does not apply (another
     * algorithm, or --exact), as in a checkpoint written before the field existed. */
    [FIELD_HIER_INNER] = {"hier_inner", FIELD_OPTION},
    [FIELD_BATCH] = {"batch", FIELD_OPTION},
    [FIELD_ACCUM] = {"accum", FIELD_OPTION},
    [FIELD_LR] = {"lr", FIELD_OPTION},
    [FIELD_LR_SCHEDULE] = {"lr_schedule", FIELD_OPTION},
    [FIELD_TOTAL_STEPS] = {"total_steps", FIELD_EXACT},
    [FIELD_MOMENTUM] = {"momentum", FIELD_OPTION},
    [FIELD_WEIGHT_DECAY] = {"weight_decay", FIELD_OPTION},
    [FIELD_BETAS] = {"betas", FIELD_OPTION},
    [FIELD_EPS] = {"eps", FIELD_OPTION},
    [FIELD_DECAY_ALL] = {"decay_all", FIELD_OPTION},
    [FIELD_MODULE_OPTIONS] = {"module_options", FIELD_EXACT},
    /* The strategy and the keys that change its bits (exact:rows=32, local-sgd:every=4): ZeRO's
     * stages sum in other orders than DDP, --exact's shards decide its bits, local SGD's
     * averagings fall on multiples of K by the global step; so a change continues, not
     * bit-exactly. Version 3 recorded it as the three fields below. */
    [FIELD_STRATEGY] = {"strategy", FIELD_OPTION},
    [FIELD_ZERO] = {"zero", FIELD_VERSION_3, "0"},
    [FIELD_AVERAGE_EVERY] = {"average_every", FIELD_VERSION_3, "0"},
    [FIELD_EXACT_SHARD] = {"exact_shard", FIELD_VERSION_3, "0"},
    /* bf16 gradients round every reduced sum: a resume with the other dtype is not bit-exact. */
    [FIELD_GRAD_DTYPE] = {"grad_dtype", FIELD_OPTION, "fp32"},
    /* OpenBLAS's sgemm rounds differently with another thread count for widths that are not a
     * multiple of its kernel's (10 classes, for one), and cuBLAS differs from OpenBLAS. */
    [FIELD_COMPUTE] = {"compute", FIELD_EXACT, "cpu with 1 BLAS thread"},
    [FIELD_STEP] = {DP_CHECKPOINT_STEP_KEY, FIELD_RECORD},
    [FIELD_RUN_ID] = {DP_CHECKPOINT_RUN_ID_KEY, FIELD_RECORD}, /* which run's files these are */
    [FIELD_EPOCH] = {"epoch", FIELD_RECORD},
    [FIELD_FORMAT] = {"format", FIELD_RECORD},
    [FIELD_VERSION] = {"dptrain_version", FIELD_RECORD},
    [FIELD_SAMPLER] = {"sampler", FIELD_RECORD},
    /* The schedule's further settings and clipping; a checkpoint written before them had none. */
    [FIELD_LR_MIN] = {"lr_min", FIELD_OPTION, "0"},
    [FIELD_WARMUP_STEPS] = {"warmup_steps", FIELD_OPTION, "0"},
    [FIELD_WARMUP_START] = {"warmup_start_factor", FIELD_OPTION},
    [FIELD_CLIP] = {"clip_grad_norm", FIELD_OPTION},
    /* --keep-best's and --early-stop's judgement so far (best.c): the run goes on with it. */
    [FIELD_BEST_METRIC] = {"best_metric", FIELD_RECORD},
    [FIELD_BEST_VALUE] = {"best_value", FIELD_RECORD},
    [FIELD_BEST_STEP] = {"best_step", FIELD_RECORD},
    [FIELD_EVALS_SINCE_BEST] = {"evals_since_best", FIELD_RECORD},
    [FIELD_BEST_STEPS] = {DP_CHECKPOINT_BEST_KEY, FIELD_RECORD},
};

/* Field i's role: its option's row's where it records an option (its key is the option's name
 * with '_' for '-'), else the table's. */
static field_role role_of(int i)
{
    if (fields[i].role != FIELD_OPTION)
        return fields[i].role;
    char name[64];
    snprintf(name, sizeof name, "%s", fields[i].key);
    for (char *c = name; *c; c++)
        *c = *c == '_' ? '-' : *c;
    const dp_option_row *r = dp_option_find(name);
    return r && r->resume == DP_RESUME_IDENTITY ? FIELD_IDENTITY : FIELD_EXACT;
}

static void optimizer_state_names(const dp_optimizer *opt, char *text, size_t size)
{
    size_t used = (size_t)snprintf(text, size, "%s", dp_optimizer_state_count(opt) ? "" : "none");
    for (int i = 0; i < dp_optimizer_state_count(opt) && used < size; i++)
        used += (size_t)snprintf(text + used, size - used, "%s%s", i ? "," : "", dp_optimizer_state_name(opt, i));
}

const char *dp_run_field_key(int i)
{
    return fields[i].key;
}

void dp_run_fields_describe(const trainer *t, run_fields *f)
{
    const dp_options *o = t->o;
    char(*v)[DP_META_VALUE_MAX] = f->value;
    size_t size = sizeof v[0];
    const dp_model *m = dp_engine_model(t->engine);
    const dp_backend *be = dp_engine_backend(t->engine);
    long steps = dp_engine_steps_done(t->engine);
    dp_model_spec_canonical(&o->model, m->inputs, 1, v[FIELD_MODEL], size);
    snprintf(v[FIELD_STEP_BATCH], size, "%zu", t->plan.step_batch);
    snprintf(v[FIELD_DROP_LAST], size, "%d", o->drop_last);
    snprintf(v[FIELD_SEED], size, "%llu", (unsigned long long)o->seed);
    snprintf(v[FIELD_TRAIN_SAMPLES], size, "%zu", t->train->count);
    snprintf(v[FIELD_OPTIMIZER], size, "%s", dp_optimizer_kind_name(o->optimizer));
    optimizer_state_names(dp_engine_optimizer(t->engine), v[FIELD_OPTIMIZER_STATE], size);
    v[FIELD_HIER_INNER][0] = '\0';
    const char *any_world = dp_strategy_any_world(&o->strategy);
    if (any_world) {
        snprintf(v[FIELD_WORLD_SIZE], size, "%s", any_world);
        snprintf(v[FIELD_ALLREDUCE], size, "%s", any_world);
    } else {
        snprintf(v[FIELD_WORLD_SIZE], size, "%d", t->comm->size);
        snprintf(v[FIELD_ALLREDUCE], size, "%s", dp_comm_algorithm_name(t->comm));
        if (strcmp(v[FIELD_ALLREDUCE], "hier") == 0)
            snprintf(v[FIELD_HIER_INNER], size, "%s", dp_comm_hier_inner_name(t->comm));
    }
    snprintf(v[FIELD_BATCH], size, "%ld", o->batch);
    snprintf(v[FIELD_ACCUM], size, "%ld", o->accum);
    dp_float_text(o->lr, v[FIELD_LR]);
    static const char *const schedules[] = {[DP_LR_CONSTANT] = "constant", [DP_LR_COSINE] = "cosine",
                                            [DP_LR_LINEAR] = "linear", [DP_LR_STEP] = "step"};
    char gamma[24];
    snprintf(v[FIELD_LR_SCHEDULE], size, "%s", schedules[o->lr_schedule]);
    if (o->lr_schedule == DP_LR_STEP)
        snprintf(v[FIELD_LR_SCHEDULE], size, "step:%ld,%s", o->lr_step_every, dp_float_text(o->lr_step_gamma, gamma));
    /* The schedules whose rates depend on the run's length. */
    if (o->lr_schedule == DP_LR_COSINE || o->lr_schedule == DP_LR_LINEAR)
        snprintf(v[FIELD_TOTAL_STEPS], size, "%ld", t->plan.total_steps);
    else
        snprintf(v[FIELD_TOTAL_STEPS], size, "any (%s rate)", o->lr_schedule == DP_LR_STEP ? "step" : "constant");
    dp_float_text(o->lr_min, v[FIELD_LR_MIN]);
    snprintf(v[FIELD_WARMUP_STEPS], size, "%ld", o->warmup_steps);
    v[FIELD_WARMUP_START][0] = v[FIELD_CLIP][0] = '\0';
    if (o->warmup_steps)
        dp_float_text(o->warmup_start_factor, v[FIELD_WARMUP_START]);
    if (o->clip_grad_norm > 0.0f)
        dp_float_text(o->clip_grad_norm, v[FIELD_CLIP]);
    dp_best_record(&t->best, v[FIELD_BEST_METRIC], v[FIELD_BEST_VALUE], v[FIELD_BEST_STEP], v[FIELD_EVALS_SINCE_BEST],
                   v[FIELD_BEST_STEPS], size);
    dp_float_text(o->momentum, v[FIELD_MOMENTUM]);
    dp_float_text(o->weight_decay, v[FIELD_WEIGHT_DECAY]);
    char beta1[24], beta2[24];
    snprintf(v[FIELD_BETAS], size, "%s,%s", dp_float_text(o->beta1, beta1), dp_float_text(o->beta2, beta2));
    dp_float_text(o->eps, v[FIELD_EPS]);
    snprintf(v[FIELD_DECAY_ALL], size, "%d", o->decay_all);
    dp_model_spec_canonical(&o->model, m->inputs, 0, v[FIELD_MODULE_OPTIONS], size);
    dp_strategy_choice_text(&o->strategy, 0, v[FIELD_STRATEGY], size);
    snprintf(v[FIELD_GRAD_DTYPE], size, "%s", dp_grad_dtype_name(o->grad_dtype));
    dp_backend_arithmetic(be, v[FIELD_COMPUTE], size);
    if (o->precision != DP_PRECISION_FP32 && !be->host_memory) /* rounded GEMM inputs change the bits */
        snprintf(v[FIELD_COMPUTE] + strlen(v[FIELD_COMPUTE]), size - strlen(v[FIELD_COMPUTE]), ", %s GEMM inputs",
                 dp_precision_names[o->precision]);
    if (o->unfused && !be->host_memory) /* other kernels add in another order */
        snprintf(v[FIELD_COMPUTE] + strlen(v[FIELD_COMPUTE]), size - strlen(v[FIELD_COMPUTE]), ", --fuse off");
    snprintf(v[FIELD_STEP], size, "%ld", steps);
    snprintf(v[FIELD_EPOCH], size, "%ld", steps / t->plan.steps_per_epoch);
    snprintf(v[FIELD_RUN_ID], size, "%s", t->run_id);
    snprintf(v[FIELD_FORMAT], size, "pt");
    snprintf(v[FIELD_VERSION], size, "%s", PACKAGE_VERSION);
    snprintf(v[FIELD_SAMPLER], size, "permutation from (seed, epoch); dropout masks from (seed, step, sample)");
}

int dp_run_fields_metadata(const trainer *t, run_fields *f, const char **keys, const char **values)
{
    dp_run_fields_describe(t, f);
    int count = 0;
    for (int i = 0; i < FIELD_COUNT; i++)
        if (role_of(i) != FIELD_VERSION_3) {
            keys[count] = fields[i].key;
            values[count++] = f->value[i];
        }
    return count;
}

/* A recorded value as a message shows it: empty (not recorded, or not applying) as "(none)". */
static const char *shown(const char *value)
{
    return value[0] ? value : "(none)";
}

/* A saved field's value, or what its absence meant. */
static const char *field_or_absent(const dp_meta *saved, int i)
{
    return saved[i].value[0] || !fields[i].absent ? saved[i].value : fields[i].absent;
}

/* The identity fields must match; the others are listed in `changed` when they differ. */
int dp_run_fields_compare(const char *path, const run_fields *mine, const dp_meta *saved, char *changed, size_t size)
{
    size_t used = 0;
    changed[0] = '\0';
    char version_3[DP_META_VALUE_MAX];
    for (int i = 0; i < FIELD_COUNT; i++) {
        const char *theirs = field_or_absent(saved, i);
        const char *ours = mine->value[i];
        if (i == FIELD_STRATEGY && !saved[i].value[0]) { /* a version-3 checkpoint's three fields */
            int status = dp_strategy_from_version_3(field_or_absent(saved, FIELD_ZERO),
                                                    field_or_absent(saved, FIELD_AVERAGE_EVERY),
                                                    field_or_absent(saved, FIELD_EXACT_SHARD), version_3,
                                                    sizeof version_3);
            if (status)
                return dp_fail_context(status, "--resume %s", path);
            theirs = version_3;
        }
        field_role role = role_of(i);
        if (role == FIELD_RECORD || role == FIELD_VERSION_3 || strcmp(theirs, ours) == 0)
            continue;
        if (role == FIELD_IDENTITY)
            return dp_fail(DP_EINVAL, "--resume %s: the checkpoint has %s=%s but this run has %s=%s; "
                           "it cannot continue a different model, optimizer or sample order",
                           path, fields[i].key, shown(theirs), fields[i].key, shown(ours));
        if (used < size)
            used += (size_t)snprintf(changed + used, size - used, "%s%s %s -> %s", used ? ", " : "",
                                     fields[i].key, shown(theirs), shown(ours));
    }
    return 0;
}
