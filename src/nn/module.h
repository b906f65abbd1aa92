/* Inside nn: what every module type provides, and the state a module instance keeps. */
#ifndef DP_NN_MODULE_H
#define DP_NN_MODULE_H

#include "dp/nn.h"

#include <stddef.h>

/* What every module instance has; what only one type needs lives in its own state. */
struct dp_module {
    const struct dp_module_type *type;
    dp_module_options options;
    int index;           /* position in the model */
    const char *name;    /* its tensors' prefix (the spec's: layers.{i}, conv1, layer1.0.conv1) */
    dp_dims in_shape, out_shape; /* one sample's, in and out */
    int in_width, out_width;      /* their element counts: the kernels see [rows, width] */
    int absorbs_next;    /* also applies the module after it (a Linear's ReLU) */
    int statistic_values; /* a normalisation layer: values each feature's statistics get per row (H x W) */
    int absorbed;        /* applied by the module before it, so it passes data through */
    size_t first_param, param_count; /* its slice of the flat parameter buffer */
    size_t first_buffer, first_counter;
    float *weights, *grads;          /* its parameters and gradients (model buffers) */
    const dp_param_pieces *param_pieces; /* the model's: where a module too large reads its parameters */
    float *buffers;                  /* its float32 buffers (model buffer) */
    int64_t *counters;               /* its int64 buffers (host) */
    float *out;                      /* its output [max_rows, out_width]; NULL when passing through */
    unsigned fused;                  /* which neighbouring passes its GEMMs apply (enum dp_fusion) */
    unsigned char *relu_mask;        /* DP_FUSE_MASK: its absorbed ReLU's mask from the last training forward */
    const struct dp_module *drelu_of; /* the layer whose ReLU mask its input-gradient GEMM applies, or NULL */
    int bf16_out;                    /* writes its output in bf16, read by the next Linear's GEMMs alone */
    int bf16_in;                     /* its input is that bf16 output: its GEMMs read it as it is */
    int bf16_dy;                     /* a bf16_out layer without bias: its output gradient arrives in bf16 */
    int bf16_dx;                     /* writes its input gradient in bf16 for such a layer */
    void *state;                     /* its type's own state (type->state_size bytes, zeroed) */
    /* A residual block's markers (residual.c): the shortcut and add point at the residual (and the add
     * at the shortcut), which keeps the block's state and points at the add it sizes it for. */
    struct dp_module *residual_open, *residual_split, *residual_close;
};

/* A module's part in a residual block: the markers that open it, split the body from the
 * shortcut and close it (residual.c); other modules have none. */
enum dp_residual_role { DP_RESIDUAL_NONE, DP_RESIDUAL_OPEN, DP_RESIDUAL_SPLIT, DP_RESIDUAL_CLOSE };

/* What a layer's GEMMs take into their epilogues (gemm_fused), decided by the model where the
 * backend runs them (sequential.c's plan_fusion). */
enum dp_fusion {
    DP_FUSE_FORWARD = 1u << 0,   /* the bias and the absorbed ReLU in the forward GEMM */
    DP_FUSE_MASK = 1u << 1,      /* ...writing the ReLU's mask when training: the layer after the
                                  * ReLU applies its backward (drelu_of), so this one does not */
    DP_FUSE_BIAS_GRAD = 1u << 2, /* the bias gradient in the weight-gradient GEMM */
};

/* Plans m's layers for its backend (layer_plan.c): their fused epilogues (dp_module.fused,
 * drelu_of) and bf16 outputs and output gradients (bf16_out, bf16_in, bf16_dy, bf16_dx). */
void dp_model_plan_layers(dp_model *m);

/* Reports [first, first + count) of module m's slice of the flat gradient buffer final. */
int dp_grad_pieces_ready(const dp_grad_pieces *pieces, const dp_module *m, size_t first, size_t count);
/* Where m writes that piece: pieces' place, else its own grads. */
int dp_grad_pieces_place(const dp_grad_pieces *pieces, const dp_module *m, size_t first, size_t count, float **data);
/* Whether m reads its parameters in pieces (dp_param_pieces), and one of them. */
int dp_module_fetches(const dp_module *m);
int dp_module_fetch(const dp_module *m, size_t first, size_t count, const float **data);
/* The block of m's weight columns [first, *end), all rows, packed (dp_param_pieces). */
int dp_module_fetch_columns(const dp_module *m, size_t first, size_t *end, const float **data);
/* A weight_rows type's rows (out_features) and floats per row, of its `params` parameters
 * under options o; 0 and 0 for other types. */
void dp_module_weight_rows(const struct dp_module_type *type, const dp_module_options *o, size_t params, size_t *row,
                           size_t *rows);
/* A weight_rows module's weight in blocks of rows for pieces of at most max_floats floats (0:
 * one block): the rows per block, how many blocks, and block j's rows [*first, *end) counted
 * from the last row, as the strategy cuts its units. */
size_t dp_module_rows_per_block(const dp_module *m, size_t max_floats);
size_t dp_module_row_blocks(const dp_module *m, size_t per);
void dp_module_block_rows(const dp_module *m, size_t per, size_t j, size_t *first, size_t *end);

typedef enum dp_arg_kind { DP_ARG_INT, DP_ARG_FLOAT, DP_ARG_BOOL } dp_arg_kind;

/* One option a module accepts in --model: name=value (the first also positionally). */
typedef struct dp_module_arg {
    const char *name;
    dp_arg_kind kind;
    size_t offset;      /* into dp_module_options */
    double min, max;    /* allowed range; max_open: max itself is not allowed */
    int max_open;
    const char *example; /* a value, where the option must be given (NULL: optional) */
    const char *meaning;
} dp_module_arg;

