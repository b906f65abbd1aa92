/* Modules and the sequential model: what `--model` and `--layers` build. A model is
 * PyTorch's nn.Sequential held in a `layers` attribute: module i owns the tensors
 * `layers.{i}.*`, its parameters lie back to back in one flat buffer (the gradients mirror
 * it), its buffers (running statistics) in another that is never all-reduced as a gradient.
 * Modules get everything else through dp_nn_context: the backend, the mode, where their rows
 * sit in the step (dropout masks) and, for SyncBatchNorm, a sum over ranks. nn knows no MPI. */
#ifndef DP_NN_H
#define DP_NN_H

#include "dp/backend.h"
#include "dp/params.h"
#include "dp/rng.h"

#include <stddef.h>
#include <stdint.h>

/* Modules after residual blocks are flattened (each block adds three markers): torchvision's
 * ResNet-152 has 518. */
#define DP_MODEL_MAX_MODULES 640
#define DP_MODEL_SPEC_MAX 1024
/* A module's tensor prefix ("layer4.1.downsample.0"), short enough for its longest tensor name
 * ("....num_batches_tracked") to fit DP_TENSOR_NAME_MAX. */
#define DP_MODULE_NAME_MAX 40

typedef enum dp_loss { DP_LOSS_XENT, DP_LOSS_MSE } dp_loss;

/* What a forward or backward pass needs besides its rows. */
typedef struct dp_nn_context {
    const dp_backend *be;
    int training;          /* batch statistics and dropout; 0: eval mode */
    int accumulate;        /* add into the gradients; 0 overwrites (a step's first micro-batch) */
    uint64_t seed;         /* the run's seed (dropout masks) */
    const uint64_t *step;  /* the step number in backend memory (dropout masks) */
    uint64_t first_sample; /* position of row 0 among the step's samples (dropout masks) */
    int keep_running;      /* 1: BatchNorm leaves its running statistics (--exact: a step's later shards) */
    /* Sums count doubles over every rank, in place (SyncBatchNorm); NULL: this process alone. */
    int (*sum_doubles)(void *arg, double *values, int count);
    void *sum_arg;
} dp_nn_context;

/* A module's settings as parsed from --model; each type reads its own fields. */
typedef struct dp_module_options {
    int out_features;   /* linear */
    int bias;           /* linear: 1 with a bias */
    float p;            /* dropout: drop probability */
    float momentum;     /* batchnorm: running statistics' momentum */
    float eps;          /* batchnorm */
    int sync;           /* batchnorm: statistics over every rank's rows (SyncBatchNorm) */
    int kernel;         /* conv2d, pools: the window's side */
    int stride;         /* conv2d, pools: the step between windows (pools: 0 means kernel) */
    int padding;        /* conv2d: zeros on each side; maxpool: -inf, avgpool: zeros counted */
    int relu;           /* residual: 1 applies ReLU to body + shortcut, as torchvision's blocks */
} dp_module_options;

struct dp_module_type;

typedef struct dp_module_spec {
    const struct dp_module_type *type;
    dp_module_options options;
    /* Its tensors' prefix: layers.{i} in order, {block}.body.{j} and {block}.shortcut.{j} inside a
     * residual block, or the label written before it ("conv1:conv2d(...)" names conv1.weight). */
    char name[DP_MODULE_NAME_MAX];
} dp_module_spec;

/* A model as written: --model "linear(256),relu,linear(10)", a preset ("resnet18"), or
 * --layers 784,256,10. A residual block "residual{body | shortcut}" is flattened into its
 * markers and modules: residual, the body, shortcut, the shortcut's modules, add. */
typedef struct dp_model_spec {
    char text[DP_MODEL_SPEC_MAX];
    int from_layers; /* --layers: tensor names count Linear layers only, as version 1's MLP */
    const struct dp_model_preset *preset; /* the preset text named (presets.c); NULL: written out */
    int classes;     /* a preset's output width, once known (dp_model_spec_set_classes); 0: not yet */
    int inputs;      /* --layers: the input width it declares; 0: taken from the data */
    int count;
    dp_module_spec modules[DP_MODEL_MAX_MODULES];
} dp_model_spec;

/* Parses --model; errors name the spec and the problem. */
int dp_model_spec_parse(const char *text, dp_model_spec *spec);
/* Parses --layers "784,256,10": Linear layers with ReLU between them. */
int dp_model_spec_from_layers(const char *text, dp_model_spec *spec);
/* Whether spec still needs the class count (a preset's last Linear takes it from the data, or a
 * checkpoint), and gives it: spec's outputs become `classes` wide. */
int dp_model_spec_needs_classes(const dp_model_spec *spec);
void dp_model_spec_set_classes(dp_model_spec *spec, int classes);
/* The presets --model accepts, for --help ("resnet, resnet18, ..."). */
const char *dp_model_preset_names(void);
/* Makes every BatchNorm a SyncBatchNorm (--sync-bn). */
void dp_model_spec_sync_batchnorm(dp_model_spec *spec);
/* The spec in one canonical line on `inputs` features: with structural, the modules and what
 * decides their tensors (what a checkpoint must match); else every other option (dropout p,
 * batchnorm momentum, eps and sync: what changes the arithmetic but not the tensors). */
