/* The combinations of options a run cannot honour, refused naming them, once every option is
 * parsed: --model with --layers, --predict with training options, --exact or local SGD with
 * what they exclude, GPU options on the CPU; and the per-optimizer defaults PyTorch's
 * constructors apply. */
#include "src/train/option_checks.h"

#include "dp/comm.h"
#include "dp/error.h"
#include "src/train/limits.h"
#include "src/train/option_values.h"

#include <stdio.h>
#include <string.h>

/* The option that only applies to another optimizer, if one was given. */
static const char *foreign_optimizer_option(const dp_options *o, const char *const *seen)
{
    if (o->optimizer == DP_OPTIMIZER_SGD)
        return seen[OPT_BETAS] ? "--betas" : seen[OPT_EPS] ? "--eps" : seen[OPT_DECAY_ALL] ? "--decay-all" : NULL;
    return seen[OPT_MOMENTUM] ? "--momentum" : NULL;
}

/* --lr and --weight-decay default per optimizer, as PyTorch's constructors do. */
static void apply_optimizer_defaults(dp_options *o, const char *const *seen)
{
    if (o->optimizer != DP_OPTIMIZER_ADAMW)
        return;
    if (!seen[OPT_LR])
        o->lr = 1e-3f;
    if (!seen[OPT_WEIGHT_DECAY])
        o->weight_decay = 1e-2f;
    o->momentum = 0.0f;
}

static int check_model(dp_options *o, const char *const *seen)
{
    if (seen[OPT_MODEL] && seen[OPT_LAYERS])
        return dp_fail(DP_EINVAL, "--model and --layers both describe the model: use one");
    int status = seen[OPT_MODEL] ? dp_model_spec_parse(o->model_text, &o->model)
                                 : dp_model_spec_from_layers(o->layers_spec, &o->model);
    if (!status && o->sync_bn)
        dp_model_spec_sync_batchnorm(&o->model);
    return status;
}

/* Options of a training run (or of --memory-plan) that --predict would silently ignore. */
static const int training_only[] = {
    OPT_SAVE, OPT_TRACE, OPT_METRICS, OPT_CHECKPOINT_DIR, OPT_CHECKPOINT_EVERY, OPT_CHECKPOINT_SHARDS, OPT_RESUME,
    OPT_ZERO, OPT_ZERO_LIVE_MB, OPT_MAX_MEMORY_MB, OPT_MEMORY_PLAN, OPT_AVERAGE_EVERY, OPT_PREEMPT_SIGNAL, OPT_EXACT, OPT_EXACT_SHARD,
    OPT_STRATEGY,
};

static int check_predict(const dp_options *o, const char *const *seen)
{
    for (size_t i = 0; o->predict_path[0] && i < sizeof training_only / sizeof *training_only; i++)
        if (seen[training_only[i]])
            return dp_fail(DP_EINVAL, "--%s does not apply to --predict, which runs the --init model on its inputs "
                           "and writes --output only", seen[training_only[i]]);
    if (!o->predict_path[0])
        return o->output_path[0] || o->predict_classes
                   ? dp_fail(DP_EINVAL, "%s applies to --predict", o->output_path[0] ? "--output" : "--predict-classes")
                   : 0;
    if (!o->init_path[0])
        return dp_fail(DP_EINVAL, "--predict %s needs --init MODEL.safetensors: the trained model to run", o->predict_path);
    if (!o->output_path[0])
        return dp_fail(DP_EINVAL, "--predict %s needs --output FILE.npy: where the outputs go", o->predict_path);
    return 0;
}

/* The options that name a strategy, in the order messages name them, as the text a
 * --strategy would give (the value where the option takes one). */
static const struct {
    int id;
    const char *strategy, *key; /* the strategy it names (NULL: the option's text), the key its value sets */
} namers[] = {{OPT_STRATEGY, NULL, NULL}, {OPT_EXACT, "exact", NULL}, {OPT_AVERAGE_EVERY, "local-sgd", "every"},
              {OPT_ZERO, NULL, NULL}};
/* Options that set one key of the strategy named. */
static const struct {
    int id;
    const char *key;
} key_options[] = {{OPT_ZERO_LIVE_MB, "live-mb"}, {OPT_EXACT_SHARD, "rows"}};

static const char *const zero_stages[] = {"0", "1", "2", "3"};

/* The --strategy text namer n gives (in text), and how it is named (in label). */
static int namer_text(int n, const char *const *seen, const char *const *args, char *text, char *label, size_t size)
{
    int id = namers[n].id;
    snprintf(label, size, "--%s%s%s", seen[id], args[id] ? " " : "", args[id] ? args[id] : "");
    if (id == OPT_ZERO) {
        int stage, status = dp_option_choice(seen[id], args[id], zero_stages, DP_ZERO_STAGES, &stage);
        snprintf(text, size, "%s", status ? "" : dp_strategy_name_for_zero(stage));
        return status;
    }
    snprintf(text, size, "%s", namers[n].strategy ? namers[n].strategy : args[id]);
    return 0;
}

