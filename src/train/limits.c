#include "src/train/limits.h"

#include "dp/checkpoint.h"
#include "dp/error.h"
#include "dp/memory.h"

#include <limits.h>
#include <stdint.h>

/* a x b, or 0 with *overflow set when it exceeds limit. */
static size_t product(size_t a, size_t b, size_t limit, int *overflow)
{
    if (b != 0 && a > limit / b) {
        *overflow = 1;
        return 0;
    }
    return a * b;
}

static long slice_rows(const dp_options *o, int world)
{
    return o->batch / world + (o->batch % world != 0);
}

/* "--layers" or "--model", as the user gave the model. */
static const char *model_option(const dp_options *o)
{
    return o->model.from_layers ? "--layers" : "--model";
}

static int widest(const dp_options *o)
{
    int w = 0, overflow = 0;
    dp_dims unknown = dp_dims_features(0);
    dp_model_spec_size(&o->model, &unknown, &w, &overflow);
    return w;
}

int dp_options_check_limits(const dp_options *o, int world)
{
    long rows = slice_rows(o, world);
    if (rows > INT_MAX)
        return dp_fail(DP_EINVAL, "--batch %ld over %d rank%s puts %ld samples on a rank, more "
                       "than the %d rows one forward pass takes", o->batch, world,
                       world == 1 ? "" : "s", rows, INT_MAX);
    int overflow = 0;
    product((size_t)o->batch, (size_t)o->accum, LONG_MAX, &overflow);
    if (overflow)
        return dp_fail(DP_EINVAL, "--batch %ld x --accum %ld: more than %ld samples per step",
                       o->batch, o->accum, LONG_MAX);
    int wide = 0;
    dp_dims unknown = dp_dims_features(0);
    size_t params = dp_model_spec_size(&o->model, &unknown, &wide, &overflow);
    product(params, sizeof(float), SIZE_MAX, &overflow);
    if (overflow)
        return dp_fail(DP_EINVAL, "%s %s: the parameters' size overflows the address "
                       "space", model_option(o), o->model.text);
    product(product((size_t)rows, (size_t)wide, SIZE_MAX, &overflow), sizeof(float),
            SIZE_MAX, &overflow);
    if (overflow)
        return dp_fail(DP_EINVAL, "--batch %ld over %d ranks x the widest %s width %d: a "
                       "batch's activations overflow the address space", o->batch, world,
                       model_option(o), wide);
    return 0;
}

int dp_plan_total_steps(const dp_options *o, long steps_per_epoch, long *total_steps)
{
    if (o->steps > 0) {
        *total_steps = o->steps;
        return 0;
    }
    if (steps_per_epoch > 0 && o->epochs > DP_CHECKPOINT_MAX_STEP / steps_per_epoch)
        return dp_fail(DP_EINVAL, "--epochs %ld x %ld steps per epoch: more than the %ld steps a "
                       "run may take (the largest step a checkpoint name holds)",
                       o->epochs, steps_per_epoch, DP_CHECKPOINT_MAX_STEP);
    *total_steps = o->epochs * steps_per_epoch;
    return 0;
}

int dp_explain_memory_failure(int status, const dp_options *o, int world, int max_rows,
                              size_t nparams, const dp_dims *input)
{
    if (status != DP_ENOMEM)
        return status;
    int unused, overflow = 0;
    if (!nparams) /* the model was never built: its size from the spec, as it would have been */
        nparams = dp_model_spec_size(&o->model, input, &unused, &overflow);
    char message[512];
    snprintf(message, sizeof message, "%s", dp_last_error());
    if (dp_memory_refusals())
        return dp_fail(status, "%s. That is --zero %d's memory (%s); ZeRO shards the optimizer state (--zero 1), also "
                       "the gradients (2) and also the parameters (3) over the ranks. Each stage's memory per rank, "
                       "without training: dp_worker --memory-plan %s '%s' --world %d%s",
                       message, dp_strategy_memory_stage(&o->strategy), o->strategy.label, model_option(o), o->model.text, world,
                       o->optimizer == DP_OPTIMIZER_ADAMW ? " --optimizer adamw" : "");
    return dp_fail(status, "%s. The sizes come from the options: --batch %ld over %d rank%s = "
                   "%d rows per rank (evaluation too), x the widest %s width "
                   "%d = %zu bytes per batch-sized buffer; %s %s = %zu parameters = %zu "
                   "bytes per copy (parameters, gradients, optimizer state). Lower --batch (raise "
                   "--accum to keep the step's samples) or the widths",
                   message, o->batch, world, world == 1 ? "" : "s", max_rows, model_option(o), widest(o),
                   (size_t)max_rows * (size_t)widest(o) * sizeof(float), model_option(o), o->model.text,
                   nparams, nparams * sizeof(float));
}
