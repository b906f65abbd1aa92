#include "config.h"

#include "dp/options.h"

#include "dp/comm.h"
#include "dp/strategy.h"
#include "dp/error.h"
#include "src/train/option_checks.h"
#include "src/train/option_values.h"
#include "src/train/preempt.h"

#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

struct option_doc {
    struct option getopt;
    const char *metavar;
    const char *default_text;
    const char *help;
};

static const struct option_doc option_docs[] = {
    {{"data", required_argument, NULL, OPT_DATA}, "SPEC", "fashion-mnist",
     "training data: fashion-mnist, DIR of MNIST-named IDX files, FEATURES.npy,LABELS.npy, or synthetic:N,D,K"},
    {{"test-data", required_argument, NULL, OPT_TEST_DATA}, "SPEC", "test split of --data",
     "evaluation data after every epoch, same forms as --data"},
    {{"layers", required_argument, NULL, OPT_LAYERS}, "W0,W1,...", "784,256,256,10",
     "MLP widths: input, hidden (ReLU) ..., output; tensors layers.{k} = the k-th Linear"},
    {{"model", required_argument, NULL, OPT_MODEL}, "SPEC", "none (use --layers)",
     "a sequential model, e.g. \"linear(256),batchnorm,relu,dropout(0.2),linear(10)\" (input width "
     "from the data; options in parentheses, name=value for the optional ones); tensors layers.{i} "
     "with i the index in the list, as nn.Sequential"},
    {{"sync-bn", no_argument, NULL, OPT_SYNC_BN}, NULL, "off",
     "every batchnorm is a SyncBatchNorm: statistics over the whole global batch (W ranks equal 1 rank)"},
    {{"loss", required_argument, NULL, OPT_LOSS}, "auto|xent|mse", "auto",
     "softmax cross-entropy for labels, MSE for float targets (auto picks from the data)"},
    {{"batch", required_argument, NULL, OPT_BATCH}, "B", "256",
     "global batch per micro-batch, split over the ranks (sizes differ by at most one)"},
    {{"accum", required_argument, NULL, OPT_ACCUM}, "M", "1",
     "micro-batches accumulated locally per optimizer step (one all-reduce per step)"},
    {{"optimizer", required_argument, NULL, OPT_OPTIMIZER}, "sgd|adamw", "sgd",
     "torch.optim.SGD, or torch.optim.AdamW (decoupled weight decay)"},
    {{"lr", required_argument, NULL, OPT_LR}, "LR", "0.05 for sgd, 0.001 for adamw", "learning rate"},
    {{"lr-schedule", required_argument, NULL, OPT_LR_SCHEDULE}, "constant|cosine", "constant",
     "learning rate over training: constant, or cosine annealing to 0 by the last step"},
    {{"momentum", required_argument, NULL, OPT_MOMENTUM}, "MU", "0.9", "SGD momentum (0 disables)"},
    {{"weight-decay", required_argument, NULL, OPT_WEIGHT_DECAY}, "WD", "0 for sgd, 0.01 for adamw",
     "sgd: L2 added to the gradient of every parameter, as torch.optim.SGD; adamw: decoupled "
     "(p *= 1 - lr WD), on weight matrices only, not on biases or normalisation weights, as most "
     "recipes do (--decay-all: every parameter, like PyTorch's default)"},
    {{"betas", required_argument, NULL, OPT_BETAS}, "B1,B2", "0.9,0.999", "AdamW's moment decay rates"},
    {{"eps", required_argument, NULL, OPT_EPS}, "EPS", "1e-8", "AdamW's denominator term"},
    {{"decay-all", no_argument, NULL, OPT_DECAY_ALL}, NULL, "off",
     "adamw: decay biases and normalisation weights too (torch.optim.AdamW's default)"},
    {{"epochs", required_argument, NULL, OPT_EPOCHS}, "E", "10", "passes over the training data"},
    {{"steps", required_argument, NULL, OPT_STEPS}, "S", "0 (use --epochs)",
     "train exactly S optimizer steps, crossing epochs; overrides --epochs"},
    {{"drop-last", no_argument, NULL, OPT_DROP_LAST}, NULL, "off",
     "skip each epoch's last short batch (default: train on it, averaged over its own size)"},
    {{"seed", required_argument, NULL, OPT_SEED}, "N", "42",
     "seed for initialisation, shuffling and synthetic data"},
    {{"allreduce", required_argument, NULL, OPT_ALLREDUCE}, "NAME", "mpi",
     "gradient all-reduce algorithm"},
    {{"hier-inner", required_argument, NULL, OPT_HIER_INNER}, "NAME", "ring",
     "--allreduce hier: the all-reduce among one leader per node (ring, rhd, mpi, or another "
     "algorithm but hier); within each node ranks reduce to the leader and it broadcasts back"},
    {{"grad-dtype", required_argument, NULL, OPT_GRAD_DTYPE}, "fp32|bf16", "fp32",
     "what the gradients' reductions send and add: bf16 rounds each bucket to bfloat16 (nearest even), "
     "sums in FP32 rounding every partial sum to bf16, and widens the result back: half the bytes, "
     "about 2^-8 relative error per addition (docs/ALGORITHMS.md); every algorithm (nccl: ncclBfloat16, "
     "rounded on the GPU), buckets and ZeRO 1-3; not with --exact or --average-every"},
    {{"bucket-mb", required_argument, NULL, OPT_BUCKET_MB}, "MB|auto", "auto (the first bucket: 1)",
     "gradients are reduced in buckets of at most this many MiB, each started as soon as backward "
     "finishes it, so communication overlaps the rest of backward (PyTorch DDP's bucket_cap_mb); "
     "auto: 25 as DDP, or an eighth of the gradients when that is smaller (at least 1), so a "
     "small model still has buckets to overlap"},
    {{"no-overlap", no_argument, NULL, OPT_NO_OVERLAP}, NULL, "off",
     "reduce the whole gradient in one collective after backward instead (version 1's step); under "
     "--zero 2 and 3, each bucket as backward fills it and one gathered module at a time (the least memory)"},
    {{"progress-thread", required_argument, NULL, OPT_PROGRESS_THREAD}, "US|auto", "auto",
     "a thread that advances the buckets' collectives every US microseconds while backward "
     "computes, besides the calls between pieces of backward; 0: none. auto: 1000 when the job "
     "spans hosts (TCP moves only inside MPI calls), none on one host (shared memory needs no "
     "help); 50-100 beside a GPU (docs/ALGORITHMS.md, Progress)"},
    {{"strategy", required_argument, NULL, OPT_STRATEGY}, "NAME[:KEY=VALUE,...]", "ddp",
     "how the ranks' work is combined: ddp, zero-1, zero-2, zero-3[:live-mb=MB], exact[:shard=S], "
     "local-sgd[:every=K] (each with its keys below); --zero, --exact and --average-every name them too"},
    {{"zero", required_argument, NULL, OPT_ZERO}, "0|1|2|3", "0 (DDP)",
     "ZeRO stage: 1 shards the optimizer state over the ranks, 2 also the gradients (reduce-scattered "
     "bucket by bucket), 3 also the parameters (each module's gathered before its forward and "
     "backward); the banner shows each stage's memory per rank"},
    {{"zero-live-mb", required_argument, NULL, OPT_ZERO_LIVE_MB}, "MB|auto|unlimited", "auto",
     "--zero 2 and 3: the most MiB of gathered parameters and gradient blocks a rank holds at once "
     "(the working set; ZeRO-3's buckets in flight and gathered parameters, prefetch included); a "
     "Linear or Conv2d larger than its share is gathered and reduce-scattered in blocks of whole rows "
     "(output features or channels; in stage 3 its input gradient reads blocks of whole columns). auto: an "
     "eighth of the rank's sharded state (16 bytes per parameter over the ranks), at least 1 MiB; "
     "unlimited: whole modules"},
    {{"average-every", required_argument, NULL, OPT_AVERAGE_EVERY}, "K", "0 (off: gradients all-reduced every step)",
     "local SGD: no gradient all-reduce; each rank takes K optimizer steps on its own samples, then "
     "the parameters, optimizer state and BatchNorm statistics are averaged (weighted by samples) and "
     "the replicas' divergence before it is reported. Flawed by design: replicas drift apart between "
     "averagings (docs/STRATEGIES.md)"},
    {{"exact", no_argument, NULL, OPT_EXACT}, NULL, "off",
     "bitwise the same parameters, losses and checkpoints for every world size, algorithm and --accum "
     "(resume on another W too): the step is cut into shards of --exact-shard rows, each computed "
     "alone, their gradients summed exactly in fixed point and all-reduced as integers; BatchNorm "
     "normalises over each shard; 1 BLAS thread per rank unless --threads (docs/STRATEGIES.md)"},
    {{"exact-shard", required_argument, NULL, OPT_EXACT_SHARD}, "S", "32",
     "--exact: rows per shard, whatever the world size (a BatchNorm needs at least 2 in every shard)"},
    {{"max-memory-mb", required_argument, NULL, OPT_MAX_MEMORY_MB}, "MB", "none",
     "per-rank limit on backend memory (GPU memory, or host memory on the CPU), enforced by the "
     "allocation counter: a run that needs more stops at start-up naming what"},
    {{"memory-plan", no_argument, NULL, OPT_MEMORY_PLAN}, NULL, "off",
     "print each ZeRO stage's memory per rank for this model (or --params) and --world, and exit"},
    {{"params", required_argument, NULL, OPT_PARAMS}, "N", "the model's",
     "--memory-plan: the parameter count, e.g. 70e9"},
    {{"world", required_argument, NULL, OPT_WORLD}, "W", "this job's ranks", "--memory-plan: the ranks"},
    {{"precision", required_argument, NULL, OPT_PRECISION}, "fp32|tf32|bf16|fp16|mixed", "fp32",
     "GPU GEMMs' inputs, FP32 accumulation and FP32 weights, state, activations and losses throughout: fp32 "
     "exact, tf32 (tensor cores, 10-bit mantissa), bf16 (tensor cores, 7-bit mantissa; the CPU declines it). "
     "--memory-plan's bytes per parameter: fp32, tf32 and bf16 as dptrain trains (4 + 4 + optimizer state), "
     "fp16 as the documents' table (FP16 parameters and gradients, FP32 optimizer state, no master copy), "
     "mixed as the ZeRO paper (FP16 parameters and gradients, FP32 master copy and state)"},
    {{"trace", required_argument, NULL, OPT_TRACE}, "FILE.json", "none",
     "the timeline: every rank's module passes, collectives, gathers and updates as Chrome trace "
     "JSON (Perfetto, chrome://tracing), written by rank 0 at the end"},
    {{"metrics", required_argument, NULL, OPT_METRICS}, "FILE.jsonl", "none",
     "one JSON object per progress line (step, epoch, loss, samples/s, the time split, lr) and, with "
     "--average-every, per averaging (its divergence), for plotting (scripts/plot-metrics.sh)"},
    {{"segment-bytes", required_argument, NULL, OPT_SEGMENT_BYTES}, "N", "1048576 (1 MiB)",
     "ring-pipelined: bytes per segment, rounded down to whole floats (4 to 4294967296)"},
    {{"auto-table", required_argument, NULL, OPT_AUTO_TABLE}, "FILE", "built-in",
     "--allreduce auto's table of algorithm per world and message size (dp_bench --tune writes one); rank 0 reads it for all"},
    {{"log-every", required_argument, NULL, OPT_LOG_EVERY}, "K", "50",
     "print a progress line every K optimizer steps (0: only per-epoch lines)"},
    {{"quiet", no_argument, NULL, OPT_QUIET}, NULL, "off", "print only errors and the final summary"},
    {{"threads", required_argument, NULL, OPT_THREADS}, "T",
     "the cores this rank is bound to; unbound: the node's cores / its ranks; --predict: 1",
     "BLAS threads per rank, 1 to 1024 (scripts/launch.sh binds each rank to its own cores)"},
    {{"device", required_argument, NULL, OPT_DEVICE}, "cpu|cuda|auto", "auto",
     "where ranks compute; cuda gives each rank of a node its own GPU (matched by UUID); auto: cuda when every rank has one"},
    {{"share-gpu", no_argument, NULL, OPT_SHARE_GPU}, NULL, "off",
     "let ranks of a node share a GPU, taking turns on it (testing W ranks on one GPU)"},
    {{"tf32", no_argument, NULL, OPT_TF32}, NULL, "off (exact FP32)", "--precision tf32"},
    {{"cuda-aware", required_argument, NULL, OPT_CUDA_AWARE}, "on|off|auto", "auto (ask MPI)",
     "hand MPI GPU memory for --allreduce mpi instead of staging gradients through host memory"},
    {{"fuse", required_argument, NULL, OPT_FUSE}, "auto|off", "auto",
     "GPU: a Linear's bias, ReLU, ReLU backward and bias gradient in its GEMMs' cuBLASLt epilogues where "
     "cuBLASLt runs them (auto), or as kernels of their own (off, for A/B timing)"},
    {{"cuda-graph", required_argument, NULL, OPT_CUDA_GRAPH}, "auto|on|off", "auto",
     "replay full training steps from one captured CUDA graph (one launch instead of every kernel); auto: "
     "where no step needs the host inside it (one rank, DDP, no --on-nan skip or --trace; the banner says why "
     "not; --accum K holds K micro-batches' rows), on: an error where it cannot"},
    {{"data-on-device", required_argument, NULL, OPT_DATA_ON_DEVICE}, "auto|on|off", "auto",
     "GPU: hold the training and test sets in GPU memory, uploaded once, and gather each step's rows there "
     "(on; an error where they do not fit the GPU's free memory), read and upload every micro-batch's rows "
     "from the host (off), or on where they take at most a quarter of the GPU's memory (auto)"},
    {{"save", required_argument, NULL, OPT_SAVE}, "FILE", "none",
     "write the final parameters as safetensors (PyTorch names and layouts)"},
    {{"init", required_argument, NULL, OPT_INIT}, "FILE", "none",
     "start from a safetensors file instead of random initialisation"},
    {{"checkpoint-dir", required_argument, NULL, OPT_CHECKPOINT_DIR}, "DIR", "none",
     "write the full training state to DIR/step-N.safetensors (atomically) at the end; a DIR "
     "holding another run's checkpoints is refused"},
    {{"checkpoint-every", required_argument, NULL, OPT_CHECKPOINT_EVERY}, "N", "0 (end only)",
     "also checkpoint every N optimizer steps"},
    {{"keep", required_argument, NULL, OPT_KEEP}, "K", "3", "this run's checkpoints kept in --checkpoint-dir"},
    {{"checkpoint-shards", no_argument, NULL, OPT_CHECKPOINT_SHARDS}, NULL, "off (one gathered file)",
     "every rank writes its own shard (step-N.rank-R-of-W.safetensors) and rank 0 an index "
     "(step-N.safetensors), nothing gathered: for models too large for one rank; --resume reads "
     "them back into any --zero stage and world size"},
    {{"resume", required_argument, NULL, OPT_RESUME}, "DIR|FILE|auto", "none",
     "continue from a checkpoint (the newest in DIR); bit-exact with the same world size and algorithm. "
     "auto: the newest complete checkpoint in --checkpoint-dir (one whose checksum or shards fail is "
     "passed over), or a fresh start when there is none: the same command line starts and requeues a job"},
    {{"preempt-signal", required_argument, NULL, OPT_PREEMPT_SIGNAL}, "SIG,...|none", DP_PREEMPT_DEFAULT_SIGNALS,
     "with --checkpoint-dir: on any of these signals (USR1, USR2, TERM, INT, HUP) every rank finishes its "
     "step, the ranks agree on the step to stop after (one or two steps later), a checkpoint of it is "
     "written and dp_worker exits with status 75 (EX_TEMPFAIL: slurm/train.sbatch requeues the job)"},
    {{"timeout", required_argument, NULL, OPT_TIMEOUT}, "SECONDS", "300",
     "watchdog: end the job when a collective has not completed in time (fractions allowed; 0 disables)"},
    {{"check-replicas", required_argument, NULL, OPT_CHECK_REPLICAS}, "N", "0 (off)",
     "every N steps compare a hash of every rank's parameters; stop if any differ"},
    {{"on-nan", required_argument, NULL, OPT_ON_NAN}, "abort|skip", "abort",
     "non-finite gradients: end the job, or skip that step's update"},
    {{"debug-corrupt", required_argument, NULL, OPT_DEBUG_CORRUPT}, "RANK:STEP", "off",
     "testing aid: flip one parameter bit on RANK after STEP (to see --check-replicas work)"},
    {{"predict", required_argument, NULL, OPT_PREDICT}, "FILE.npy", "off (train)",
     "inference instead of training: rank 0 reads float32 [N, D] inputs, scatters rows over the "
     "ranks, every rank runs the --init model in eval mode, rank 0 gathers and writes --output"},
    {{"output", required_argument, NULL, OPT_OUTPUT}, "FILE.npy", "none",
     "--predict: where the outputs go ([N, K] float32, written atomically)"},
    {{"predict-classes", no_argument, NULL, OPT_PREDICT_CLASSES}, NULL, "off",
     "--predict: write each row's argmax class as int64 [N] instead of the outputs"},
    {{"help", no_argument, NULL, OPT_HELP}, NULL, NULL, "print this help and exit"},
    {{"version", no_argument, NULL, OPT_VERSION}, NULL, NULL, "print the version and exit"},
};
#define OPTION_COUNT (sizeof option_docs / sizeof option_docs[0])

