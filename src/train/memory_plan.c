/* --memory-plan: each ZeRO stage's memory and communication per rank for a model (or any
 * --params count) over --world ranks, without training: the documents' table, with its
 * assumptions made a flag (--precision) and the places it differs from ours said. */
#include "dp/train.h"

#include "dp/data.h"
#include "dp/strategy.h"
#include "dp/error.h"
#include "dp/nn.h"
#include "dp/optim.h"
#include "dp/zero_plan.h"
#include "src/train/trainer.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct precision_bytes {
    const char *name;
    double param, grad, master; /* bytes per parameter; master: an FP32 copy kept with the state */
    const char *meaning;
} precision_bytes;

static const precision_bytes precisions[] = {
    [DP_PRECISION_FP32] = {"fp32", 4, 4, 0, "FP32 parameters and gradients, as dptrain trains"},
    [DP_PRECISION_TF32] = {"tf32", 4, 4, 0, "FP32 parameters and gradients, as dptrain trains (TF32 is the GEMMs' inputs)"},
    [DP_PRECISION_BF16] = {"bf16", 4, 4, 0, "FP32 parameters and gradients, as dptrain trains (bf16 is the GEMMs' inputs)"},
    [DP_PRECISION_FP16] = {"fp16", 2, 2, 0, "FP16 parameters and gradients, FP32 optimizer state, no FP32 master "
                                            "copy: the documents' assumption"},
    [DP_PRECISION_MIXED] = {"mixed", 2, 2, 4, "FP16 parameters and gradients, FP32 master copy and optimizer state: "
                                              "the ZeRO paper's mixed precision"},
};

/* The optimizer's state tensors per parameter, from the optimizer itself (over an empty range). */
static int state_tensors(const dp_options *o, int *count)
{
    dp_param_table none = {0};
    dp_optimizer opt;
    dp_optimizer_config config = dp_options_optimizer(o);
    int status = dp_optimizer_init(&opt, dp_backend_cpu(), &config, &none, 0, 0);
    *count = status ? 0 : dp_optimizer_state_count(&opt);
    dp_optimizer_free(&opt);
    return status;
}

/* The model's input shape: --layers states its width; a --model takes the data's sample. */
static int model_inputs(const dp_options *o, dp_dims *inputs)
{
    if (o->model.from_layers) {
        *inputs = dp_dims_features(o->model.inputs);
        return 0;
    }
    dp_dataset data;
    int status = dp_dataset_open(o->data, 0, o->loss == DP_LOSS_CHOICE_MSE, o->seed, &data);
    if (status)
        return dp_fail_context(status, "--memory-plan: the input width of --model comes from --data %s", o->data);
    *inputs = data.sample;
    dp_dataset_free(&data);
    dp_dims output; /* every module's width fits an int, as training checks first */
    return dp_model_spec_output(&o->model, inputs, &output);
}

/* Parameters, the largest unit and bucket of the model as the trainer would plan them for a
 * stage (stage 2's and 3's budgets differ: stage 3 also holds gathered parameters). */
static int model_layout(const dp_options *o, int stage, dp_zero_plan_input *in)
{
    dp_dims inputs;
    int widest, overflow = 0, status = model_inputs(o, &inputs);
    size_t modules = (size_t)o->model.count + 1;
    dp_module_size *sizes = status ? NULL : calloc(modules, sizeof *sizes);
    size_t *arrays = sizes ? calloc(4 * modules, sizeof *arrays) : NULL;
    if (!status && !arrays)
        status = dp_fail(DP_ENOMEM, "out of memory for the memory plan");
    size_t *offsets = arrays, *counts = arrays + modules, *row = arrays + 2 * modules, *rows = arrays + 3 * modules;
    size_t at = 0;
    if (!status)
        in->params = dp_model_spec_module_params(&o->model, &inputs, sizes, &widest, &overflow);
    if (!status && overflow)
        status = dp_fail(DP_EINVAL, "--memory-plan: the model's parameter count overflows");
    int segments = 0;
    for (int i = 0; !status && i < o->model.count; at += sizes[i].params, i++)
        if (sizes[i].params) { /* a module with parameters is a segment of the flat buffer */
            offsets[segments] = at;
            counts[segments] = sizes[i].params;
            row[segments] = sizes[i].row;
            rows[segments++] = sizes[i].rows;
        }
    dp_strategy_layout layout = {.segments = segments, .offset = offsets, .count = counts, .row = row, .rows = rows,
                                 .total = in->params};
    /* Stage 2's or 3's buckets (whole units), as its working buffers hold them. */
    dp_strategy_choice zero;
    int status_choice = dp_strategy_choose(&zero, dp_strategy_name_for_zero(stage < 2 ? 3 : stage), "--memory-plan");
    dp_strategy_take_keys(&zero, &o->strategy); /* the run's budget, where its strategy has one */
    dp_strategy_config config = dp_strategy_default_config(&zero, !o->no_overlap, o->bucket_mb, in->params);
    int buckets = 0;
    status = status ? status : status_choice;
    if (!status)
        status = dp_strategy_plan_sizes(&layout, &config, in->world, &buckets, &in->bucket_floats, &in->unit_floats);
    in->grad_slots = config.overlap && buckets > 1 ? 2 : 1; /* as src/strategy/zero.c */
    in->gather_slots = config.overlap ? 2 : 1;
    in->live_bytes = dp_strategy_live_mb(&config, in->params, in->world) * (1 << 20);
    free(arrays);
    free(sizes);
    return status;
}