typedef struct dp_module_type {
    const char *name;
    const dp_module_arg *args;
    int nargs;
    dp_module_options defaults;
    size_t state_size;  /* bytes of per-instance state the type keeps in dp_module.state */
    int normalizes;     /* a normalisation layer: follows a layer, needs 2 rows per statistic */
    int structural;     /* its options decide which tensors exist (checkpoints must match them) */
    int spatial;        /* keeps images as images: a linear after it needs a flatten between */
    int needs_features; /* takes [F] features: refuses a spatial module's images unflattened */
    int weight_rows;    /* its parameters are a weight of out_features rows (Linear [out, in],
                         * Conv2d [out, C, kH, kW]) then its bias, read and reduced in blocks
                         * of rows under a ZeRO budget (dp_param_pieces), and for its input
                         * gradient read in blocks of whole columns */
    int fuses;          /* its GEMMs take epilogues (enum dp_fusion): a Linear */
    int residual;       /* enum dp_residual_role */
    /* Before a model exists: its parameters on one sample of shape *in, *out set (an unknown
     * input, [0], gives what it can); *overflow set when a count does not fit size_t (NULL:
     * none, and the shape passes). */
    size_t (*size)(const dp_module_options *o, const dp_dims *in, dp_dims *out, int *overflow);
    /* What the banner shows after its name, e.g. "(256)" (NULL: nothing). */
    void (*describe)(const dp_module *m, char *text, size_t size);
    /* The type whose following instance this one applies itself (NULL: none). */
    const struct dp_module_type *absorbs;
    /* Sets out_shape from in_shape; checks what the shapes allow (errors name spec). */
    int (*configure)(dp_module *m, const char *spec);
    /* Adds the module's tensors to the tables under prefix "layers.{i}". */
    int (*declare)(dp_module *m, dp_param_table *params, dp_param_table *buffers, const char *prefix);
    /* Its parameters [first, first + count) as initialised, into params[0, count): rng at the
     * draw for `first`, as init draws `draws` (0 or 1) numbers per parameter in order, so a
     * rank draws its shard of a model without the rest (NULL: no parameters). */
    void (*init_params)(const dp_module *m, dp_rng *rng, size_t first, size_t count, float *params);
    int draws;
    /* Initial values of its slices of the buffers (NULL: none). */
    void (*init_buffers)(const dp_module *m, float *buffers, int64_t *counters);
    /* Backend memory its GEMM operands' bf16 copies take for max_rows rows where the backend's
     * GEMMs read bf16 copies (NULL: it keeps none; --memory-plan adds them up). */
    size_t (*rounded_operand_bytes)(const dp_module *m, int max_rows);
    /* Working memory for max_rows rows. */
    int (*allocate)(dp_module *m, const dp_backend *be, int max_rows);
    int (*forward)(dp_module *m, const dp_nn_context *ctx, const float *x, int rows, const float **y);
    /* Parameter gradients from dy (which it may modify in place: a fused ReLU's mask), each
     * piece reported to dp_grad_pieces_ready as it is final (its error ends the pass). */
    int (*backward_params)(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy, int rows,
                           const dp_grad_pieces *pieces);
    /* The input gradient: into dx, or in place into dy; *dx_out says which. */
    int (*backward_input)(dp_module *m, const dp_nn_context *ctx, const float *x, float *dy,
                          float *dx, int rows, float **dx_out);
    void (*release)(dp_module *m, const dp_backend *be);
} dp_module_type;

#define DP_COUNT(array) ((int)(sizeof(array) / sizeof *(array)))

extern const dp_module_type dp_module_linear, dp_module_relu, dp_module_batchnorm,
    dp_module_dropout, dp_module_conv2d, dp_module_maxpool, dp_module_avgpool, dp_module_globalavgpool,
    dp_module_flatten, dp_module_residual, dp_module_shortcut, dp_module_add;

/* The deepest residual blocks nest inside one another. */
#define DP_RESIDUAL_DEPTH_MAX 8

/* The preset named `name` (presets.c), or NULL; its modules as --model text into text. */
const struct dp_model_preset *dp_model_preset_find(const char *name);
int dp_model_preset_write(const struct dp_model_preset *preset, char *text, size_t size);

/* The mask of a Dropout's last training forward (tests compare against it). */
const float *dp_dropout_mask(const dp_module *m);

/* A layer's tensors as nn.Linear and nn.Conv2d name them: prefix.weight of weight_shape
 * (decayed), then, with a bias, prefix.bias of weight_shape[0] values. */
int dp_module_declare_layer(dp_module *m, dp_param_table *params, const char *prefix, int ndim,
                            const int64_t *weight_shape);
/* PyTorch's default initialisation of count parameters of such a layer: each uniform in
 * +-1/sqrt(fan_in), one draw each. */
void dp_module_init_layer(dp_rng *rng, float *params, size_t count, size_t fan_in);

/* The window of a conv2d's or pooling's options o over one sample's image `in` (window.c): 0,
 * or -1 when `in` is not [C, H, W] or the kernel does not fit it padded. */
int dp_window_over(const dp_module_options *o, const dp_dims *in, dp_window *w);
/* The window of a configured module (its input fits: configure checked). */
dp_window dp_module_window(const dp_module *m);
/* configure's checks: m's input is an image (the error names spec, the module and the shape)... */
int dp_window_configure_image(const dp_module *m, const char *spec);
/* ...and its `noun` ("kernel", "window") fits; the errors name spec, the module and the shapes. */
int dp_window_configure(dp_module *m, const char *spec, const char *noun, dp_window *w);

/* Allocates count floats of backend memory of kind for what, or records DP_ENOMEM. */
int dp_module_alloc(const dp_backend *be, size_t count, dp_memory_kind kind, const char *what, float **out);

#endif