void dp_options_defaults(dp_options *o)
{
    memset(o, 0, sizeof *o);
    strcpy(o->data, "fashion-mnist");
    strcpy(o->layers_spec, "784,256,256,10");
    o->loss = DP_LOSS_AUTO;
    o->batch = 256;
    o->accum = 1;
    o->optimizer = DP_OPTIMIZER_SGD;
    o->lr = 0.05f;
    o->momentum = 0.9f;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->epochs = 10;
    o->seed = 42;
    strcpy(o->allreduce, "mpi");
    strcpy(o->hier_inner, "ring");
    o->segment_bytes = (long)DP_SEGMENT_BYTES_DEFAULT;
    o->bucket_mb = 0.0; /* auto */
    o->progress_us = -1; /* auto */
    dp_strategy_choice_default(&o->strategy);
    o->log_every = 50;
    o->keep = 3;
    dp_preempt_parse_signals("--preempt-signal", DP_PREEMPT_DEFAULT_SIGNALS, &o->preempt_signals);
    o->timeout = 300.0;
    o->corrupt_rank = -1;
    o->device = DP_DEVICE_AUTO;
    o->cuda_aware = DP_CUDA_AWARE_AUTO;
    o->cuda_graph = DP_GRAPH_AUTO;
    o->data_on_device = DP_DATA_AUTO;
}