int dp_options_choose_strategy(dp_options *o, const char *const *seen, const char *const *args)
{
    const char *first = NULL;
    char text[256], label[96], first_label[96];
    for (size_t n = 0; n < sizeof namers / sizeof *namers; n++) {
        if (!seen[namers[n].id])
            continue;
        int status = namer_text((int)n, seen, args, text, label, sizeof text);
        if (status)
            return status;
        if (first)
            return dp_fail(DP_EINVAL, "%s and %s both choose how the ranks' work is combined (the strategy): use one",
                           first_label, label);
        /* --strategy's keys are named in its own text; an alias's value in the option's. */
        if ((status = dp_strategy_choose(&o->strategy, text, namers[n].id == OPT_STRATEGY ? "--strategy" : label)))
            return status;
        char key_label[96];
        snprintf(key_label, sizeof key_label, "--%s", seen[namers[n].id]);
        if (namers[n].key && (status = dp_strategy_set_key(&o->strategy, namers[n].key, args[namers[n].id], key_label)))
            return status;
        snprintf(o->strategy.label, sizeof o->strategy.label, "%s", label);
        snprintf(first_label, sizeof first_label, "%s", label);
        first = first_label;
    }
    /* --memory-plan's table shows every stage: a budget given alone is its stages 2 and 3's. */
    if (!first && seen[OPT_MEMORY_PLAN] && seen[OPT_ZERO_LIVE_MB]) {
        int status = dp_strategy_choose(&o->strategy, "zero-3", "--memory-plan");
        if (status)
            return status;
    }
    for (size_t k = 0; k < sizeof key_options / sizeof *key_options; k++) {
        int id = key_options[k].id;
        snprintf(label, sizeof label, "--%s", seen[id]);
        int status = seen[id] ? dp_strategy_set_key(&o->strategy, key_options[k].key, args[id], label) : 0;
        if (status)
            return status;
    }
    return 0;
}

/* --params, --world and --precision fp16 or mixed describe --memory-plan's table only;
 * --tf32 is --precision tf32; --checkpoint-shards needs checkpoints to shard. */
static int check_memory_options(const dp_options *o, const char *const *seen)
{
    int plan_precision = o->precision == DP_PRECISION_FP16 || o->precision == DP_PRECISION_MIXED;
    const char *plan_only = seen[OPT_PARAMS] ? "--params" : seen[OPT_WORLD] ? "--world"
                          : o->precision == DP_PRECISION_FP16 ? "--precision fp16"
                          : o->precision == DP_PRECISION_MIXED ? "--precision mixed" : NULL;
    if (plan_only && !o->memory_plan)
        return dp_fail(DP_EINVAL, "%s applies to --memory-plan%s", plan_only,
                       seen[OPT_WORLD] ? " (a training run's ranks are mpirun's -np)"
                       : plan_precision ? " (training takes fp32, tf32 or bf16)" : "");
    if (seen[OPT_TF32] && seen[OPT_PRECISION] && o->precision != DP_PRECISION_TF32)
        return dp_fail(DP_EINVAL, "--tf32 is --precision tf32: it contradicts the --precision given");
    if (o->checkpoint_shards && !o->checkpoint_dir[0])
        return dp_fail(DP_EINVAL, "--checkpoint-shards needs --checkpoint-dir");
    return 0;
}

static int has_sync_batchnorm(const dp_model_spec *spec)
{
    for (int i = 0; i < spec->count; i++)
        if (spec->modules[i].options.sync)
            return 1;
    return 0;
}

/* What the strategy refuses of the run's other options (its own table's constraints). */
static int check_strategy(const dp_options *o)
{
    dp_strategy_run run = {.grad_dtype = o->grad_dtype, .sync_batchnorms = has_sync_batchnorm(&o->model),
                           .checkpoint_every = o->checkpoint_every, .check_replicas = o->check_replicas};
    return dp_strategy_check(&o->strategy, &run);
}

int dp_options_check_combination(dp_options *o, int world, const char *const *seen)
{
    int status = check_model(o, seen);
    if (!status)
        status = check_memory_options(o, seen);
    if (!status)
        status = check_predict(o, seen);
    if (!status)
        status = check_strategy(o);
    if (status)
        return status;
    const char *foreign = foreign_optimizer_option(o, seen);
    if (foreign)
        return dp_fail(DP_EINVAL, "%s does not apply to --optimizer %s", foreign, dp_optimizer_kind_name(o->optimizer));
    apply_optimizer_defaults(o, seen);
    if (o->batch < world)
        return dp_fail(DP_EINVAL, "--batch %ld is smaller than the world size %d: every rank needs at least one sample per batch",
                       o->batch, world);
    if (o->init_path[0] && o->resume[0] && !dp_options_resume_auto(o))
        return dp_fail(DP_EINVAL, "--init and --resume both give the starting point: use one (or --resume auto, "
                       "which starts from --init when --checkpoint-dir holds no checkpoint)");
    if (o->checkpoint_every && !o->checkpoint_dir[0])
        return dp_fail(DP_EINVAL, "--checkpoint-every %ld needs --checkpoint-dir", o->checkpoint_every);
    if (seen[OPT_PREEMPT_SIGNAL] && o->preempt_signals && !o->checkpoint_dir[0])
        return dp_fail(DP_EINVAL, "--preempt-signal needs --checkpoint-dir: a preempted run stops after writing "
                       "its checkpoint there");
    if (dp_options_resume_auto(o) && !o->checkpoint_dir[0])
        return dp_fail(DP_EINVAL, "--resume auto needs --checkpoint-dir: it continues from the newest checkpoint there");
    const char *gpu_only = o->precision == DP_PRECISION_TF32 ? (seen[OPT_TF32] ? "--tf32" : "--precision tf32")
                         : o->share_gpu ? "--share-gpu"
                         : o->cuda_aware == DP_CUDA_AWARE_ON ? "--cuda-aware on"
                         : o->unfused ? "--fuse off"
                         : o->cuda_graph == DP_GRAPH_ON ? "--cuda-graph on"
                         : o->data_on_device == DP_DATA_ON ? "--data-on-device on" : NULL;
    if (o->device == DP_DEVICE_CPU && gpu_only)
        return dp_fail(DP_EINVAL, "%s applies to GPUs, but --device is cpu", gpu_only);
    return dp_options_check_limits(o, world);
}

int dp_options_resume_auto(const dp_options *o)
{
    return strcmp(o->resume, "auto") == 0;
}