/* The activation memory one rank holds for its slice of --batch (the strategy's row group, as
 * the trainer sizes it; evaluation uses the same rows): the model built on the CPU for that
 * many rows and its allocations of that kind counted (module outputs, their gradients, conv2d's
 * lowered inputs, BatchNorm's normalised inputs), and the batch buffers; and on a GPU at bf16
 * what its bf16 outputs save of those and what its Linears add as bf16 operand copies (the CPU
 * makes neither). */
static int model_activations(const dp_options *o, int world, size_t *bytes, size_t *saved, size_t *rounded,
                             size_t *buffer_floats)
{
    dp_dims input;
    int status = model_inputs(o, &input);
    if (status)
        return status;
    int rows = (int)dp_strategy_group_rows(&o->strategy, (size_t)o->batch, (size_t)o->batch * (size_t)o->accum, world);
    size_t before = dp_memory_usage_now().bytes[DP_MEM_ACTIVATIONS];
    dp_model m;
    status = dp_model_create_owning(&m, dp_backend_cpu(), &o->model, &input, rows, DP_MODEL_OWNS_ALL);
    if (status)
        return dp_fail_context(status, "--memory-plan: the model's activations");
    *bytes = dp_memory_usage_now().bytes[DP_MEM_ACTIVATIONS] - before +
             dp_batches_rows_bytes((size_t)rows, (size_t)m.inputs, (size_t)m.outputs);
    *saved = dp_model_plan_bf16_on_gpu(&m);
    *rounded = dp_model_rounded_operand_bytes(&m);
    *buffer_floats = dp_params_floats(&m.buffers);
    dp_model_free(&m);
    return 0;
}

/* What --data-on-device would hold on each rank's GPU; data that cannot be opened is said, not fatal:
 * the rest of the plan needs none. */
static void print_data(const dp_options *o)
{
    dp_dataset train = {0}, test = {0};
    int has_test = 0;
    if (dp_train_open_datasets(o, &train, &test, &has_test)) {
        printf("data held on a GPU (--data-on-device): not planned: %s\n", dp_last_error());
    } else {
        char held[192];
        dp_resident_describe(&train, has_test ? &test : NULL, held, sizeof held);
        printf("data held on a GPU (--data-on-device), every rank alike: %s; auto holds it where that is at most "
               "1/%d of the GPU's memory\n", held, DP_RESIDENT_AUTO_SHARE);
        if (o->accum > 1 && o->cuda_graph != DP_GRAPH_OFF)
            printf("a CUDA graph's further micro-batches' rows on one rank's GPU, counted as data (--cuda-graph "
                   "with --accum %ld, each micro-batch's rows in its own buffers): %.2f MiB\n", o->accum,
                   (double)dp_batches_slot_bytes((int)o->accum, (size_t)o->batch, (size_t)train.dim,
                                                 (size_t)train.outputs) / (1 << 20));
    }
    dp_dataset_free(&train);
    dp_dataset_free(&test);
}

static void print_notes(const dp_zero_plan_input *in, int known_layout, double unit, const char *unit_name)
{
    printf("where these differ from the documents' table (70B parameters, 8 GPUs: DDP 840, ZeRO-1 350, ZeRO-2 210, "
           "ZeRO-3 105 GB):\n");
    printf("  - bytes per parameter: the documents count FP16 parameters and gradients and FP32 Adam moments with no "
           "FP32 master copy (--precision fp16, 12 bytes per parameter under DDP); the ZeRO paper keeps the master "
           "copy too (--precision mixed, 16); dptrain trains in FP32 (--precision fp32, 16 with AdamW)\n");
    printf("  - ZeRO-2: the documents' 210 GB is the parameters and the optimizer shard alone (3 bytes per parameter): "
           "it counts no gradient memory; a rank keeps its gradient shard (%.1f %s here) and the buckets in flight\n",
           in->grad_bytes * (double)in->params / in->world / unit, unit_name);
    if (known_layout)
        printf("  - working buffers (in neither the documents' nor the paper's table): stages 2 and 3 reduce %d "
               "bucket%s of the largest size at once, stage 3 also holds %d gathered module%s (--no-overlap: one "
               "of each, no prefetch)\n", in->grad_slots, in->grad_slots == 1 ? "" : "s", in->gather_slots,
               in->gather_slots == 1 ? "" : "s");
    printf("communication per rank per step, in the ZeRO paper's unit Psi (W-1)/W = %.4g %s sent (ring volumes): DDP's "
           "all-reduce 2 Psi; stage 1 reduce-scatter + all-gather of the updated shards 2 Psi (the documents count 3D: "
           "they all-reduce, then all-gather); stage 2 2 Psi, + 1 Psi per further micro-batch with --accum (each is "
           "reduced); stage 3 a gather in forward and in backward + the reduce-scatter, 3 Psi less the modules still "
           "held when backward starts. The paper: 2 / 2 / 2 / 3 Psi; the documents' columns sum to 2D / 3D / 2D / 5D\n",
           in->grad_bytes * (double)in->params * (in->world - 1) / in->world / unit, unit_name);
}