void dp_options_print_help(FILE *out)
{
    fprintf(out, "Usage: mpirun -np W dp_worker [OPTION]...\n"
                 "Trains a model data-parallel: every rank holds a replica, trains on its slice of\n"
                 "each global batch, and gradients are summed across ranks before each update.\n"
                 "With --predict, runs data-parallel inference instead.\n\n");
    for (size_t i = 0; i < OPTION_COUNT; i++) {
        const struct option_doc *d = &option_docs[i];
        char flag[64];
        snprintf(flag, sizeof flag, "--%s%s%s", d->getopt.name, d->metavar ? " " : "",
                 d->metavar ? d->metavar : "");
        fprintf(out, "  %-28s %s", flag, d->help);
        if (d->default_text)
            fprintf(out, " [default: %s]", d->default_text);
        fputc('\n', out);
    }
    fprintf(out, "\n--model modules: linear(OUT, bias=1), relu, batchnorm(momentum=0.1, eps=1e-5, sync=0), "
                 "dropout(P=0.5), conv2d(OUT, K, stride=1, padding=0, bias=1), maxpool(K, stride=K), "
                 "avgpool(K, stride=K), flatten\n"
                 "Images ([N, 1, 28, 28] IDX, [N, C, H, W] .npy) go through conv2d and pooling; a linear after them "
                 "needs flatten (as nn.Flatten), a linear on the data itself flattens it. A CNN for Fashion-MNIST "
                 "(bench/RESULTS.md):\n  --model 'conv2d(32,3,padding=1,bias=0),batchnorm,relu,maxpool(2),"
                 "conv2d(64,3,padding=1,bias=0),batchnorm,relu,maxpool(2),flatten,linear(128),relu,dropout(0.3),"
                 "linear(10)' --sync-bn --optimizer adamw --lr 0.002 --weight-decay 0.05 --lr-schedule cosine --epochs 15 "
                 "--batch 128\n");
    fprintf(out, "\nStrategies (--strategy NAME[:KEY=VALUE,...]):\n");
    dp_strategy_print_help(out);
    fprintf(out, "All-reduce algorithms: %s\n", dp_comm_algorithm_names());
    if (*dp_comm_gpu_algorithm_names())
        fprintf(out, "On GPU memory only (--device cuda): %s\n", dp_comm_gpu_algorithm_names());
}

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