void dp_model_spec_canonical(const dp_model_spec *spec, int inputs, int structural, char *text, size_t size);
/* The parameters of spec on one sample of shape *input ([0]: not known yet, so the first
 * layer's weights are left out) and its widest activation; *overflow is set when the count does
 * not fit size_t. For option checks before the data is read. */
size_t dp_model_spec_size(const dp_model_spec *spec, const dp_dims *input, int *widest, int *overflow);
/* A module's parameters, and the weight rows they start with (dp_model_module_rows). */
typedef struct dp_module_size {
    size_t params, row, rows;
} dp_module_size;
/* The same, and each module's sizes into sizes[i] (spec->count of them; may be NULL). */
size_t dp_model_spec_module_params(const dp_model_spec *spec, const dp_dims *input, dp_module_size *sizes, int *widest,
                                   int *overflow);
/* 1 when a module of spec takes images (conv2d, pooling): samples must come in its shape. */
int dp_model_spec_takes_images(const dp_model_spec *spec);
/* The shape one sample of `input` leaves the model in (what the loss compares with the targets),
 * before a model exists. A module whose output holds more values than a forward counts in an int
 * fails naming it and the shapes; a module that cannot take its input (a kernel larger than the
 * image) leaves *output features(0): building the model names that. */
int dp_model_spec_output(const dp_model_spec *spec, const dp_dims *input, dp_dims *output);
/* The module names --model accepts, for --help. */
const char *dp_model_module_names(void);

typedef struct dp_module dp_module;

/* Where backward reports a module's parameter gradients final, piece by piece: ready gets each
 * flat slice [offset, offset + count) of the gradient buffer as soon as it is final (the hook
 * where communication overlaps the rest of backward; a non-zero return ends the pass with that
 * status). The pieces of a module cover its slice exactly once; a Linear's weight gradient is
 * computed and reported in row blocks of at most max_floats floats, last rows first, so a
 * collective of a bucket cut inside it starts before the whole layer's backward ends (0: each
 * module's gradients in one piece). */
typedef struct dp_grad_pieces {
    size_t max_floats;
    int (*ready)(void *arg, size_t offset, size_t count); /* may be NULL */
    /* Where a piece is written (a ZeRO budget's gradient blocks); NULL: the module's grads. */
    int (*place)(void *arg, size_t offset, size_t count, float **data);
    void *arg;
} dp_grad_pieces;

/* Where a module larger than max_floats reads its parameters piece by piece (ZeRO-3 under a
 * budget): fetch makes the flat slice [offset, offset + count) readable at *data until the next
 * fetch. A Linear asks for blocks of whole weight rows counted from its last row, the bias on
 * its own, so the pieces are the strategy's units. max_floats 0: every module's parameters
 * are whole in its weights. A layer's input gradient (a Linear's dX, a Conv2d's dcol) reads
 * its weight in blocks of whole columns instead (each element's sum over the out-features in
 * one GEMM, as unsharded): fetch_columns makes the block of columns [first, *end) of the
 * weight starting at flat offset `offset` readable at *data, its rows packed (leading
 * dimension *end - first). */
typedef struct dp_param_pieces {
    size_t max_floats;
    int (*fetch)(void *arg, size_t offset, size_t count, const float **data);
    int (*fetch_columns)(void *arg, size_t offset, size_t first, size_t *end, const float **data);
    void *arg;
} dp_param_pieces;

/* Which flat buffers dp_model_create_owning allocates: a sharded strategy holds the rest. */
enum dp_model_owns {
    DP_MODEL_OWNS_WEIGHTS = 1u << 0,
    DP_MODEL_OWNS_GRADS = 1u << 1,
    DP_MODEL_OWNS_ALL = DP_MODEL_OWNS_WEIGHTS | DP_MODEL_OWNS_GRADS
};

typedef struct dp_model {
    const dp_backend *be;
    dp_model_spec spec;
    int count;
    dp_module *modules;
    dp_dims input_shape;      /* one sample's */
    int inputs, outputs;       /* elements of one sample in and out */
    int max_rows;              /* most rows one forward takes */
    dp_param_table params;     /* trainable: flat `weights`, mirrored by `grads` */
    dp_param_table buffers;    /* running statistics (float32) and counters (int64) */
    float *weights, *grads;    /* backend memory */
    float *buffer_values;      /* backend memory: the float32 buffers */
    int64_t *counters;         /* host memory: the int64 buffers */
    const float **inputs_of;   /* forward: each module's input, kept for backward */
    float *delta[2];           /* gradients w.r.t. activations, ping-pong */
    int batchnorms, sync_batchnorms;
    int statistic_values;      /* the least values a BatchNorm's feature gets per row (H x W; 1 for BatchNorm1d) */
    dp_param_pieces param_pieces; /* set by whoever shards the parameters (dp_model_set_param_pieces) */
} dp_model;

