#include "config.h"

#include "dp/options.h"

#include "dp/comm.h"
#include "dp/error.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum option_id {
    OPT_DATA = 256, OPT_TEST_DATA, OPT_LAYERS, OPT_LOSS, OPT_BATCH, OPT_ACCUM, OPT_LR, OPT_LR_SCHEDULE,
    OPT_MOMENTUM, OPT_WEIGHT_DECAY, OPT_EPOCHS, OPT_STEPS, OPT_DROP_LAST, OPT_SEED,
    OPT_ALLREDUCE, OPT_SEGMENT_BYTES, OPT_AUTO_TABLE, OPT_LOG_EVERY, OPT_QUIET, OPT_THREADS, OPT_SAVE, OPT_INIT,
    OPT_CHECKPOINT_DIR, OPT_CHECKPOINT_EVERY, OPT_KEEP, OPT_RESUME, OPT_TIMEOUT,
    OPT_CHECK_REPLICAS, OPT_ON_NAN, OPT_DEBUG_CORRUPT, OPT_DEVICE, OPT_SHARE_GPU, OPT_TF32,
    OPT_CUDA_AWARE, OPT_HELP,
    OPT_VERSION
};

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
     "MLP widths: input, hidden (ReLU) ..., output"},
    {{"loss", required_argument, NULL, OPT_LOSS}, "auto|xent|mse", "auto",
     "softmax cross-entropy for labels, MSE for float targets (auto picks from the data)"},
    {{"batch", required_argument, NULL, OPT_BATCH}, "B", "256",
     "global batch per micro-batch, split over the ranks (sizes differ by at most one)"},
    {{"accum", required_argument, NULL, OPT_ACCUM}, "M", "1",
     "micro-batches accumulated locally per optimizer step (one all-reduce per step)"},
    {{"lr", required_argument, NULL, OPT_LR}, "LR", "0.05", "SGD learning rate"},
    {{"lr-schedule", required_argument, NULL, OPT_LR_SCHEDULE}, "constant|cosine", "constant",
     "learning rate over training: constant, or cosine annealing to 0 by the last step"},
    {{"momentum", required_argument, NULL, OPT_MOMENTUM}, "MU", "0.9", "SGD momentum (0 disables)"},
    {{"weight-decay", required_argument, NULL, OPT_WEIGHT_DECAY}, "WD", "0",
     "L2 weight decay added to the gradient, as torch.optim.SGD"},
    {{"epochs", required_argument, NULL, OPT_EPOCHS}, "E", "10", "passes over the training data"},
    {{"steps", required_argument, NULL, OPT_STEPS}, "S", "0 (use --epochs)",
     "train exactly S optimizer steps, crossing epochs; overrides --epochs"},
    {{"drop-last", no_argument, NULL, OPT_DROP_LAST}, NULL, "off",
     "skip each epoch's last short batch (default: train on it, averaged over its own size)"},
    {{"seed", required_argument, NULL, OPT_SEED}, "N", "42",
     "seed for initialisation, shuffling and synthetic data"},
    {{"allreduce", required_argument, NULL, OPT_ALLREDUCE}, "NAME", "mpi",
     "gradient all-reduce algorithm"},
    {{"segment-bytes", required_argument, NULL, OPT_SEGMENT_BYTES}, "N", "1048576 (1 MiB)",
     "ring-pipelined: bytes per segment, rounded down to whole floats (at least 4)"},
    {{"auto-table", required_argument, NULL, OPT_AUTO_TABLE}, "FILE", "built-in",
     "--allreduce auto's table of algorithm per world and message size (dp_bench --tune writes one); rank 0 reads it for all"},
    {{"log-every", required_argument, NULL, OPT_LOG_EVERY}, "K", "50",
     "print a progress line every K optimizer steps (0: only per-epoch lines)"},
    {{"quiet", no_argument, NULL, OPT_QUIET}, NULL, "off", "print only errors and the final summary"},
    {{"threads", required_argument, NULL, OPT_THREADS}, "T", "1", "BLAS threads per rank"},
    {{"device", required_argument, NULL, OPT_DEVICE}, "cpu|cuda|auto", "auto",
     "where ranks compute; cuda binds GPU (local rank % GPUs); auto: cuda when every rank gets a GPU"},
    {{"share-gpu", no_argument, NULL, OPT_SHARE_GPU}, NULL, "off",
     "allow more ranks on a node than GPUs, taking turns on them (testing W ranks on one GPU)"},
    {{"tf32", no_argument, NULL, OPT_TF32}, NULL, "off (exact FP32)",
     "GPU GEMMs on TF32 tensor cores: inputs rounded to a 10-bit mantissa, FP32 accumulation"},
    {{"cuda-aware", required_argument, NULL, OPT_CUDA_AWARE}, "on|off|auto", "auto (ask MPI)",
     "hand MPI GPU memory for --allreduce mpi instead of staging gradients through host memory"},
    {{"save", required_argument, NULL, OPT_SAVE}, "FILE", "none",
     "write the final parameters as safetensors (PyTorch names and layouts)"},
    {{"init", required_argument, NULL, OPT_INIT}, "FILE", "none",
     "start from a safetensors file instead of random initialisation"},
    {{"checkpoint-dir", required_argument, NULL, OPT_CHECKPOINT_DIR}, "DIR", "none",
     "write the full training state to DIR/step-N.safetensors (atomically) at the end"},
    {{"checkpoint-every", required_argument, NULL, OPT_CHECKPOINT_EVERY}, "N", "0 (end only)",
     "also checkpoint every N optimizer steps"},
    {{"keep", required_argument, NULL, OPT_KEEP}, "K", "3", "checkpoints kept in --checkpoint-dir"},
    {{"resume", required_argument, NULL, OPT_RESUME}, "DIR|FILE", "none",
     "continue from a checkpoint (the newest in DIR); bit-exact with the same world size and algorithm"},
    {{"timeout", required_argument, NULL, OPT_TIMEOUT}, "SECONDS", "300",
     "watchdog: end the job when a collective has not completed in time (0 disables)"},
    {{"check-replicas", required_argument, NULL, OPT_CHECK_REPLICAS}, "N", "0 (off)",
     "every N steps compare a hash of every rank's parameters; stop if any differ"},
    {{"on-nan", required_argument, NULL, OPT_ON_NAN}, "abort|skip", "abort",
     "non-finite gradients: end the job, or skip that step's update"},
    {{"debug-corrupt", required_argument, NULL, OPT_DEBUG_CORRUPT}, "RANK:STEP", "off",
     "testing aid: flip one parameter bit on RANK after STEP (to see --check-replicas work)"},
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
    o->lr = 0.05f;
    o->momentum = 0.9f;
    o->epochs = 10;
    o->seed = 42;
    strcpy(o->allreduce, "mpi");
    o->segment_bytes = (long)DP_SEGMENT_BYTES_DEFAULT;
    o->log_every = 50;
    o->threads = 1;
    o->keep = 3;
    o->timeout = 300.0;
    o->corrupt_rank = -1;
    o->device = DP_DEVICE_AUTO;
    o->cuda_aware = DP_CUDA_AWARE_AUTO;
}