static int parse_corruption(const char *text, dp_options *o)
{
    int rank, consumed = 0;
    long step;
    if (sscanf(text, "%d:%ld%n", &rank, &step, &consumed) != 2 || text[consumed] || rank < 0 || step < 1)
        return dp_fail(DP_EINVAL, "--debug-corrupt '%s': must be RANK:STEP with RANK >= 0 and STEP >= 1", text);
    o->corrupt_rank = rank;
    o->corrupt_step = step;
    return 0;
}

const char *const dp_precision_names[DP_PRECISIONS] = {[DP_PRECISION_FP32] = "fp32", [DP_PRECISION_TF32] = "tf32",
                                                      [DP_PRECISION_BF16] = "bf16", [DP_PRECISION_FP16] = "fp16",
                                                      [DP_PRECISION_MIXED] = "mixed"};

static const char *const losses[] = {[DP_LOSS_AUTO] = "auto", [DP_LOSS_CHOICE_XENT] = "xent",
                                     [DP_LOSS_CHOICE_MSE] = "mse"};
static const char *const schedules[] = {[DP_LR_CONSTANT] = "constant", [DP_LR_COSINE] = "cosine"};
static const char *const nan_policies[] = {"abort", "skip"}; /* skip_nonfinite */
static const char *const devices[] = {[DP_DEVICE_CPU] = "cpu", [DP_DEVICE_CUDA] = "cuda", [DP_DEVICE_AUTO] = "auto"};
static const char *const cuda_aware_modes[] = {[DP_CUDA_AWARE_AUTO] = "auto", [DP_CUDA_AWARE_ON] = "on",
                                               [DP_CUDA_AWARE_OFF] = "off"};