/* Builds spec on `inputs` features: checks widths, names every tensor, allocates in be's
 * memory for max_rows rows per forward. Errors name the spec and the module. */
int dp_model_create(dp_model *m, const dp_backend *be, const dp_model_spec *spec, int inputs,
                    int max_rows);
/* The same, allocating only the flat buffers of `owns` (enum dp_model_owns); weights or grads
 * not owned stay NULL, and whoever holds them points modules there (dp_model_bind). */
int dp_model_create_owning(dp_model *m, const dp_backend *be, const dp_model_spec *spec, const dp_dims *input,
                           int max_rows, unsigned owns);
void dp_model_free(dp_model *m);

/* Points module i at parameters and gradients laid out as its slice of the flat buffers
 * (NULL leaves that pointer as it is). */
void dp_model_bind(dp_model *m, int module, float *weights, float *grads);

/* Module i's slice [offset, offset + count) of the flat parameter buffer. */
void dp_model_module_params(const dp_model *m, int module, size_t *offset, size_t *count);
/* Whether module i's parameters start with *rows rows of *row floats that may be read and
 * reduced in blocks of whole rows (a Linear's weight); 0 rows: never cut. */
void dp_model_module_rows(const dp_model *m, int module, size_t *row, size_t *rows);

/* Backend memory m's Linears hold at --precision bf16 on a GPU for max_rows rows: each one's
 * bf16 copies of its input (none where it is the bf16 output of the Linear before), weight and
 * output gradient, rounded once per micro-batch for its three GEMMs (a layer reading its weight
 * in pieces, ZeRO-3's under a budget, holds none), and of its bias where its output is bf16. */
size_t dp_model_rounded_operand_bytes(const dp_model *m);
/* --memory-plan at --precision bf16: plans m (built on the CPU) as a GPU with every cuBLASLt
 * epilogue and bf16 outputs would, so dp_model_rounded_operand_bytes says what that GPU holds,
 * and returns the activation bytes its bf16 outputs save against m's FP32 ones. */
size_t dp_model_plan_bf16_on_gpu(dp_model *m);
/* Modules larger than pieces->max_floats read their parameters through it from now on. */
void dp_model_set_param_pieces(dp_model *m, const dp_param_pieces *pieces);

/* The initial values into host arrays laid out like the flat buffers, from seed: PyTorch's
 * defaults (Linear: uniform +-1/sqrt(fan_in), drawn in table order from one stream, so
 * --layers gives version 1's bytes; BatchNorm: weight 1, bias 0, running mean 0, variance 1). */
void dp_model_init(const dp_model *m, uint64_t seed, float *params, float *buffers, int64_t *counters);
/* The same for parameters [begin, end) of the flat buffer alone, into params[0, end - begin),
 * bit for bit dp_model_init's (the draws are counter-based: a ZeRO-3 rank draws its shard
 * alone), and the whole buffers and counters. */
void dp_model_init_slice(const dp_model *m, uint64_t seed, size_t begin, size_t end, float *params, float *buffers,
                         int64_t *counters);

/* Module i's forward of rows samples x (backend memory); *y gets its output. Every module
 * runs even for rows == 0, so each rank reaches the same collectives (SyncBatchNorm). */
int dp_model_forward_module(dp_model *m, int i, const dp_nn_context *ctx, const float *x, int rows,
                            const float **y);

/* Module i's backward from *dy (its output's gradient, which it may overwrite): its parameter
 * gradients into its grads (added or overwritten per ctx->accumulate), reported to pieces as
 * they are final, then *dy becomes its input's gradient (module 0 computes none). */
int dp_model_backward_module(dp_model *m, int i, const dp_nn_context *ctx, int rows,
                             const dp_grad_pieces *pieces, float **dy);

/* The whole model, module after module, with no strategy around it (tests, benchmarks). */
int dp_model_forward(dp_model *m, const dp_nn_context *ctx, const float *x, int rows,
                     const float **out);
/* Backward from dout [rows, outputs] (overwritten), pieces reported to `pieces` (may be NULL). */
int dp_model_backward(dp_model *m, const dp_nn_context *ctx, float *dout, int rows,
                      const dp_grad_pieces *pieces);

/* The loss of `out` (the last forward's output): its gradient into dout (NULL in evaluation),
 * the summed loss and correct count into totals (backend memory, see dp_backend.softmax_xent). */
void dp_model_loss(const dp_model *m, dp_loss loss, const float *out, const int32_t *labels,
                   const float *targets, int rows, float *dout, double *totals);

/* "layers.3 (linear)": module i's tensor prefix and type, for the timeline. */
void dp_model_module_name(const dp_model *m, int i, char *text, size_t size);

/* One line for the banner: "MLP 784,256,10" for --layers, else the modules with widths. */
void dp_model_describe(const dp_model *m, char *text, size_t size);

#endif
