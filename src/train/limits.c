#include "src/train/limits.h"

#include "dp/checkpoint.h"
#include "dp/error.h"
#include "dp/memory.h"

#include <float.h>
#include <math.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

/* Integer options with a bound below LONG_MAX, and why. */
static const struct {
    const char *option;
    long max;
    const char *reason;
} long_limits[] = {
    {"threads", 1024, "BLAS threads per rank; more threads than cores only slow a rank down"},
    {"segment-bytes", 4L << 30, "the ring's largest message is 2^30 floats"},
    {"epochs", DP_CHECKPOINT_MAX_STEP, "the largest step a checkpoint name holds"},
    {"steps", DP_CHECKPOINT_MAX_STEP, "the largest step a checkpoint name holds"},
    {"world", INT_MAX, "MPI counts ranks in an int"},
};

/* Float options that must stay below a bound (exclusive). */
static const struct {
    const char *option;
    double below;
} float_limits[] = {
    {"momentum", 1.0},
};

int dp_option_limit_long(const char *option, const char *text, long value, int overflowed)
{
    long max = LONG_MAX;
    const char *reason = "a 64-bit integer";
    for (size_t i = 0; i < sizeof long_limits / sizeof long_limits[0]; i++)
        if (strcmp(option, long_limits[i].option) == 0) {
            max = long_limits[i].max;
            reason = long_limits[i].reason;
        }
    if (overflowed || value > max)
        return dp_fail(DP_EINVAL, "--%s '%s': too large: at most %ld (%s)", option, text, max,
                       reason);
    return 0;
}

int dp_option_to_float(const char *option, const char *text, double given, float *stored)
{
    if (given > FLT_MAX)
        return dp_fail(DP_EINVAL, "--%s '%s': too large for float32 (at most %g)", option, text,
                       (double)FLT_MAX);
    float value = (float)given;
    if (given != 0.0 && value == 0.0f)
        return dp_fail(DP_EINVAL, "--%s '%s': too small for float32: it would be 0", option, text);
    for (size_t i = 0; i < sizeof float_limits / sizeof float_limits[0]; i++) {
        double below = float_limits[i].below;
        if (strcmp(option, float_limits[i].option) != 0 || value < below)
            continue;
        if (given < below)
            return dp_fail(DP_EINVAL, "--%s '%s': must be below %g, but it rounds to %g in "
                           "float32 (the largest float32 below %g is %.9g)", option, text, below,
                           (double)value, below, (double)nextafterf((float)below, 0.0f));
        return dp_fail(DP_EINVAL, "--%s '%s': must be below %g", option, text, below);
    }
    *stored = value;
    return 0;
}

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
                   "%d rows per rank (at least 256 when evaluating), x the widest %s width "
                   "%d = %zu bytes per batch-sized buffer; %s %s = %zu parameters = %zu "
                   "bytes per copy (parameters, gradients, optimizer state). Lower --batch (raise "
                   "--accum to keep the step's samples) or the widths",
                   message, o->batch, world, world == 1 ? "" : "s", max_rows, model_option(o), widest(o),
                   (size_t)max_rows * (size_t)widest(o) * sizeof(float), model_option(o), o->model.text,
                   nparams, nparams * sizeof(float));
}