static const char *const fuse_modes[] = {"auto", "off"}; /* unfused */
static const char *const graph_modes[] = {[DP_GRAPH_OFF] = "off", [DP_GRAPH_ON] = "on", [DP_GRAPH_AUTO] = "auto"};
static const char *const placements[] = {[DP_DATA_OFF] = "off", [DP_DATA_ON] = "on", [DP_DATA_AUTO] = "auto"};
static const char *const optimizers[] = {[DP_OPTIMIZER_SGD] = "sgd", [DP_OPTIMIZER_ADAMW] = "adamw"};

/* An option that names one of a list: the name's index is stored in an int-sized field. */
struct choice_option {
    const char *const *names; /* NULL: the option is not a choice */
    int count;
    size_t field; /* offsetof the field in dp_options */
};

#define CHOICE(id, list, member) [id] = {list, (int)(sizeof list / sizeof *list), offsetof(dp_options, member)}
static const struct choice_option choice_options[OPT_VERSION + 1] = {
    CHOICE(OPT_LOSS, losses, loss),
    CHOICE(OPT_OPTIMIZER, optimizers, optimizer),
    CHOICE(OPT_LR_SCHEDULE, schedules, lr_schedule),
    CHOICE(OPT_PRECISION, dp_precision_names, precision),
    CHOICE(OPT_ON_NAN, nan_policies, skip_nonfinite),
    CHOICE(OPT_DEVICE, devices, device),
    CHOICE(OPT_CUDA_AWARE, cuda_aware_modes, cuda_aware),
    CHOICE(OPT_FUSE, fuse_modes, unfused),
    CHOICE(OPT_CUDA_GRAPH, graph_modes, cuda_graph),
    CHOICE(OPT_DATA_ON_DEVICE, placements, data_on_device),
};
#undef CHOICE
/* A choice is copied into its field as an int's bytes: an enum field has int's size, and a
 * non-negative value has the same bytes in int and unsigned int, whichever the enum is. */
