/* Every option of dp_worker, one row each (option_table.h says what a row holds), under the
 * groups --help shows them in; and the programs that take them. */
#include "src/train/option_table.h"

#include "dp/checkpoint.h"
#include "dp/comm.h"
#include "dp/error.h"
#include "dp/strategy.h"
#include "src/train/preempt.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "B1,B2", each in [0, 1). */
static int parse_betas(const char *text, dp_options *o)
{
    char *middle, *end = NULL;
    errno = 0;
    double b1 = strtod(text, &middle), b2 = *middle == ',' ? strtod(middle + 1, &end) : -1.0;
    if (middle == text || *middle != ',' || end == middle + 1 || *end || errno || !(b1 >= 0.0 && b1 < 1.0) ||
        !(b2 >= 0.0 && b2 < 1.0))
        return dp_fail(DP_EINVAL, "--betas '%s': must be two numbers in [0, 1) separated by a comma, e.g. 0.9,0.999", text);
    /* Parsed in double and checked as stored, as --momentum is: 0.99999999 is 1 in float32. */
    o->beta1 = (float)b1;
    o->beta2 = (float)b2;
    if (o->beta1 >= 1.0f || o->beta2 >= 1.0f || (b1 != 0.0 && o->beta1 == 0.0f) || (b2 != 0.0 && o->beta2 == 0.0f))
        return dp_fail(DP_EINVAL, "--betas '%s': must be in [0, 1), but they round to %.9g,%.9g in float32", text,
                       (double)o->beta1, (double)o->beta2);
    return 0;
}

/* "RANK:N" (RANK >= 0, N from 1 to max) into *rank and *value, or "off" (*rank -1); the message
 * names the option, N's name and its range. */
static int parse_rank_and(const char *option, const char *text, const char *name, long max, const char *range,
                          int *rank, long *value)
{
    int consumed = 0;
    if (strcmp(text, "off") == 0) {
        *rank = -1;
        return 0;
    }
    if (sscanf(text, "%d:%ld%n", rank, value, &consumed) != 2 || text[consumed] || *rank < 0 || *value < 1 ||
        *value > max)
        return dp_fail(DP_EINVAL, "--%s '%s': must be RANK:%s with RANK >= 0 and %s %s, or off", option, text, name, name,
                       range);
    return 0;
}

/* "RANK:STEP", or off. */
static int parse_corruption(const char *text, dp_options *o)
{
    return parse_rank_and("debug-corrupt", text, "STEP", LONG_MAX, ">= 1", &o->corrupt_rank, &o->corrupt_step);
}

/* --lr-schedule's arguments: step:EVERY,GAMMA (EVERY >= 1, GAMMA in (0, 1]); the others take none. */
static int parse_schedule(const char *text, dp_options *o)
{
    const char *colon = strchr(text, ':');
    int step = o->lr_schedule == DP_LR_STEP;
    if (!colon && !step)
        return 0;
    if (!step)
        return dp_fail(DP_EINVAL, "--lr-schedule '%s': only step takes arguments (step:EVERY,GAMMA)", text);
    char *end = NULL, *comma = NULL;
    errno = 0;
    long every = colon ? strtol(colon + 1, &comma, 10) : 0;
    double gamma = comma && *comma == ',' ? strtod(comma + 1, &end) : -1.0;
    if (!colon || comma == colon + 1 || *comma != ',' || end == comma + 1 || *end || errno || every < 1 ||
        every > DP_CHECKPOINT_MAX_STEP || !(gamma > 0.0 && gamma <= 1.0) || (float)gamma == 0.0f)
        return dp_fail(DP_EINVAL, "--lr-schedule '%s': must be step:EVERY,GAMMA with EVERY a whole number of steps >= 1 "
                       "and GAMMA in (0, 1], e.g. step:30,0.1 (torch.optim.lr_scheduler.StepLR)", text);
    o->lr_step_every = every;
    o->lr_step_gamma = (float)gamma;
    return 0;
}

/* --warmup-start-factor: in (0, 1], as LinearLR's start_factor. */
static int parse_warmup_start(const char *text, dp_options *o)
{
    char *end;
    double f = strtod(text, &end);
    if (end == text || *end || !(f > 0.0 && f <= 1.0) || (float)f == 0.0f)
        return dp_fail(DP_EINVAL, "--warmup-start-factor '%s': must be a number in (0, 1]: the first step's rate as a "
                       "factor of --lr (torch.optim.lr_scheduler.LinearLR's start_factor)", text);
    o->warmup_start_factor = (float)f;
    return 0;
}

/* "RANK:MS", or off. */
static int parse_straggle(const char *text, dp_options *o)
{
    return parse_rank_and("debug-straggle", text, "MS", 60000, "from 1 to 60000", &o->straggle_rank, &o->straggle_ms);
}

static int parse_signals(const char *text, dp_options *o)
{
    return dp_preempt_parse_signals("--preempt-signal", text, &o->preempt_signals);
}

static int parse_grad_dtype(const char *text, dp_options *o)
{
    return dp_grad_dtype_parse(text, &o->grad_dtype);
}

const char *const dp_precision_names[DP_PRECISIONS] = {[DP_PRECISION_FP32] = "fp32", [DP_PRECISION_TF32] = "tf32",
                                                      [DP_PRECISION_BF16] = "bf16", [DP_PRECISION_FP16] = "fp16",
                                                      [DP_PRECISION_MIXED] = "mixed"};

static const char *const losses[] = {[DP_LOSS_AUTO] = "auto", [DP_LOSS_CHOICE_XENT] = "xent",
                                     [DP_LOSS_CHOICE_MSE] = "mse"};
static const char *const schedules[] = {[DP_LR_CONSTANT] = "constant", [DP_LR_COSINE] = "cosine",
                                        [DP_LR_LINEAR] = "linear", [DP_LR_STEP] = "step"};
static const char *const best_metrics[] = {[DP_BEST_TEST_LOSS] = "test_loss", [DP_BEST_TEST_ACC] = "test_acc"};
static const char *const nan_policies[] = {"abort", "skip"}; /* skip_nonfinite */
static const char *const devices[] = {[DP_DEVICE_CPU] = "cpu", [DP_DEVICE_CUDA] = "cuda", [DP_DEVICE_AUTO] = "auto"};
static const char *const cuda_aware_modes[] = {[DP_CUDA_AWARE_AUTO] = "auto", [DP_CUDA_AWARE_ON] = "on",
                                               [DP_CUDA_AWARE_OFF] = "off"};
