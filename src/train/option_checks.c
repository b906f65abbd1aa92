/* The combinations of options a run cannot honour, refused naming them, once every option is
 * parsed: --model with --layers, --predict with training options, --exact or local SGD with
 * what they exclude, GPU options on the CPU; and the per-optimizer defaults PyTorch's
 * constructors apply. */
#include "src/train/option_checks.h"

#include "dp/comm.h"
#include "dp/error.h"
#include "src/train/limits.h"

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

/* --exact is a strategy of its own, keeping the whole model on every rank as DDP does. */
static int check_exact(const dp_options *o, const char *const *seen)
{
    if (seen[OPT_EXACT_SHARD] && !o->exact)
        return dp_fail(DP_EINVAL, "--exact-shard %ld applies to --exact", o->exact_shard);
    if (o->exact && o->zero)
        return dp_fail(DP_EINVAL, "--exact and --zero %d both choose how gradients are combined: use one", o->zero);
    if (o->exact && o->average_every)
        return dp_fail(DP_EINVAL, "--exact and --average-every %ld both choose how the ranks' work is combined: use one",
                       o->average_every);
    /* --exact all-reduces integer digits that must add exactly; bf16 keeps 8 of their 24 bits. */
    if (o->exact && o->grad_dtype != DP_DTYPE_F32)
        return dp_fail(DP_EINVAL, "--exact and --grad-dtype %s: --exact all-reduces its sums as integer digits in "
                       "floats that every algorithm must add exactly, and bf16 would round them (8 significant "
                       "bits of 24); drop one", dp_grad_dtype_name(o->grad_dtype));
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

/* Local SGD needs whole replicas, no communication between averagings, and checkpoints and
 * replica checks where the replicas are one model: right after an averaging. */
static int check_local_sgd(const dp_options *o)
{
    long k = o->average_every;
    if (!k)
        return 0;
    if (o->grad_dtype != DP_DTYPE_F32)
        return dp_fail(DP_EINVAL, "--average-every %ld and --grad-dtype %s: local SGD reduces no gradients (it averages "
                       "the replicas in float32)", k, dp_grad_dtype_name(o->grad_dtype));
    if (o->zero)
        return dp_fail(DP_EINVAL, "--average-every %ld and --zero %d: local SGD keeps a whole replica (parameters and "
                       "optimizer state) on every rank, which ZeRO shards; use one of them", k, o->zero);
    if (has_sync_batchnorm(&o->model))
        return dp_fail(DP_EINVAL, "--average-every %ld and SyncBatchNorm (--sync-bn or batchnorm(sync=1)): it sums "
                       "statistics over the ranks in every forward and backward, the communication local SGD "
                       "avoids, across replicas that differ; use plain batchnorm, whose running statistics are "
                       "averaged with the parameters", k);
    const char *option = o->checkpoint_every % k ? "--checkpoint-every" : o->check_replicas % k ? "--check-replicas" : NULL;
    if (option)
        return dp_fail(DP_EINVAL, "%s %ld and --average-every %ld: the ranks hold one model only right after an "
                       "averaging, every %ld steps; use a multiple of %ld", option,
                       o->checkpoint_every % k ? o->checkpoint_every : o->check_replicas, k, k, k);
    return 0;
}

int dp_options_check_combination(dp_options *o, int world, const char *const *seen)
{
    int status = check_model(o, seen);
    if (!status)
        status = check_memory_options(o, seen);
    if (!status)
        status = check_predict(o, seen);
    if (!status)
        status = check_local_sgd(o);
    if (!status)
        status = check_exact(o, seen);
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