/* What the run's strategy keeps beyond the table (--exact's accumulator, local SGD's copies), on
 * either kind of backend, as the banner predicts it for the run. */
static void print_own_working(const dp_options *o, const dp_zero_plan_input *in, int states, size_t buffer_floats,
                              double unit, const char *unit_name)
{
    dp_strategy_sizes sizes = {.params = in->params, .buffer_floats = buffer_floats, .state_tensors = states,
                               .world = in->world};
    double host = dp_strategy_working_bytes(&o->strategy, &sizes);
    sizes.on_device = 1;
    double device = dp_strategy_working_bytes(&o->strategy, &sizes);
    if (host > 0.0 || device > 0.0)
        printf("working buffers of %s per rank, beyond the table's: %.1f %s (%.2f MiB) on a CPU rank, "
               "%.1f %s (%.2f MiB) in a GPU's memory\n", o->strategy.label, host / unit, unit_name,
               host / (1 << 20), device / unit, unit_name, device / (1 << 20));
}

int dp_memory_plan_print(const dp_options *o, int world)
{
    const precision_bytes *p = &precisions[o->precision];
    dp_zero_plan_input in = {.world = o->plan_world ? (int)o->plan_world : world, .rank = 0,
                             .param_bytes = p->param, .grad_bytes = p->grad};
    int states, status = state_tensors(o, &states);
    int known_layout = !o->plan_params;
    if (!status && known_layout)
        status = model_layout(o, 3, &in);
    if (status)
        return status;
    if (!known_layout)
        in.params = (size_t)o->plan_params;
    in.state_bytes = states * 4.0 + p->master;
    int large = (double)in.params * 16.0 >= 1e10;
    double unit = large ? 1e9 : 1e6;
    const char *unit_name = large ? "GB" : "MB";
    printf("memory plan: %zu parameters over %d ranks, %s, --precision %s: %g + %g bytes per parameter for "
           "parameters and gradients, %g for optimizer state (%s)\n", in.params, in.world,
           o->optimizer == DP_OPTIMIZER_ADAMW ? "AdamW" : "SGD", p->name, p->param, p->grad, in.state_bytes, p->meaning);
    printf("per rank (rank 0, the largest shard), %s (10^%d bytes):\n", unit_name, large ? 9 : 6);
    printf("  stage          parameters   gradients  optimizer      total   working buffers\n");
    for (int stage = 0; !status && stage < DP_ZERO_STAGES; stage++) {
        dp_zero_plan_input staged = in; /* stage 2's budget holds no gathered parameters */
        if (known_layout && stage == 2)
            status = model_layout(o, stage, &staged);
        dp_zero_plan plan = dp_zero_predict(&staged, stage);
        printf("  --zero %d%-6s %10.1f  %10.1f %10.1f %10.1f   ", stage, stage ? "" : " (DDP)", plan.params / unit,
               plan.grads / unit, plan.optimizer / unit, dp_zero_plan_model_bytes(&plan) / unit);
        if (stage < 2)
            printf("none\n");
        else if (known_layout && staged.live_bytes > 0.0)
            printf("%.1f (budget %.1f, --zero-live-mb)\n", plan.working / unit, staged.live_bytes / unit);
        else if (known_layout)
            printf("%.1f (whole modules: --zero-live-mb unlimited)\n", plan.working / unit);
        else
            printf("depends on the model's largest layer (give --model)\n");
    }
    if (status)
        return status;
    size_t activations = 0, saved = 0, rounded = 0, buffer_floats = 0;
    if (known_layout && (status = model_activations(o, in.world, &activations, &saved, &rounded, &buffer_floats)))
        return status;
    print_own_working(o, &in, states, buffer_floats, unit, unit_name);
    if (known_layout)
        printf("activations per rank, every stage alike (module outputs, their gradients, conv2d's lowered inputs, "
               "BatchNorm's normalised inputs, the batch): %.1f %s (%.2f MiB) for --batch %ld over %d ranks\n",
               activations / unit, unit_name, activations / (double)(1 << 20), o->batch, in.world);
    if (known_layout && o->precision == DP_PRECISION_BF16) {
        printf("activations per rank on a GPU at bf16 (a Linear's output that only the next Linear's GEMMs read is "
               "bf16; the logits, BatchNorm's and Dropout's stay FP32): %.1f %s\n", (activations - saved) / unit,
               unit_name);
        printf("bf16 GEMM operands per rank on a GPU, counted as activations (each Linear's input unless it is a "
               "bf16 activation, weight and output gradient rounded once per micro-batch; none for a layer ZeRO-3 "
               "fetches in pieces): %.1f %s\n", rounded / unit, unit_name);
    }
    print_data(o);
    print_notes(&in, known_layout, unit, unit_name);
    fflush(stdout);
    return 0;
}