static const char *const fuse_modes[] = {"auto", "off"}; /* unfused */
static const char *const graph_modes[] = {[DP_GRAPH_OFF] = "off", [DP_GRAPH_ON] = "on", [DP_GRAPH_AUTO] = "auto"};
static const char *const placements[] = {[DP_DATA_OFF] = "off", [DP_DATA_ON] = "on", [DP_DATA_AUTO] = "auto"};
static const char *const optimizers[] = {[DP_OPTIMIZER_SGD] = "sgd", [DP_OPTIMIZER_ADAMW] = "adamw"};
static const char *const zero_stages[] = {"0", "1", "2", "3"}; /* dp_strategy_name_for_zero's */

/* A choice is copied into its field as an int's bytes: an enum field has int's size, and a
 * non-negative value has the same bytes in int and unsigned int, whichever the enum is. */
_Static_assert(sizeof(dp_loss_choice) == sizeof(int) && sizeof(dp_optimizer_kind) == sizeof(int) &&
                   sizeof(dp_lr_schedule) == sizeof(int) && sizeof(dp_precision) == sizeof(int) &&
                   sizeof(dp_device) == sizeof(int) && sizeof(dp_cuda_aware) == sizeof(int) &&
                   sizeof(dp_graph_mode) == sizeof(int) && sizeof(dp_data_placement) == sizeof(int) &&
                   sizeof(dp_best_metric) == sizeof(int),
               "a CHOICE row stores its value as an int");

#define FIELD(member) .field = offsetof(dp_options, member), .size = sizeof(((dp_options *)0)->member)
#define CHOICES(list) .choices = list, .choice_count = (int)(sizeof list / sizeof *list)
#define GIVEN(option) {option, NULL, 0}
#define IS(option, values) {option, values, 0}
#define NOT_GIVEN(option) {option, NULL, 1}
#define IS_NOT(option, values) {option, values, 1}
/* What only a training run does: refused with the old --predict flag (dp_worker predict takes none of it). */
#define TRAINING_RUN {.to = {NOT_GIVEN("predict")}, .why = "it runs the --init model on its inputs and writes --output only"}
#define GPU_ONLY(own) {.when = own, .to = {IS_NOT("device", "cpu")}, .what = "GPUs"}
#define CHECKPOINTS_MAX_WHY "the largest step a checkpoint name holds"

enum { TRAIN = DP_PROGRAM_TRAIN, PREDICT = DP_PROGRAM_PREDICT, PLAN = DP_PROGRAM_PLAN, EVERY = TRAIN | PREDICT | PLAN };