_Static_assert(sizeof(dp_loss_choice) == sizeof(int) && sizeof(dp_optimizer_kind) == sizeof(int) &&
                   sizeof(dp_lr_schedule) == sizeof(int) && sizeof(dp_precision) == sizeof(int) &&
                   sizeof(dp_device) == sizeof(int) && sizeof(dp_cuda_aware) == sizeof(int) &&
                   sizeof(dp_graph_mode) == sizeof(int) && sizeof(dp_data_placement) == sizeof(int),
               "choice_options stores every choice as an int");

/* A choice option's value: the index of its name, into its field. */
static int apply_choice(dp_options *o, const struct choice_option *c, const char *name, const char *arg)
{
    int choice, status = dp_option_choice(name, arg, c->names, c->count, &choice);
    if (!status)
        memcpy((char *)o + c->field, &choice, sizeof choice);
    return status;
}

/* Applies one option's value; returns DP_OPTIONS_EXIT for --help/--version. */
static int apply_option(dp_options *o, int id, const char *name, const char *arg, FILE *out)
{
    if (choice_options[id].names)
        return apply_choice(o, &choice_options[id], name, arg);
    int status;
    switch (id) {
    case OPT_DATA: return dp_option_text(name, arg, o->data, sizeof o->data);
    case OPT_TEST_DATA: return dp_option_text(name, arg, o->test_data, sizeof o->test_data);
    case OPT_LAYERS: return dp_option_text(name, arg, o->layers_spec, sizeof o->layers_spec);
    case OPT_MODEL: return dp_option_text(name, arg, o->model_text, sizeof o->model_text);
    case OPT_SYNC_BN: o->sync_bn = 1; return 0;
    case OPT_BETAS: return parse_betas(arg, o);
    case OPT_EPS: return dp_option_float(name, arg, 1, &o->eps);
    case OPT_DECAY_ALL: o->decay_all = 1; return 0;
    case OPT_PREDICT: return dp_option_text(name, arg, o->predict_path, sizeof o->predict_path);
    case OPT_OUTPUT: return dp_option_text(name, arg, o->output_path, sizeof o->output_path);
    case OPT_PREDICT_CLASSES: o->predict_classes = 1; return 0;
    case OPT_BUCKET_MB:
        if (strcmp(arg, "auto") == 0) {
            o->bucket_mb = 0.0;
            return 0;
        }
        return dp_option_mib(name, arg, DP_STRATEGY_MIN_BUCKET_BYTES, "the smallest bucket: each bucket is a "
                             "collective of its own, and smaller ones only add their latency", &o->bucket_mb);
    case OPT_NO_OVERLAP: o->no_overlap = 1; return 0;
    case OPT_PROGRESS_THREAD:
        if (strcmp(arg, "auto") == 0) {
            o->progress_us = -1;
            return 0;
        }
        return dp_option_long(name, arg, 0, &o->progress_us);
    /* What names a strategy, and its keys, compose once every option is read. */
    case OPT_ZERO: case OPT_STRATEGY: case OPT_ZERO_LIVE_MB: case OPT_AVERAGE_EVERY: case OPT_EXACT: case OPT_EXACT_SHARD: return 0;
    case OPT_MAX_MEMORY_MB:
        return dp_option_mib(name, arg, 1, "the least a limit can be (0 would mean no limit)", &o->max_memory_mb);
    case OPT_CHECKPOINT_SHARDS: o->checkpoint_shards = 1; return 0;
    case OPT_MEMORY_PLAN: o->memory_plan = 1; return 0;
    case OPT_PARAMS: return dp_option_count(name, arg, &o->plan_params);
    case OPT_WORLD: return dp_option_long(name, arg, 1, &o->plan_world);
    case OPT_TRACE: return dp_option_text(name, arg, o->trace_path, sizeof o->trace_path);
    case OPT_METRICS: return dp_option_text(name, arg, o->metrics_path, sizeof o->metrics_path);
    case OPT_BATCH: return dp_option_long(name, arg, 1, &o->batch);
    case OPT_ACCUM: return dp_option_long(name, arg, 1, &o->accum);
    case OPT_LR: return dp_option_float(name, arg, 1, &o->lr);
    case OPT_MOMENTUM: return dp_option_float(name, arg, 0, &o->momentum);
    case OPT_WEIGHT_DECAY: return dp_option_float(name, arg, 0, &o->weight_decay);
    case OPT_EPOCHS: return dp_option_long(name, arg, 1, &o->epochs);
    case OPT_STEPS: return dp_option_long(name, arg, 0, &o->steps);
    case OPT_DROP_LAST: o->drop_last = 1; return 0;
    case OPT_SEED: return dp_option_seed(name, arg, &o->seed);
    case OPT_ALLREDUCE: return dp_option_text(name, arg, o->allreduce, sizeof o->allreduce);
    case OPT_HIER_INNER: return dp_option_text(name, arg, o->hier_inner, sizeof o->hier_inner);
    case OPT_GRAD_DTYPE: return dp_grad_dtype_parse(arg, &o->grad_dtype);
    case OPT_SEGMENT_BYTES: return dp_option_long(name, arg, (long)sizeof(float), &o->segment_bytes);
    case OPT_AUTO_TABLE: return dp_option_text(name, arg, o->auto_table, sizeof o->auto_table);
    case OPT_LOG_EVERY: return dp_option_long(name, arg, 0, &o->log_every);
    case OPT_QUIET: o->quiet = 1; return 0;
    case OPT_THREADS: {
        long threads;
        status = dp_option_long(name, arg, 1, &threads);
        o->threads = (int)threads;
        return status;
    }
    case OPT_SAVE: return dp_option_text(name, arg, o->save_path, sizeof o->save_path);
    case OPT_INIT: return dp_option_text(name, arg, o->init_path, sizeof o->init_path);
    case OPT_CHECKPOINT_DIR: return dp_option_text(name, arg, o->checkpoint_dir, sizeof o->checkpoint_dir);
    case OPT_CHECKPOINT_EVERY: return dp_option_long(name, arg, 0, &o->checkpoint_every);
    case OPT_KEEP: return dp_option_long(name, arg, 1, &o->keep);
    case OPT_RESUME: return dp_option_text(name, arg, o->resume, sizeof o->resume);
    case OPT_PREEMPT_SIGNAL: return dp_preempt_parse_signals("--preempt-signal", arg, &o->preempt_signals);
    case OPT_TIMEOUT: {
        float seconds;
        status = dp_option_float(name, arg, 0, &seconds);
        o->timeout = seconds;
        return status;
    }
    case OPT_CHECK_REPLICAS: return dp_option_long(name, arg, 0, &o->check_replicas);
    case OPT_DEBUG_CORRUPT: return parse_corruption(arg, o);
    case OPT_SHARE_GPU: o->share_gpu = 1; return 0;
    case OPT_TF32: o->precision = DP_PRECISION_TF32; return 0;
    case OPT_HELP:
        if (out)
            dp_options_print_help(out);
        return DP_OPTIONS_EXIT;
    default:
        if (out)
            fprintf(out, "dp_worker (%s) %s\n", PACKAGE_NAME, PACKAGE_VERSION);
        return DP_OPTIONS_EXIT;
    }
}