void dp_options_print_help(FILE *out)
{
    fprintf(out, "Usage: mpirun -np W dp_worker [OPTION]...\n"
                 "Trains an MLP data-parallel: every rank holds a replica, trains on its slice of\n"
                 "each global batch, and gradients are summed across ranks before each update.\n\n");
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
    fprintf(out, "\nAll-reduce algorithms: %s\n", dp_comm_algorithm_names());
    if (*dp_comm_gpu_algorithm_names())
        fprintf(out, "On GPU memory only (--device cuda): %s\n", dp_comm_gpu_algorithm_names());
}

static int parse_long(const char *option, const char *text, long min, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < min)
        return dp_fail(DP_EINVAL, "--%s '%s': must be an integer >= %ld", option, text, min);
    *out = v;
    return 0;
}

static int parse_float(const char *option, const char *text, int positive, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(text, &end);
    if (end == text || *end || errno || !isfinite(v) || v < 0.0f || (positive && v == 0.0f))
        return dp_fail(DP_EINVAL, "--%s '%s': must be a finite number %s 0", option, text,
                       positive ? ">" : ">=");
    *out = v;
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

static int copy_text(const char *option, const char *text, char *dst, size_t size)
{
    if (!*text)
        return dp_fail(DP_EINVAL, "--%s: empty value", option);
    if (strlen(text) >= size)
        return dp_fail(DP_EINVAL, "--%s: value longer than %zu characters", option, size - 1);
    strcpy(dst, text);
    return 0;
}

/* Index of text in names, or an error listing them. */
static int parse_choice(const char *option, const char *text, const char *const *names, int count,
                        int *out)
{
    for (int i = 0; i < count; i++)
        if (strcmp(text, names[i]) == 0) {
            *out = i;
            return 0;
        }
    char valid[128] = "";
    for (int i = 0; i < count; i++)
        snprintf(valid + strlen(valid), sizeof valid - strlen(valid), "%s%s", i ? ", " : "", names[i]);
    return dp_fail(DP_EINVAL, "--%s '%s': must be one of %s", option, text, valid);
}

/* Applies one option's value; returns DP_OPTIONS_EXIT for --help/--version. */
static int apply_option(dp_options *o, int id, const char *name, const char *arg, FILE *out)
{
    static const char *const losses[] = {"auto", "xent", "mse"};
    static const char *const schedules[] = {"constant", "cosine"};
    static const char *const nan_policies[] = {"abort", "skip"};
    static const char *const devices[] = {"cpu", "cuda", "auto"};
    static const char *const cuda_aware_modes[] = {"auto", "on", "off"};
    long seed;
    int status, choice;
    switch (id) {
    case OPT_DATA: return copy_text(name, arg, o->data, sizeof o->data);
    case OPT_TEST_DATA: return copy_text(name, arg, o->test_data, sizeof o->test_data);
    case OPT_LAYERS: return copy_text(name, arg, o->layers_spec, sizeof o->layers_spec);
    case OPT_LOSS:
        status = parse_choice(name, arg, losses, 3, &choice);
        o->loss = (dp_loss_choice)choice;
        return status;
    case OPT_LR_SCHEDULE:
        status = parse_choice(name, arg, schedules, 2, &choice);
        o->lr_schedule = (dp_lr_schedule)choice;
        return status;
    case OPT_BATCH: return parse_long(name, arg, 1, &o->batch);
    case OPT_ACCUM: return parse_long(name, arg, 1, &o->accum);
    case OPT_LR: return parse_float(name, arg, 1, &o->lr);
    case OPT_MOMENTUM: return parse_float(name, arg, 0, &o->momentum);
    case OPT_WEIGHT_DECAY: return parse_float(name, arg, 0, &o->weight_decay);
    case OPT_EPOCHS: return parse_long(name, arg, 1, &o->epochs);
    case OPT_STEPS: return parse_long(name, arg, 0, &o->steps);
    case OPT_DROP_LAST: o->drop_last = 1; return 0;
    case OPT_SEED:
        status = parse_long(name, arg, 0, &seed);
        o->seed = (uint64_t)seed;
        return status;
    case OPT_ALLREDUCE: return copy_text(name, arg, o->allreduce, sizeof o->allreduce);
    case OPT_SEGMENT_BYTES: return parse_long(name, arg, (long)sizeof(float), &o->segment_bytes);
    case OPT_AUTO_TABLE: return copy_text(name, arg, o->auto_table, sizeof o->auto_table);
    case OPT_LOG_EVERY: return parse_long(name, arg, 0, &o->log_every);
    case OPT_QUIET: o->quiet = 1; return 0;
    case OPT_THREADS: {
        long threads;
        status = parse_long(name, arg, 1, &threads);
        o->threads = threads > 1024 ? 1024 : (int)threads;
        return status;
    }
    case OPT_SAVE: return copy_text(name, arg, o->save_path, sizeof o->save_path);
    case OPT_INIT: return copy_text(name, arg, o->init_path, sizeof o->init_path);
    case OPT_CHECKPOINT_DIR: return copy_text(name, arg, o->checkpoint_dir, sizeof o->checkpoint_dir);
    case OPT_CHECKPOINT_EVERY: return parse_long(name, arg, 0, &o->checkpoint_every);
    case OPT_KEEP: return parse_long(name, arg, 1, &o->keep);
    case OPT_RESUME: return copy_text(name, arg, o->resume, sizeof o->resume);
    case OPT_TIMEOUT: {
        float seconds;
        status = parse_float(name, arg, 0, &seconds);
        o->timeout = seconds;
        return status;
    }
    case OPT_CHECK_REPLICAS: return parse_long(name, arg, 0, &o->check_replicas);
    case OPT_ON_NAN:
        status = parse_choice(name, arg, nan_policies, 2, &choice);
        o->skip_nonfinite = choice;
        return status;
    case OPT_DEBUG_CORRUPT: return parse_corruption(arg, o);
    case OPT_DEVICE:
        status = parse_choice(name, arg, devices, 3, &choice);
        o->device = (dp_device)choice;
        return status;
    case OPT_SHARE_GPU: o->share_gpu = 1; return 0;
    case OPT_TF32: o->tf32 = 1; return 0;
    case OPT_CUDA_AWARE:
        status = parse_choice(name, arg, cuda_aware_modes, 3, &choice);
        o->cuda_aware = (dp_cuda_aware)choice;
        return status;
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

static int check_combination(dp_options *o, int world)
{
    int status = dp_mlp_parse_widths(o->layers_spec, o->widths, &o->nwidths);
    if (status)
        return status;
    if (o->batch < world)
        return dp_fail(DP_EINVAL, "--batch %ld is smaller than the world size %d: every rank needs at least one sample per batch",
                       o->batch, world);
    if (o->momentum >= 1.0f)
        return dp_fail(DP_EINVAL, "--momentum %g: must be below 1", o->momentum);
    if (o->init_path[0] && o->resume[0])
        return dp_fail(DP_EINVAL, "--init and --resume both give the starting point: use one");
    if (o->checkpoint_every && !o->checkpoint_dir[0])
        return dp_fail(DP_EINVAL, "--checkpoint-every %ld needs --checkpoint-dir", o->checkpoint_every);
    const char *gpu_only = o->tf32 ? "--tf32" : o->share_gpu ? "--share-gpu"
                         : o->cuda_aware == DP_CUDA_AWARE_ON ? "--cuda-aware on" : NULL;
    if (o->device == DP_DEVICE_CPU && gpu_only)
        return dp_fail(DP_EINVAL, "%s applies to GPUs, but --device is cpu", gpu_only);
    return 0;
}

int dp_options_parse(dp_options *o, int argc, char **argv, int world, FILE *out)
{
    struct option longopts[OPTION_COUNT + 1];
    for (size_t i = 0; i < OPTION_COUNT; i++)
        longopts[i] = option_docs[i].getopt;
    memset(&longopts[OPTION_COUNT], 0, sizeof longopts[OPTION_COUNT]);

    dp_options_defaults(o);
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
    }
    if (optind < argc)
        return dp_fail(DP_EINVAL, "'%s': unexpected argument (options start with --; see --help)", argv[optind]);
    return check_combination(o, world);
}