const dp_option_row dp_option_rows[] = {
    /* data */
    {.name = "data", .metavar = "SPEC", .kind = DP_OPTION_TEXT, FIELD(data), .fallback = "fashion-mnist",
     .group = DP_GROUP_DATA, .programs = TRAIN | PLAN, .resume = DP_RESUME_IDENTITY, .file = DP_FILE_READ,
     .help = "training data: fashion-mnist, DIR of MNIST-named IDX files, FEATURES.npy,LABELS.npy, or synthetic:N,D,K"},
    {.name = "test-data", .metavar = "SPEC", .kind = DP_OPTION_TEXT, FIELD(test_data), .note = "the test split of --data",
     .group = DP_GROUP_DATA, .programs = TRAIN | PLAN, .file = DP_FILE_READ,
     .help = "evaluation data after every epoch, same forms as --data"},
    {.name = "predict", .metavar = "FILE.npy", .kind = DP_OPTION_TEXT, FIELD(predict_path), .note = "off (train)",
     .group = DP_GROUP_DATA, .programs = TRAIN, .file = DP_FILE_READ,
     .help = "inference instead of training, as dp_worker predict FILE.npy (see dp_worker predict --help)"},
    {.name = "batch", .metavar = "B", .kind = DP_OPTION_LONG, FIELD(batch), .range = {.min = 1}, .fallback = "256",
     .group = DP_GROUP_DATA, .programs = TRAIN | PLAN, .resume = DP_RESUME_BITS,
     .help = "global batch per micro-batch, split over the ranks (sizes differ by at most one)"},
    {.name = "accum", .metavar = "M", .kind = DP_OPTION_LONG, FIELD(accum), .range = {.min = 1}, .fallback = "1",
     .group = DP_GROUP_DATA, .programs = TRAIN | PLAN, .resume = DP_RESUME_BITS,
     .help = "micro-batches accumulated locally per optimizer step (one all-reduce per step)"},
    {.name = "epochs", .metavar = "E", .kind = DP_OPTION_LONG, FIELD(epochs),
     .range = {.min = 1, .max = DP_CHECKPOINT_MAX_STEP, .why = CHECKPOINTS_MAX_WHY}, .fallback = "10",
     .group = DP_GROUP_DATA, .programs = TRAIN, .resume = DP_RESUME_BITS,
     .help = "passes over the training data"},
    {.name = "steps", .metavar = "S", .kind = DP_OPTION_LONG, FIELD(steps),
     .range = {.min = 0, .max = DP_CHECKPOINT_MAX_STEP, .why = CHECKPOINTS_MAX_WHY}, .fallback = "0",
     .note = "use --epochs", .group = DP_GROUP_DATA, .programs = TRAIN, .resume = DP_RESUME_BITS,
     .help = "train exactly S optimizer steps, crossing epochs; overrides --epochs"},
    {.name = "drop-last", .kind = DP_OPTION_FLAG, FIELD(drop_last), .group = DP_GROUP_DATA, .programs = TRAIN,
     .resume = DP_RESUME_IDENTITY,
     .help = "skip each epoch's last short batch (default: train on it, averaged over its own size)"},
    {.name = "seed", .metavar = "N", .kind = DP_OPTION_SEED, FIELD(seed), .fallback = "42",
     .group = DP_GROUP_DATA, .programs = TRAIN, .resume = DP_RESUME_IDENTITY,
     .help = "seed for initialisation, shuffling and synthetic data"},

    /* model */
    {.name = "layers", .metavar = "W0,W1,...", .kind = DP_OPTION_TEXT, FIELD(layers_spec), .fallback = "784,256,256,10",
     .group = DP_GROUP_MODEL, .programs = EVERY, .resume = DP_RESUME_IDENTITY,
     .help = "MLP widths: input, hidden (ReLU) ..., output; tensors layers.{k} = the k-th Linear"},
    {.name = "model", .metavar = "SPEC", .kind = DP_OPTION_TEXT, FIELD(model_text), .note = "none (use --layers)",
     .group = DP_GROUP_MODEL, .programs = EVERY, .resume = DP_RESUME_IDENTITY,
     .help = "a sequential model, e.g. \"linear(256),batchnorm,relu,dropout(0.2),linear(10)\" (input width from "
             "the data; options in parentheses, name=value for the optional ones); tensors layers.{i} with i the "
             "index in the list, as nn.Sequential; residual blocks and presets (resnet18, resnet50, ...) below"},
    {.name = "sync-bn", .kind = DP_OPTION_FLAG, FIELD(sync_bn), .group = DP_GROUP_MODEL, .programs = TRAIN,
     .resume = DP_RESUME_BITS,
     .help = "every batchnorm is a SyncBatchNorm: statistics over the whole global batch (W ranks equal 1 rank)"},
    {.name = "loss", .metavar = "auto|xent|mse", .kind = DP_OPTION_CHOICE, FIELD(loss), CHOICES(losses),
     .fallback = "auto", .group = DP_GROUP_MODEL, .programs = TRAIN | PLAN,
     .help = "softmax cross-entropy for labels, MSE for float targets (auto picks from the data)"},
    {.name = "init", .metavar = "FILE", .kind = DP_OPTION_TEXT, FIELD(init_path), .note = "none (random)",
     .group = DP_GROUP_MODEL, .programs = TRAIN | PREDICT, .file = DP_FILE_READ,
     .help = "the parameters to start from (training) or to run (predict): a safetensors file with PyTorch's names"},
    {.name = "params", .metavar = "N", .kind = DP_OPTION_COUNT, FIELD(plan_params), .note = "the model's",
     .group = DP_GROUP_MODEL, .programs = TRAIN | PLAN, .applies = {{.to = {GIVEN("memory-plan")}}},
     .help = "the plan's parameter count (dp_worker plan, --memory-plan), e.g. 70e9"},

    /* optimizer */
    {.name = "optimizer", .metavar = "sgd|adamw", .kind = DP_OPTION_CHOICE, FIELD(optimizer), CHOICES(optimizers),
     .fallback = "sgd", .group = DP_GROUP_OPTIMIZER, .programs = TRAIN | PLAN, .resume = DP_RESUME_IDENTITY,
     .help = "torch.optim.SGD, or torch.optim.AdamW (decoupled weight decay)"},
    /* The defaults per optimizer are PyTorch's constructors'. */
    {.name = "lr", .metavar = "LR", .kind = DP_OPTION_FLOAT, FIELD(lr), .range = {.positive = 1}, .fallback = "0.05",
     .depends = {"optimizer", "adamw", "0.001"}, .group = DP_GROUP_OPTIMIZER, .programs = TRAIN,
     .resume = DP_RESUME_BITS, .help = "learning rate"},
    {.name = "lr-schedule", .metavar = "constant|cosine|linear|step:EVERY,GAMMA", .kind = DP_OPTION_CHOICE,
     FIELD(lr_schedule), CHOICES(schedules), .parse = parse_schedule, .fallback = "constant",
     .group = DP_GROUP_OPTIMIZER, .programs = TRAIN, .resume = DP_RESUME_BITS,
     .help = "learning rate after any warm-up, a function of the global step: constant; cosine annealing to --lr-min "
             "by the last step (CosineAnnealingLR); linear decay to --lr-min by the last step (LinearLR); or times "
             "GAMMA every EVERY steps (StepLR)"},
    {.name = "lr-min", .metavar = "LR", .kind = DP_OPTION_FLOAT, FIELD(lr_min), .fallback = "0",
     .group = DP_GROUP_OPTIMIZER, .programs = TRAIN, .applies = {{.to = {IS("lr-schedule", "cosine|linear")}}},
     .resume = DP_RESUME_BITS, .help = "cosine and linear: the rate they reach at the last step (at most --lr)"},
    {.name = "warmup-steps", .metavar = "N", .kind = DP_OPTION_LONG, FIELD(warmup_steps),
     .range = {.min = 1, .max = DP_CHECKPOINT_MAX_STEP, .why = CHECKPOINTS_MAX_WHY}, .note = "none",
     .group = DP_GROUP_OPTIMIZER, .programs = TRAIN, .resume = DP_RESUME_BITS,
     .help = "the first N steps raise the rate linearly from --warmup-start-factor x --lr towards --lr (LinearLR), "
             "then --lr-schedule runs over the remaining steps (SequentialLR); fewer than the run's steps"},
    {.name = "warmup-start-factor", .metavar = "F", .kind = DP_OPTION_CUSTOM, .parse = parse_warmup_start,
     .fallback = "0.01", .group = DP_GROUP_OPTIMIZER, .programs = TRAIN,
     .applies = {{.to = {GIVEN("warmup-steps")}}}, .resume = DP_RESUME_BITS,
     .help = "the warm-up's first rate as a factor of --lr, in (0, 1] (LinearLR's start_factor; PyTorch's default "
             "is 1/3)"},
    {.name = "clip-grad-norm", .metavar = "MAX", .kind = DP_OPTION_FLOAT, FIELD(clip_grad_norm),
     .range = {.positive = 1}, .note = "none", .group = DP_GROUP_OPTIMIZER, .programs = TRAIN,
     .resume = DP_RESUME_BITS,
     .help = "scale the step's averaged gradient by MAX / (its L2 norm over every parameter and rank + 1e-6) when that "
             "is below 1 (torch.nn.utils.clip_grad_norm_); the norm is in the step line and the metrics every step "
             "(a large MAX only measures); a non-finite norm is a non-finite gradient (--on-nan)"},
    {.name = "momentum", .metavar = "MU", .kind = DP_OPTION_FLOAT, FIELD(momentum), .range = {.below = 1.0},
     .fallback = "0.9", .depends = {"optimizer", "adamw", "0"}, .group = DP_GROUP_OPTIMIZER, .programs = TRAIN,
     .applies = {{.to = {IS("optimizer", "sgd")}}}, .resume = DP_RESUME_BITS, .help = "SGD momentum (0 disables)"},
    {.name = "weight-decay", .metavar = "WD", .kind = DP_OPTION_FLOAT, FIELD(weight_decay), .fallback = "0",
     .depends = {"optimizer", "adamw", "0.01"}, .group = DP_GROUP_OPTIMIZER, .programs = TRAIN,
     .resume = DP_RESUME_BITS,
     .help = "sgd: L2 added to the gradient of every parameter, as torch.optim.SGD; adamw: decoupled (p *= 1 - lr WD), "
             "on weight matrices only, not on biases or normalisation weights, as most recipes do (--decay-all: "
             "every parameter, like PyTorch's default)"},
    {.name = "betas", .metavar = "B1,B2", .kind = DP_OPTION_CUSTOM, .parse = parse_betas, .fallback = "0.9,0.999",
     .group = DP_GROUP_OPTIMIZER, .programs = TRAIN, .applies = {{.to = {IS("optimizer", "adamw")}}},
     .resume = DP_RESUME_BITS, .help = "AdamW's moment decay rates"},
    {.name = "eps", .metavar = "EPS", .kind = DP_OPTION_FLOAT, FIELD(eps), .range = {.positive = 1}, .fallback = "1e-8",
     .group = DP_GROUP_OPTIMIZER, .programs = TRAIN, .applies = {{.to = {IS("optimizer", "adamw")}}},
     .resume = DP_RESUME_BITS, .help = "AdamW's denominator term"},
    {.name = "decay-all", .kind = DP_OPTION_FLAG, FIELD(decay_all), .group = DP_GROUP_OPTIMIZER, .programs = TRAIN,
     .applies = {{.to = {IS("optimizer", "adamw")}}}, .resume = DP_RESUME_BITS,
     .help = "adamw: decay biases and normalisation weights too (torch.optim.AdamW's default)"},

    /* strategy: the options that name one, in the order messages name them, and their keys */
    {.name = "strategy", .metavar = "NAME[:KEY=VALUE,...]", .kind = DP_OPTION_STRATEGY, FIELD(strategy),
     .group = DP_GROUP_STRATEGY, .programs = TRAIN, .applies = {TRAINING_RUN}, .resume = DP_RESUME_BITS,
     .help = "how the ranks' work is combined: ddp, zero-1, zero-2, zero-3[:live-mb=MB], exact[:rows=R], "
             "local-sgd[:every=K], bf16-compress (each with its keys under Strategies); --zero, --exact and "
             "--average-every name them too"},
    {.name = "exact", .kind = DP_OPTION_STRATEGY, .strategy = {"exact", NULL}, .group = DP_GROUP_STRATEGY,
     .programs = TRAIN, .applies = {TRAINING_RUN}, .resume = DP_RESUME_BITS,
     .help = "--strategy exact: bitwise the same parameters, losses and checkpoints for every world size, algorithm "
             "and --accum (resume on another W too): the step is cut into row groups of --exact-shard rows, each "
             "computed alone, their gradients summed exactly in fixed point and all-reduced as integers; BatchNorm "
             "normalises over each group; 1 BLAS thread per rank unless --threads (docs/STRATEGIES.md)"},
    {.name = "exact-shard", .metavar = "R", .kind = DP_OPTION_STRATEGY_KEY, .strategy = {NULL, "rows"},
     .group = DP_GROUP_STRATEGY, .programs = TRAIN, .resume = DP_RESUME_BITS,
     .help = "--strategy exact:rows=R: rows per row group, whatever the world size (a BatchNorm needs at least 2 in "
             "every group)"},
    {.name = "average-every", .metavar = "K", .kind = DP_OPTION_STRATEGY, .strategy = {"local-sgd", "every"},
     .note = "off: gradients all-reduced every step", .group = DP_GROUP_STRATEGY, .programs = TRAIN,
     .applies = {TRAINING_RUN}, .resume = DP_RESUME_BITS,
     .help = "--strategy local-sgd:every=K: no gradient all-reduce; each rank takes K optimizer steps on its own "
             "samples, then the parameters, optimizer state and BatchNorm statistics are averaged (weighted by "
             "samples) and the replicas' divergence before it is reported. Flawed by design: replicas drift apart "
             "between averagings (docs/STRATEGIES.md)"},
    {.name = "zero", .metavar = "0|1|2|3", .kind = DP_OPTION_STRATEGY, CHOICES(zero_stages), .note = "0 (ddp)",
     .group = DP_GROUP_STRATEGY, .programs = TRAIN, .applies = {TRAINING_RUN}, .resume = DP_RESUME_BITS,
     .help = "ZeRO stage: 1 shards the optimizer state over the ranks, 2 also the gradients (reduce-scattered "
             "bucket by bucket), 3 also the parameters (each module's gathered before its forward and backward); "
             "the banner shows each stage's memory per rank"},
    {.name = "zero-live-mb", .metavar = "MB|auto|unlimited", .kind = DP_OPTION_STRATEGY_KEY,
     .strategy = {NULL, "live-mb"}, .group = DP_GROUP_STRATEGY, .programs = TRAIN | PLAN,
     .help = "--zero 2 and 3: the most MiB of gathered parameters and gradient blocks a rank holds at once (the "
             "working set; ZeRO-3's buckets in flight and gathered parameters, prefetch included); a Linear or "
             "Conv2d larger than its share is gathered and reduce-scattered in blocks of whole rows (output "
             "features or channels; in stage 3 its input gradient reads blocks of whole columns). auto: an eighth "
             "of the rank's sharded state (16 bytes per parameter over the ranks), at least 1 MiB; unlimited: "
             "whole modules"},
    {.name = "allreduce", .metavar = "NAME", .kind = DP_OPTION_TEXT, FIELD(allreduce), .fallback = "auto",
     .group = DP_GROUP_STRATEGY, .programs = TRAIN, .resume = DP_RESUME_BITS,
     .help = "gradient all-reduce algorithm (the list is at the end); auto: nccl where every rank computes on a GPU "
             "and the build has NCCL (--exact's digits excepted), else the host table by world and message size; "
             "the banner says which and why"},
    {.name = "hier-inner", .metavar = "NAME", .kind = DP_OPTION_TEXT, FIELD(hier_inner), .fallback = "ring",
     .group = DP_GROUP_STRATEGY, .programs = TRAIN, .applies = {{.to = {IS("allreduce", "hier")}}},
     .resume = DP_RESUME_BITS,
     .help = "--allreduce hier: the all-reduce among one leader per node (ring, rhd, mpi, or another algorithm but "
             "hier); within each node ranks reduce to the leader and it broadcasts back"},
    {.name = "segment-bytes", .metavar = "N", .kind = DP_OPTION_LONG, FIELD(segment_bytes),
     .range = {.min = sizeof(float), .max = 4L << 30, .why = "the ring's largest message is 2^30 floats"},
     .fallback = "1048576", .note = "1 MiB", .group = DP_GROUP_STRATEGY, .programs = TRAIN,
     /* auto's table picks ring-pipelined for some sizes. */
     .applies = {{.to = {IS("allreduce", "ring-pipelined|auto"), IS("hier-inner", "ring-pipelined")}}},
     .help = "ring-pipelined: bytes per segment, rounded down to whole floats"},
    {.name = "auto-table", .metavar = "FILE", .kind = DP_OPTION_TEXT, FIELD(auto_table), .file = DP_FILE_READ,
     .note = "built-in", .group = DP_GROUP_STRATEGY, .programs = TRAIN, .applies = {{.to = {IS("allreduce", "auto")}}},
     .help = "--allreduce auto's table of algorithm per world and message size (dp_bench --tune writes one); rank 0 "
             "reads it for all"},
    {.name = "grad-dtype", .metavar = "fp32|bf16", .kind = DP_OPTION_CUSTOM, .parse = parse_grad_dtype,
     .fallback = "fp32", .group = DP_GROUP_STRATEGY, .programs = TRAIN, .resume = DP_RESUME_BITS,
     .help = "what the gradients' reductions send and add: bf16 rounds each bucket to bfloat16 (nearest even), sums "
             "in FP32 rounding every partial sum to bf16, and widens the result back: half the bytes, about 2^-8 "
             "relative error per addition (docs/ALGORITHMS.md); every algorithm (nccl: ncclBfloat16, rounded on the "
             "GPU), buckets and ZeRO 1-3; not with --exact or --average-every"},
    {.name = "bucket-mb", .metavar = "MB|auto", .kind = DP_OPTION_MIB, FIELD(bucket_mb), .word = "auto",
     .word_value = 0.0, /* dp_strategy_default_config's auto */
     .range = {.min = DP_STRATEGY_MIN_BUCKET_BYTES, .why = "the smallest bucket: each bucket is a collective of its "
                                                          "own, and smaller ones only add their latency"},
     .fallback = "auto", .note = "the first bucket: 1", .group = DP_GROUP_STRATEGY, .programs = TRAIN | PLAN,
     .applies = {{.to = {NOT_GIVEN("no-overlap"), IS("strategy", "zero-2|zero-3"), GIVEN("memory-plan")},
                  .what = "buckets reduced during backward", .why = "with it, only zero-2 and zero-3 reduce in buckets"}},
     .help = "gradients are reduced in buckets of at most this many MiB, each started as soon as backward finishes "
             "it, so communication overlaps the rest of backward (PyTorch DDP's bucket_cap_mb); auto: 25 as DDP, or "
             "an eighth of the gradients when that is smaller (at least 1), so a small model still has buckets to "
             "overlap"},
    {.name = "no-overlap", .kind = DP_OPTION_FLAG, FIELD(no_overlap), .group = DP_GROUP_STRATEGY,
     .programs = TRAIN | PLAN,
     .help = "reduce the whole gradient in one collective after backward instead (version 1's step); under --zero 2 "
             "and 3, each bucket as backward fills it and one gathered module at a time (the least memory)"},
    {.name = "progress-thread", .metavar = "US|auto", .kind = DP_OPTION_LONG, FIELD(progress_us), .word = "auto",
     .word_value = -1.0, .range = {.min = 0}, .fallback = "auto", .group = DP_GROUP_STRATEGY, .programs = TRAIN,
     .help = "a thread that advances the buckets' collectives every US microseconds while backward computes, besides "
             "the calls between pieces of backward; 0: none. auto: 1000 when the job spans hosts (TCP moves only "
             "inside MPI calls), none on one host (shared memory needs no help); 50-100 beside a GPU "
             "(docs/ALGORITHMS.md, Progress)"},
    {.name = "world", .metavar = "W", .kind = DP_OPTION_LONG, FIELD(plan_world),
     .range = {.min = 1, .max = INT_MAX, .why = "MPI counts ranks in an int"}, .note = "this job's ranks",
     .group = DP_GROUP_STRATEGY, .programs = TRAIN | PLAN,
     .applies = {{.to = {GIVEN("memory-plan")}, .why = "a training run's ranks are mpirun's -np"}},
     .help = "the plan's ranks (dp_worker plan, --memory-plan)"},

    /* device and precision */
    {.name = "device", .metavar = "cpu|cuda|auto", .kind = DP_OPTION_CHOICE, FIELD(device), CHOICES(devices),
     .fallback = "auto", .group = DP_GROUP_DEVICE, .programs = TRAIN | PREDICT, .resume = DP_RESUME_BITS,
     .help = "where ranks compute; cuda gives each rank of a node its own GPU (matched by UUID); auto: cuda when "
             "every rank has one"},
    {.name = "share-gpu", .kind = DP_OPTION_FLAG, FIELD(share_gpu), .group = DP_GROUP_DEVICE,
     .programs = TRAIN | PREDICT, .applies = {GPU_ONLY(NULL)},
     .help = "let ranks of a node share a GPU, taking turns on it (testing W ranks on one GPU)"},
    {.name = "threads", .metavar = "T", .kind = DP_OPTION_INT, FIELD(threads),
     .range = {.min = 1, .max = 1024, .why = "BLAS threads per rank; more threads than cores only slow a rank down"},
     .note = "the cores this rank is bound to; unbound: the node's cores / its ranks; predict: 1",
     .group = DP_GROUP_DEVICE, .programs = TRAIN | PREDICT, .resume = DP_RESUME_BITS,
     .help = "BLAS threads per rank (scripts/launch.sh binds each rank to its own cores)"},
    {.name = "precision", .metavar = "fp32|tf32|bf16|fp16|mixed", .kind = DP_OPTION_CHOICE, FIELD(precision),
     CHOICES(dp_precision_names), .fallback = "fp32", .group = DP_GROUP_DEVICE, .programs = EVERY,
     .applies = {{.when = "fp16|mixed", .to = {GIVEN("memory-plan")}, .why = "training takes fp32, tf32 or bf16"},
                 GPU_ONLY("tf32")},
     .resume = DP_RESUME_BITS,
     .help = "GPU GEMMs' inputs, FP32 accumulation and FP32 weights, state, activations and losses throughout: fp32 "
             "exact, tf32 (tensor cores, 10-bit mantissa), bf16 (tensor cores, 7-bit mantissa; the CPU declines it); a GPU before sm_80 has neither tensor "
             "core and runs FP32, saying so. "
             "The plan's bytes per parameter (dp_worker plan, --memory-plan): fp32, tf32 and bf16 as dptrain trains "
             "(4 + 4 + optimizer state), fp16 as the documents' table (FP16 parameters and gradients, FP32 optimizer "
             "state, no master copy), mixed as the ZeRO paper (FP16 parameters and gradients, FP32 master copy and "
             "state)"},
    {.name = "tf32", .kind = DP_OPTION_ALIAS, .alias = {"precision", "tf32"}, .group = DP_GROUP_DEVICE,
     .programs = TRAIN | PREDICT, .applies = {GPU_ONLY(NULL)}, .resume = DP_RESUME_BITS, .help = "--precision tf32"},
    {.name = "cuda-aware", .metavar = "on|off|auto", .kind = DP_OPTION_CHOICE, FIELD(cuda_aware),
     CHOICES(cuda_aware_modes), .fallback = "auto", .note = "ask MPI", .group = DP_GROUP_DEVICE, .programs = TRAIN,
     .applies = {GPU_ONLY("on")},
     .help = "hand MPI GPU memory for --allreduce mpi instead of staging gradients through host memory"},
    {.name = "fuse", .metavar = "auto|off", .kind = DP_OPTION_CHOICE, FIELD(unfused), CHOICES(fuse_modes),
     .fallback = "auto", .group = DP_GROUP_DEVICE, .programs = TRAIN | PREDICT, .applies = {GPU_ONLY("off")},
     .resume = DP_RESUME_BITS,
     .help = "GPU: a Linear's bias, ReLU, ReLU backward and bias gradient in its GEMMs' cuBLASLt epilogues where "
             "cuBLASLt runs them (auto), or as kernels of their own (off, for A/B timing)"},
    {.name = "cuda-graph", .metavar = "auto|on|off", .kind = DP_OPTION_CHOICE, FIELD(cuda_graph), CHOICES(graph_modes),
     .fallback = "auto", .group = DP_GROUP_DEVICE, .programs = TRAIN | PLAN, .applies = {GPU_ONLY("on")},
     .help = "replay full training steps from one captured CUDA graph (one launch instead of every kernel); auto: "
             "where no step needs the host inside it (one rank, DDP, no --on-nan skip or --trace; the banner says "
             "why not; --accum K holds K micro-batches' rows), on: an error where it cannot"},
    {.name = "data-on-device", .metavar = "auto|on|off", .kind = DP_OPTION_CHOICE, FIELD(data_on_device),
     CHOICES(placements), .fallback = "auto", .group = DP_GROUP_DEVICE, .programs = TRAIN,
     .applies = {GPU_ONLY("on")},
     .help = "GPU: hold the training and test sets in GPU memory, uploaded once, and gather each step's rows there "
             "(on; an error where they do not fit the GPU's free memory), read and upload every micro-batch's rows "
             "from the host (off), or on where they take at most a quarter of the GPU's memory (auto)"},
    {.name = "max-memory-mb", .metavar = "MB", .kind = DP_OPTION_MIB, FIELD(max_memory_mb),
     .range = {.min = 1, .why = "the least a limit can be (0 would mean no limit)"}, .note = "none",
     .group = DP_GROUP_DEVICE, .programs = TRAIN, .applies = {TRAINING_RUN},
     .help = "per-rank limit on backend memory (GPU memory, or host memory on the CPU), enforced by the allocation "
             "counter: a run that needs more stops at start-up naming what"},
    {.name = "memory-plan", .kind = DP_OPTION_FLAG, FIELD(memory_plan), .group = DP_GROUP_DEVICE, .programs = TRAIN,
     .applies = {TRAINING_RUN},
     .help = "print each ZeRO stage's memory per rank for this model (or --params) and --world, and exit, as "
             "dp_worker plan (see dp_worker plan --help)"},

    /* checkpoints */
    {.name = "save", .metavar = "FILE", .kind = DP_OPTION_TEXT, FIELD(save_path), .note = "none",
     .group = DP_GROUP_CHECKPOINTS, .programs = TRAIN, .applies = {TRAINING_RUN}, .file = DP_FILE_WRITTEN,
     .help = "write the final parameters as safetensors (PyTorch names and layouts)"},
    {.name = "checkpoint-dir", .metavar = "DIR", .kind = DP_OPTION_TEXT, FIELD(checkpoint_dir), .note = "none",
     .group = DP_GROUP_CHECKPOINTS, .programs = TRAIN, .applies = {TRAINING_RUN},
     .help = "write the full training state to DIR/step-N.safetensors (atomically) at the end; a DIR holding "
             "another run's checkpoints is refused"},
    {.name = "checkpoint-every", .metavar = "N", .kind = DP_OPTION_LONG, FIELD(checkpoint_every), .range = {.min = 0},
     .fallback = "0", .note = "end only", .group = DP_GROUP_CHECKPOINTS, .programs = TRAIN,
     .applies = {{.to = {GIVEN("checkpoint-dir")}}}, .help = "also checkpoint every N optimizer steps"},
    {.name = "keep", .metavar = "K", .kind = DP_OPTION_LONG, FIELD(keep), .range = {.min = 1}, .fallback = "3",
     .group = DP_GROUP_CHECKPOINTS, .programs = TRAIN, .applies = {{.to = {GIVEN("checkpoint-dir")}}},
     .help = "this run's checkpoints kept in --checkpoint-dir"},
    {.name = "eval-every", .metavar = "N", .kind = DP_OPTION_LONG, FIELD(eval_every),
     .range = {.min = 1, .max = DP_CHECKPOINT_MAX_STEP, .why = CHECKPOINTS_MAX_WHY}, .note = "at each epoch's end",
     .group = DP_GROUP_CHECKPOINTS, .programs = TRAIN, .applies = {TRAINING_RUN},
     .help = "also evaluate the test set every N optimizer steps (as at each epoch's end): the eval line, --metrics, "
             "--tensorboard, --keep-best and --early-stop take every evaluation"},
    {.name = "keep-best", .metavar = "K", .kind = DP_OPTION_LONG, FIELD(keep_best),
     .range = {.min = 1, .max = 20, .why = "a checkpoint's metadata lists them"},
     .note = "none", .group = DP_GROUP_CHECKPOINTS, .programs = TRAIN, .applies = {{.to = {GIVEN("checkpoint-dir")}}},
     .help = "also keep the K checkpoints of the best evaluations by --best-metric (a checkpoint is written at an "
             "evaluation that enters them), never pruned by --keep; the newest checkpoint lists them (best_steps)"},
    {.name = "best-metric", .metavar = "test_loss|test_acc", .kind = DP_OPTION_CHOICE, FIELD(best_metric),
     CHOICES(best_metrics), .fallback = "test_loss", .group = DP_GROUP_CHECKPOINTS, .programs = TRAIN,
     .applies = {{.to = {GIVEN("keep-best"), GIVEN("early-stop")}}},
     .help = "what --keep-best and --early-stop call better: a lower test loss, or a higher test accuracy"},
    {.name = "early-stop", .metavar = "PATIENCE", .kind = DP_OPTION_LONG, FIELD(early_stop),
     .range = {.min = 1, .max = DP_CHECKPOINT_MAX_STEP, .why = CHECKPOINTS_MAX_WHY}, .note = "never",
     .group = DP_GROUP_CHECKPOINTS, .programs = TRAIN, .applies = {TRAINING_RUN},
     .help = "stop after PATIENCE evaluations in a row without a better --best-metric than the best so far: a final "
             "checkpoint (with --checkpoint-dir), --save, exit 0; the count survives --resume"},
    {.name = "checkpoint-shards", .kind = DP_OPTION_FLAG, FIELD(checkpoint_shards), .note = "off (one gathered file)",
     .group = DP_GROUP_CHECKPOINTS, .programs = TRAIN,
     .applies = {{.to = {GIVEN("checkpoint-dir")}}},
     .help = "every rank writes its own shard (step-N.rank-R-of-W.safetensors) and rank 0 an index "
             "(step-N.safetensors), nothing gathered: for models too large for one rank; --resume reads them back "
             "into any --zero stage and world size"},
    {.name = "resume", .metavar = "DIR|FILE|auto", .kind = DP_OPTION_TEXT, FIELD(resume), .file = DP_FILE_READ,
     .note = "none", .group = DP_GROUP_CHECKPOINTS, .programs = TRAIN,
     .applies = {{.when = "auto", .to = {GIVEN("checkpoint-dir")}, .why = "it continues from the newest checkpoint there"},
                 TRAINING_RUN},
     .help = "continue from a checkpoint (the newest in DIR); bit-exact with the same world size and algorithm. auto: "
             "the newest complete checkpoint in --checkpoint-dir (one whose checksum or shards fail is passed over), or "
             "a fresh start when there is none: the same command line starts and requeues a job"},

    /* output */
    {.name = "log-every", .metavar = "K", .kind = DP_OPTION_LONG, FIELD(log_every), .range = {.min = 0},
     .fallback = "50", .group = DP_GROUP_OUTPUT, .programs = TRAIN,
     .help = "print a progress line every K optimizer steps (0: only per-epoch lines)"},
    {.name = "quiet", .kind = DP_OPTION_FLAG, FIELD(quiet), .group = DP_GROUP_OUTPUT, .programs = TRAIN | PREDICT,
     .help = "print only errors and the final summary"},
    {.name = "trace", .metavar = "FILE.json", .kind = DP_OPTION_TEXT, FIELD(trace_path), .note = "none",
     .group = DP_GROUP_OUTPUT, .programs = TRAIN, .applies = {TRAINING_RUN}, .file = DP_FILE_WRITTEN,
     .help = "the timeline: every rank's module passes, collectives, gathers and updates as Chrome trace JSON "
             "(Perfetto, chrome://tracing), written by rank 0 at the end"},
    {.name = "metrics", .metavar = "FILE.jsonl", .kind = DP_OPTION_TEXT, FIELD(metrics_path), .note = "none",
     .group = DP_GROUP_OUTPUT, .programs = TRAIN, .applies = {TRAINING_RUN}, .file = DP_FILE_WRITTEN,
     .help = "one JSON object per progress line (step, epoch, loss, samples/s, the time split, lr) and, with "
             "--average-every, per averaging (its divergence), for plotting (scripts/plot-metrics.sh)"},
    {.name = "tensorboard", .metavar = "DIR", .kind = DP_OPTION_TEXT, FIELD(tensorboard_dir), .note = "none",
     .group = DP_GROUP_OUTPUT, .programs = TRAIN, .applies = {TRAINING_RUN},
     .help = "TensorBoard's event file DIR/events.out.tfevents.TIME.HOST, written by rank 0 as training goes: loss, "
             "lr, grad norm, samples/s, the time split, memory, the slowest rank per progress line (--log-every), "
             "test loss and accuracy per evaluation (tensorboard --logdir DIR)"},
    {.name = "csv", .metavar = "FILE.csv", .kind = DP_OPTION_TEXT, FIELD(csv_path), .note = "none",
     .group = DP_GROUP_OUTPUT, .programs = TRAIN, .applies = {TRAINING_RUN}, .file = DP_FILE_WRITTEN,
     .help = "the progress lines as CSV rows with a header (the --metrics values), written by rank 0"},
    {.name = "output", .metavar = "FILE.npy", .kind = DP_OPTION_TEXT, FIELD(output_path), .file = DP_FILE_WRITTEN,
     .note = "none", .group = DP_GROUP_OUTPUT, .programs = TRAIN | PREDICT, .applies = {{.to = {GIVEN("predict")}}},
     .help = "predict: where the outputs go ([N, K] float32, written atomically)"},
    {.name = "predict-classes", .kind = DP_OPTION_FLAG, FIELD(predict_classes), .group = DP_GROUP_OUTPUT,
     .programs = TRAIN | PREDICT, .applies = {{.to = {GIVEN("predict")}}},
     .help = "predict: write each row's argmax class as int64 [N] instead of the outputs"},
    {.name = "help", .kind = DP_OPTION_HELP, .group = DP_GROUP_OUTPUT, .programs = EVERY,
     .help = "print this help and exit"},
    {.name = "version", .kind = DP_OPTION_VERSION, .group = DP_GROUP_OUTPUT, .programs = EVERY,
     .help = "print the version and exit"},

    /* reliability */
    {.name = "timeout", .metavar = "SECONDS", .kind = DP_OPTION_DOUBLE, FIELD(timeout), .fallback = "300",
     .group = DP_GROUP_RELIABILITY, .programs = TRAIN,
     .help = "watchdog: end the job when a collective has not completed in time (fractions allowed; 0 disables)"},
    {.name = "check-replicas", .metavar = "N", .kind = DP_OPTION_LONG, FIELD(check_replicas), .range = {.min = 0},
     .fallback = "0", .note = "off", .group = DP_GROUP_RELIABILITY, .programs = TRAIN,
     .help = "every N steps compare a hash of every rank's parameters; stop if any differ"},
    {.name = "on-nan", .metavar = "abort|skip", .kind = DP_OPTION_CHOICE, FIELD(skip_nonfinite), CHOICES(nan_policies),
     .fallback = "abort", .group = DP_GROUP_RELIABILITY, .programs = TRAIN,
     .help = "non-finite gradients: end the job, or skip that step's update"},
    {.name = "debug-corrupt", .metavar = "RANK:STEP", .kind = DP_OPTION_CUSTOM, .parse = parse_corruption,
     .fallback = "off", .group = DP_GROUP_RELIABILITY, .programs = TRAIN,
     .help = "testing aid: flip one parameter bit on RANK after STEP (to see --check-replicas work)"},
    {.name = "debug-straggle", .metavar = "RANK:MS", .kind = DP_OPTION_CUSTOM, .parse = parse_straggle,
     .fallback = "off", .group = DP_GROUP_RELIABILITY, .programs = TRAIN,
     .help = "testing aid: RANK sleeps MS ms while reading each step's rows (to see the slowest rank named)"},
    {.name = "preempt-signal", .metavar = "SIG,...|none", .kind = DP_OPTION_CUSTOM, .parse = parse_signals,
     .fallback = DP_PREEMPT_DEFAULT_SIGNALS, .group = DP_GROUP_RELIABILITY, .programs = TRAIN,
     .applies = {{.when = "!none", .to = {GIVEN("checkpoint-dir")},
                  .why = "a preempted run stops after writing its checkpoint there"},
                 TRAINING_RUN},
     .help = "with --checkpoint-dir: on any of these signals (USR1, USR2, TERM, INT, HUP) every rank finishes its "
             "step, the ranks agree on the step to stop after (one or two steps later), a checkpoint of it is written "
             "and dp_worker exits with status 75 (EX_TEMPFAIL: slurm/train.sbatch requeues the job)"},
};
const int dp_option_row_count = (int)(sizeof dp_option_rows / sizeof *dp_option_rows);
_Static_assert(sizeof dp_option_rows / sizeof *dp_option_rows <= DP_OPTION_ROWS_MAX, "dp_option_line holds a text per row");