int dp_options_parse(dp_options *o, int argc, char **argv, int world, FILE *out)
{
    struct option longopts[OPTION_COUNT + 1];
    for (size_t i = 0; i < OPTION_COUNT; i++)
        longopts[i] = option_docs[i].getopt;
    memset(&longopts[OPTION_COUNT], 0, sizeof longopts[OPTION_COUNT]);

    dp_options_defaults(o);
    const char *seen[OPT_VERSION + 1] = {0}; /* each given option's name */
    const char *args[OPT_VERSION + 1] = {0}; /* and its text */
    opterr = 0; /* our own messages name the option; getopt's would print once per rank */
    optind = 0; /* GNU getopt: a full re-initialisation, so tests can parse repeatedly */
    for (;;) {
        int index = -1;
        int id = getopt_long(argc, argv, "", longopts, &index);
        if (id == -1)
            break;
        if (id == '?' || id == ':')
            return dp_fail(DP_EINVAL, "%s: %s (see --help)", argv[optind - 1],
                           id == ':' ? "missing value" : "unknown option or missing value");
        int status = apply_option(o, id, longopts[index].name, optarg, out);
        if (status)
            return status;
        seen[id] = longopts[index].name;
        args[id] = optarg;
    }
    if (optind < argc)
        return dp_fail(DP_EINVAL, "'%s': unexpected argument (options start with --; see --help)", argv[optind]);
    int status = dp_options_choose_strategy(o, seen, args);
    return status ? status : dp_options_check_combination(o, world, seen);
}

dp_optimizer_config dp_options_optimizer(const dp_options *o)
{
    return (dp_optimizer_config){.kind = o->optimizer, .momentum = o->momentum,
                                 .weight_decay = o->weight_decay, .beta1 = o->beta1, .beta2 = o->beta2,
                                 .eps = o->eps, .decay_all = o->decay_all};
}