const dp_option_program dp_option_programs[] = {
    {NULL, DP_PROGRAM_TRAIN, NULL, NULL,
     "Usage: mpirun -np W dp_worker [OPTION]...\n"
     "Trains a model data-parallel: every rank holds a replica, trains on its slice of each global batch, and\n"
     "gradients are summed across ranks before each update. The other programs, each with its own --help:\n"
     "  dp_worker predict INPUTS.npy ...  data-parallel inference of a trained model (--predict INPUTS.npy too)\n"
     "  dp_worker plan ...                each ZeRO stage's memory per rank, without training (--memory-plan too)\n"},
    {"predict", DP_PROGRAM_PREDICT, "predict", "INPUTS.npy",
     "Usage: mpirun -np W dp_worker predict INPUTS.npy --init MODEL.safetensors --output OUT.npy [OPTION]...\n"
     "Data-parallel inference: rank 0 reads float32 samples [N, D] or images [N, C, H, W], scatters whole blocks\n"
     "of rows over the ranks, every rank runs the --init model in eval mode, and rank 0 gathers the outputs and\n"
     "writes --output: the same bits on any number of ranks.\n"},
    {"plan", DP_PROGRAM_PLAN, "memory-plan", NULL,
     "Usage: dp_worker plan [OPTION]...\n"
     "Prints each ZeRO stage's memory per rank for the model (or --params N) over --world ranks, its activations\n"
     "for --batch, and what --data-on-device would hold of --data, without training.\n"},
};
const int dp_option_program_count = (int)(sizeof dp_option_programs / sizeof *dp_option_programs);

const dp_option_row *dp_option_find(const char *name)
{
    for (int i = 0; i < dp_option_row_count; i++)
        if (strcmp(dp_option_rows[i].name, name) == 0)
            return &dp_option_rows[i];
    return NULL;
}

const dp_option_program *dp_option_program_named(const char *name)
{
    for (int p = 0; p < dp_option_program_count; p++) {
        const char *known = dp_option_programs[p].name;
        if (known == name || (known && name && strcmp(known, name) == 0))
            return &dp_option_programs[p];
    }
    return NULL;
}
