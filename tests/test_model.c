/* Modules and the sequential model: every module's gradients against finite differences of
 * an independent double-precision forward pass, the model specs and their errors, tensor
 * names, initialisation, dropout masks, running statistics and the gradient-ready hook. */
#include "dp/error.h"
#include "dp/nn.h"
#include "dp/rng.h"
#include "src/nn/module.h"
#include "tests/nn_reference.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 7, INPUTS = 5, MAX_WIDTH = 16 };

typedef struct fixture {
    dp_model m;
    float x[ROWS * INPUTS];
    int32_t labels[ROWS];
    float targets[ROWS * MAX_WIDTH];
    double *totals;
} fixture;

static void parse_spec(const char *text, dp_model_spec *spec)
{
    int status = strchr(text, '(') || strchr(text, 'r') ? dp_model_spec_parse(text, spec)
                                                         : dp_model_spec_from_layers(text, spec);
    ck_assert_msg(status == 0, "%s", dp_last_error());
}

static void make_fixture(fixture *f, const char *text)
{
    dp_model_spec spec;
    parse_spec(text, &spec);
    ck_assert_msg(dp_model_create(&f->m, dp_backend_cpu(), &spec, INPUTS, ROWS) == 0, "%s", dp_last_error());
    dp_model_init(&f->m, 11, f->m.weights, f->m.buffer_values, f->m.counters);
    dp_rng rng;
    dp_rng_seed(&rng, 99);
    /* Perturb BatchNorm's weight and bias away from 1 and 0, so their gradients matter. */
    for (size_t i = 0; i < dp_params_floats(&f->m.params); i++)
        f->m.weights[i] += 0.1f * (2.0f * dp_rng_uniform(&rng) - 1.0f);
    for (int i = 0; i < ROWS * INPUTS; i++)
        f->x[i] = 2.0f * dp_rng_uniform(&rng) - 1.0f;
    for (int r = 0; r < ROWS; r++)
        f->labels[r] = r % 3;
    for (int i = 0; i < ROWS * MAX_WIDTH; i++)
        f->targets[i] = dp_rng_uniform(&rng);
    f->totals = calloc(2, sizeof(double));
}

static void free_fixture(fixture *f)
{
    dp_model_free(&f->m);
    free(f->totals);
}

/* The step number the training contexts point at (CPU backend memory is host memory). */
static uint64_t step_number = 5;

static dp_nn_context train_ctx(int accumulate)
{
    step_number = 5;
    return (dp_nn_context){.be = dp_backend_cpu(), .training = 1, .accumulate = accumulate, .seed = 3,
                           .step = &step_number};
}

/* Forward, loss and backward, pieces reported to `pieces` (may be NULL); returns the summed loss. */
static double forward_backward_pieces(fixture *f, const float *x, const int32_t *labels, const float *targets,
                                      int rows, dp_loss loss, int accumulate, const dp_grad_pieces *pieces)
{
    dp_nn_context ctx = train_ctx(accumulate);
    const float *out;
    f->totals[0] = 0.0;
    ck_assert_int_eq(dp_model_forward(&f->m, &ctx, x, rows, &out), 0);
    dp_model_loss(&f->m, loss, out, labels, targets, rows, f->m.delta[0], f->totals);
    ck_assert_int_eq(dp_model_backward(&f->m, &ctx, f->m.delta[0], rows, pieces), 0);
    return f->totals[0];
}

static double forward_backward(fixture *f, const float *x, const int32_t *labels, const float *targets, int rows,
                               dp_loss loss, int accumulate)
{
    return forward_backward_pieces(f, x, labels, targets, rows, loss, accumulate, NULL);
}

/* --- the independent reference: the model's forward in double, module by module --- */

/* Training mode: the batch's mean and biased variance. */
static void batchnorm_ref(const dp_module *mod, const double *p, const double *in, double *out)
{
    int c = mod->in_width;
    for (int j = 0; j < c; j++) {
        double mean = 0.0, var = 0.0;
        for (int r = 0; r < ROWS; r++)
            mean += in[r * c + j] / ROWS;
        for (int r = 0; r < ROWS; r++)
            var += (in[r * c + j] - mean) * (in[r * c + j] - mean) / ROWS;
        for (int r = 0; r < ROWS; r++)
            out[r * c + j] = p[j] * (in[r * c + j] - mean) / sqrt(var + mod->options.eps) + p[c + j];
    }
}

static double reference_loss(const fixture *f, const double *params, dp_loss loss)
{
    double a[ROWS * MAX_WIDTH], b[ROWS * MAX_WIDTH], *in = a, *out = b;
    for (int i = 0; i < ROWS * INPUTS; i++)
        in[i] = f->x[i];
    for (int i = 0; i < f->m.count; i++) {
        const dp_module *mod = &f->m.modules[i];
        const double *p = params + mod->first_param;
        size_t n = (size_t)ROWS * mod->out_width;
        if (mod->type == &dp_module_linear)
            nn_ref_linear(mod, p, in, out, ROWS);
        else if (mod->type == &dp_module_batchnorm)
            batchnorm_ref(mod, p, in, out);
        else if (mod->type == &dp_module_dropout) /* this forward's masks, fixed */
            for (size_t j = 0; j < n; j++)
                out[j] = in[j] * dp_dropout_mask(mod)[j];
        else
            nn_ref_relu(mod, in, out, n);
        double *swap = in;
        in = out;
        out = swap;
    }
    int k = f->m.outputs;
    if (loss == DP_LOSS_XENT)
        return nn_ref_xent(in, f->labels, ROWS, k);
    double total = 0.0;
    for (int i = 0; i < ROWS * k; i++)
        total += (in[i] - f->targets[i]) * (in[i] - f->targets[i]) / k;
    return total;
}

static void check_gradients(const char *spec, dp_loss loss)
{
    fixture f;
    make_fixture(&f, spec);
    double loss_sum = forward_backward(&f, f.x, f.labels, f.targets, ROWS, loss, 0);
    size_t n = dp_params_floats(&f.m.params);
    double *p = calloc(n, sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = f.m.weights[i];
    ck_assert_double_eq_tol(loss_sum, reference_loss(&f, p, loss), 1e-5);
    const double h = 1e-6;
    for (size_t i = 0; i < n; i++) {
        double saved = p[i];
        p[i] = saved + h;
        double up = reference_loss(&f, p, loss);
        p[i] = saved - h;
        double down = reference_loss(&f, p, loss);
        p[i] = saved;
        double numeric = (up - down) / (2 * h);
        ck_assert_msg(fabs(f.m.grads[i] - numeric) <= 1e-4 + 1e-3 * fabs(numeric),
                      "%s: parameter %zu: analytic %.7g, finite difference %.7g", spec, i, f.m.grads[i], numeric);
    }
    free(p);
    free_fixture(&f);
}

START_TEST(mlp_gradients_match_finite_differences)
{
    check_gradients("5,6,4,3", DP_LOSS_XENT);
    check_gradients("5,6,4,3", DP_LOSS_MSE);
}
END_TEST

START_TEST(batchnorm_dropout_relu_gradients_match_finite_differences)
{
    check_gradients("linear(6),batchnorm,relu,dropout(0.3),linear(4),batchnorm(eps=1e-3),linear(3)", DP_LOSS_XENT);
    check_gradients("dropout(0.2),linear(6,bias=0),relu,linear(3)", DP_LOSS_MSE);
}
END_TEST

START_TEST(accumulating_two_halves_equals_the_whole_batch)
{
    fixture f;
    make_fixture(&f, "5,6,4,3");
    size_t n = dp_params_floats(&f.m.params);
    float *whole = malloc(n * sizeof(float));
    double loss_whole = forward_backward(&f, f.x, f.labels, NULL, ROWS, DP_LOSS_XENT, 0);
    memcpy(whole, f.m.grads, n * sizeof(float));
    /* The first micro-batch overwrites whatever the buffer held; the second adds. */
    for (size_t i = 0; i < n; i++)
        f.m.grads[i] = 1e6f;
    double loss_halves = forward_backward(&f, f.x, f.labels, NULL, 3, DP_LOSS_XENT, 0);
    loss_halves += forward_backward(&f, f.x + 3 * INPUTS, f.labels + 3, NULL, ROWS - 3, DP_LOSS_XENT, 1);
    ck_assert_double_eq_tol(loss_whole, loss_halves, 1e-5);
    for (size_t i = 0; i < n; i++)
        ck_assert_float_eq_tol(whole[i], f.m.grads[i], 1e-5f);
    /* A rank without rows writes zeros on the first micro-batch. */
    forward_backward(&f, f.x, f.labels, NULL, 0, DP_LOSS_XENT, 0);
    for (size_t i = 0; i < n; i++)
        ck_assert_float_eq(f.m.grads[i], 0.0f);
    free(whole);
    free_fixture(&f);
}
END_TEST

typedef struct hook_log {
    const dp_model *model;
    int calls, modules[64];
    size_t offsets[64], counts[64];
} hook_log;

/* The module whose slice of the flat buffer holds offset. */
static int module_at(const dp_model *m, size_t offset)
{
    for (int i = 0; i < m->count; i++) {
        size_t first, count;
        dp_model_module_params(m, i, &first, &count);
        if (offset >= first && offset < first + count)
            return i;
    }
    return -1;
}

static int record_ready(void *arg, size_t offset, size_t count)
{
    hook_log *log = arg;
    ck_assert_int_lt(log->calls, 64);
    log->modules[log->calls] = module_at(log->model, offset);
    log->offsets[log->calls] = offset;
    log->counts[log->calls] = count;
    log->calls++;
    return 0;
}

/* The pieces in log tile the flat gradient buffer from its end down to 0, from the modules
 * expected[0..n) in that order (a module may report several pieces in a row). */
static void assert_pieces_tile_backward(const hook_log *log, size_t total, const int *expected, int n)
{
    size_t end = total;
    int module = 0;
    for (int call = 0; call < log->calls; call++) {
        if (log->modules[call] != expected[module])
            module++;
        ck_assert_int_lt(module, n);
        ck_assert_int_eq(log->modules[call], expected[module]);
        ck_assert_uint_eq(log->offsets[call] + log->counts[call], end);
        end = log->offsets[call];
    }
    ck_assert_int_eq(module, n - 1);
    ck_assert_uint_eq(end, 0);
}

START_TEST(gradient_ready_hook_announces_modules_with_parameters_last_first)
{
    fixture f;
    make_fixture(&f, "linear(6),batchnorm,relu,linear(3)");
    hook_log log = {.model = &f.m};
    dp_grad_pieces pieces = {.ready = record_ready, .arg = &log};
    forward_backward_pieces(&f, f.x, f.labels, NULL, ROWS, DP_LOSS_XENT, 0, &pieces);
    static const int expected[] = {3, 1, 0};
    size_t total = dp_params_floats(&f.m.params);
    ck_assert_int_eq(log.calls, 5); /* each Linear: its bias, then its weight whole */
    assert_pieces_tile_backward(&log, total, expected, 3);
    log.calls = 0;
    forward_backward_pieces(&f, f.x, f.labels, NULL, 0, DP_LOSS_XENT, 0, &pieces);
    ck_assert_int_eq(log.calls, 5); /* an empty slice still announces every module */
    free_fixture(&f);
}
END_TEST

/* Asked for pieces of at most 2 rows, a Linear computes its weight gradient in row blocks, the
 * last first, each reported as it is done; the gradients are those of the whole GEMM. */
START_TEST(weight_gradients_come_in_row_blocks_when_pieces_are_wanted)
{
    fixture f;
    make_fixture(&f, "linear(7),relu,linear(3)");
    size_t total = dp_params_floats(&f.m.params);
    forward_backward(&f, f.x, f.labels, NULL, ROWS, DP_LOSS_XENT, 0);
    float *whole = malloc(total * sizeof *whole);
    memcpy(whole, f.m.grads, total * sizeof *whole);
    hook_log log = {.model = &f.m};
    /* 2 rows of the first Linear, 1 of the second */
    dp_grad_pieces pieces = {.max_floats = 2 * INPUTS + 1, .ready = record_ready, .arg = &log};
    forward_backward_pieces(&f, f.x, f.labels, NULL, ROWS, DP_LOSS_XENT, 0, &pieces);
    static const int expected[] = {2, 0};
    assert_pieces_tile_backward(&log, total, expected, 2);
    /* linear(3) on 7 inputs: bias, rows 2, 1, 0; linear(7) on INPUTS: bias, rows 5-6, 3-4, 1-2, 0. */
    ck_assert_int_eq(log.calls, 4 + 5);
    ck_assert_uint_eq(log.counts[1], 7);
    ck_assert_uint_eq(log.counts[5], 2 * INPUTS);
    ck_assert_uint_eq(log.counts[8], INPUTS);
    for (size_t i = 0; i < total; i++)
        ck_assert_float_eq_tol(f.m.grads[i], whole[i], 1e-6f * (1.0f + fabsf(whole[i])));
    free(whole);
    free_fixture(&f);
}
END_TEST

/* Modules declare one sample's shape in and out: elementwise modules keep an image's [C, H, W],
 * a Linear takes its elements as features (nn.Flatten then nn.Linear). */
START_TEST(modules_declare_shapes_and_linear_flattens)
{
    dp_model_spec spec;
    ck_assert_int_eq(dp_model_spec_parse("relu,dropout(0.1),linear(3)", &spec), 0);
    dp_dims image = {.ndim = 3, .dim = {2, 4, 5}};
    dp_model m;
    ck_assert_int_eq(dp_model_create_owning(&m, dp_backend_cpu(), &spec, &image, 4, DP_MODEL_OWNS_ALL), 0);
    char text[64];
    dp_dims_text(&m.modules[1].out_shape, text, sizeof text);
    ck_assert_str_eq(text, "[2, 4, 5]");
    ck_assert_int_eq(m.modules[2].in_width, 40);
    dp_dims_text(&m.modules[2].out_shape, text, sizeof text);
    ck_assert_str_eq(text, "[3]");
    ck_assert_int_eq(m.inputs, 40);
    ck_assert_int_eq(m.outputs, 3);
    ck_assert_uint_eq(dp_params_floats(&m.params), 40 * 3 + 3);
    dp_model_free(&m);
}
END_TEST

/* Version 1's initialisation, restated: one stream from mix(seed, 0x1a17), each layer's weight
 * then bias uniform in +-1/sqrt(fan_in). --layers must reproduce it byte for byte. */
START_TEST(layers_initialisation_is_version_1s_bytes)
{
    static const int widths[] = {400, 300, 10};
    dp_model_spec spec;
    parse_spec("400,300,10", &spec);
    dp_model m;
    ck_assert_int_eq(dp_model_create(&m, dp_backend_cpu(), &spec, 400, 1), 0);
    size_t n = dp_params_floats(&m.params);
    ck_assert_uint_eq(n, 400 * 300 + 300 + 300 * 10 + 10);
    float *expected = malloc(n * sizeof(float)), *p = expected;
    dp_rng rng;
    dp_rng_seed(&rng, dp_rng_mix(5, 0x1a17));
    for (int i = 0; i < 2; i++) {
        float bound = 1.0f / sqrtf((float)widths[i]);
        for (int j = 0; j < widths[i + 1] * widths[i] + widths[i + 1]; j++)
            *p++ = (2.0f * dp_rng_uniform(&rng) - 1.0f) * bound;
    }
    dp_model_init(&m, 5, m.weights, m.buffer_values, m.counters);
    ck_assert_mem_eq(m.weights, expected, n * sizeof(float));
    dp_model_init(&m, 6, m.weights, m.buffer_values, m.counters);
    ck_assert(memcmp(m.weights, expected, n * sizeof(float)) != 0);
    free(expected);
    dp_model_free(&m);
}
END_TEST

/* ZeRO-3's sharded start-up: any slice drawn alone (dp_model_init_slice, the draws skipped
 * to its first) is bit for bit that slice of the whole initialisation, across Linear layers
 * and a BatchNorm that draws nothing; the buffers are the whole ones. */
START_TEST(a_slice_drawn_alone_equals_the_whole_initialisation)
{
    dp_model_spec spec;
    ck_assert_int_eq(dp_model_spec_parse("linear(16),batchnorm,relu,linear(7),linear(5,bias=0)", &spec), 0);
    dp_model m;
    ck_assert_int_eq(dp_model_create(&m, dp_backend_cpu(), &spec, 9, 4), 0);
    size_t n = dp_params_floats(&m.params), nb = dp_params_floats(&m.buffers);
    float *whole = malloc(n * sizeof(float)), *slice = malloc(n * sizeof(float));
    float *buffers = malloc(nb * sizeof(float)), *slice_buffers = malloc(nb * sizeof(float));
    int64_t counters[4], slice_counters[4];
    dp_model_init(&m, 77, whole, buffers, counters);
    static const size_t cuts[][2] = {{0, 0}, {0, 1}, {3, 170}, {159, 161}, {160, 200}, {190, 0}};
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
        size_t begin = cuts[c][0], end = cuts[c][1] ? cuts[c][1] : n;
        memset(slice, 0xff, n * sizeof(float));
        dp_model_init_slice(&m, 77, begin, end, slice, slice_buffers, slice_counters);
        ck_assert_msg(memcmp(slice, whole + begin, (end - begin) * sizeof(float)) == 0, "slice [%zu, %zu)", begin, end);
        ck_assert_mem_eq(slice_buffers, buffers, nb * sizeof(float));
    }
    free(whole);
    free(slice);
    free(buffers);
    free(slice_buffers);
    dp_model_free(&m);
}
END_TEST

START_TEST(tensor_names_follow_pytorch)
{
    fixture f;
    make_fixture(&f, "5,6,4,3");
    ck_assert_int_eq(f.m.params.count, 6);
    ck_assert_str_eq(f.m.params.entries[2].name, "layers.1.weight"); /* --layers: the k-th Linear */
    ck_assert_int_eq(f.m.params.entries[2].shape[0], 4);
    ck_assert_int_eq(f.m.params.entries[2].shape[1], 6);
    ck_assert_uint_eq(f.m.params.entries[3].offset, 6 * 5 + 6 + 4 * 6);
    free_fixture(&f);
    make_fixture(&f, "linear(6),batchnorm,relu,dropout(0.5),linear(3,bias=0)");
    static const char *const params[] = {"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
                                         "layers.4.weight"};
    static const char *const buffers[] = {"layers.1.running_mean", "layers.1.running_var",
                                          "layers.1.num_batches_tracked"};
    ck_assert_int_eq(f.m.params.count, 5);
    for (int i = 0; i < 5; i++)
        ck_assert_str_eq(f.m.params.entries[i].name, params[i]);
    ck_assert_int_eq(f.m.buffers.count, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_str_eq(f.m.buffers.entries[i].name, buffers[i]);
    ck_assert_int_eq(f.m.buffers.entries[2].dtype, DP_DTYPE_I64);
    ck_assert_int_eq(f.m.buffers.entries[2].ndim, 0);
    /* Weight decay applies to weight matrices only. */
    ck_assert(f.m.params.entries[0].flags & DP_PARAM_DECAY);
    ck_assert(!(f.m.params.entries[1].flags & DP_PARAM_DECAY));
    ck_assert(!(f.m.params.entries[2].flags & DP_PARAM_DECAY));
    free_fixture(&f);
}
END_TEST

/* A mask is a function of (seed, step, sample, unit): rows 3..6 of a 7-row forward equal a
 * forward of those 4 rows that starts at sample 3, as another rank would run them. */
START_TEST(dropout_masks_do_not_depend_on_how_rows_are_split)
{
    fixture f;
    make_fixture(&f, "dropout(0.5),linear(3)");
    dp_nn_context ctx = train_ctx(0);
    const float *out;
    ck_assert_int_eq(dp_model_forward(&f.m, &ctx, f.x, ROWS, &out), 0);
    float whole[ROWS * INPUTS];
    memcpy(whole, dp_dropout_mask(&f.m.modules[0]), sizeof whole);
    int kept = 0;
    for (int i = 0; i < ROWS * INPUTS; i++) {
        ck_assert(whole[i] == 0.0f || whole[i] == 2.0f);
        kept += whole[i] != 0.0f;
    }
    ck_assert(kept > 5 && kept < ROWS * INPUTS - 5);
    ctx.first_sample = 3;
    ck_assert_int_eq(dp_model_forward(&f.m, &ctx, f.x + 3 * INPUTS, ROWS - 3, &out), 0);
    ck_assert_mem_eq(dp_dropout_mask(&f.m.modules[0]), whole + 3 * INPUTS, (ROWS - 3) * INPUTS * sizeof(float));
    step_number++;
    ck_assert_int_eq(dp_model_forward(&f.m, &ctx, f.x + 3 * INPUTS, ROWS - 3, &out), 0);
    ck_assert(memcmp(dp_dropout_mask(&f.m.modules[0]), whole + 3 * INPUTS, (ROWS - 3) * INPUTS * sizeof(float)) != 0);
    /* Eval mode passes data through. */
    ctx.training = 0;
    ck_assert_int_eq(dp_model_forward(&f.m, &ctx, f.x, ROWS, &out), 0);
    ck_assert_ptr_eq(f.m.inputs_of[1], f.x);
    free_fixture(&f);
}
END_TEST

/* PyTorch's running statistics: momentum 0.1 towards the batch mean and unbiased variance,
 * num_batches_tracked per training forward; eval mode normalises with them. */
START_TEST(batchnorm_running_statistics_follow_pytorch)
{
    fixture f;
    make_fixture(&f, "linear(4),batchnorm");
    dp_nn_context ctx = train_ctx(0);
    const float *out;
    ck_assert_int_eq(dp_model_forward(&f.m, &ctx, f.x, ROWS, &out), 0);
    const float *h = f.m.inputs_of[1], *running = f.m.modules[1].buffers;
    for (int c = 0; c < 4; c++) {
        double mean = 0.0, var = 0.0;
        for (int r = 0; r < ROWS; r++)
            mean += h[r * 4 + c] / (double)ROWS;
        for (int r = 0; r < ROWS; r++)
            var += (h[r * 4 + c] - mean) * (h[r * 4 + c] - mean) / (ROWS - 1);
        ck_assert_double_eq_tol(running[c], 0.1 * mean, 1e-6);
        ck_assert_double_eq_tol(running[4 + c], 0.9 + 0.1 * var, 1e-6);
    }
    ck_assert_int_eq(f.m.counters[0], 1);
    ctx.training = 0;
    ck_assert_int_eq(dp_model_forward(&f.m, &ctx, f.x, ROWS, &out), 0);
    ck_assert_int_eq(f.m.counters[0], 1);
    const float *gamma = f.m.modules[1].weights;
    for (int i = 0; i < ROWS * 4; i++) {
        int c = i % 4;
        double expected = gamma[c] * (h[i] - running[c]) / sqrt(running[4 + c] + 1e-5) + gamma[4 + c];
        ck_assert_double_eq_tol(out[i], expected, 1e-5);
    }
    free_fixture(&f);
}
END_TEST

START_TEST(model_specs_parse_and_bad_ones_are_named)
{
    dp_model_spec spec;
    ck_assert_int_eq(dp_model_spec_parse(" linear(256) , batchnorm(momentum=0.2, sync=1),relu,dropout(p=0.1), linear(10)", &spec), 0);
    ck_assert_int_eq(spec.count, 5);
    ck_assert_int_eq(spec.modules[0].options.out_features, 256);
    ck_assert_float_eq(spec.modules[1].options.momentum, 0.2f);
    ck_assert_float_eq(spec.modules[1].options.eps, 1e-5f);
    ck_assert_int_eq(spec.modules[1].options.sync, 1);
    ck_assert_float_eq(spec.modules[3].options.p, 0.1f);
    static const struct {
        const char *spec, *phrase;
    } bad[] = {
        {"linear(10),softmax", "module 1 'softmax': unknown module"},
        {"linear", "needs out"},
        {"linear(0)", "out='0' must be an integer in [1,"},
        {"linear(ten)", "out='ten'"},
        {"linear(10,bias=2)", "bias='2' must be 0 or 1"},
        {"dropout(1)", "p='1' must be a number in [0, 1)"},
        {"dropout(-0.1)", "p='-0.1'"},
        {"batchnorm(momentum=0.1,foo=1)", "unknown option 'foo'"},
        {"relu(3)", "takes no options"},
        {"linear(10,1,2)", "more options without name= than the module has"},
        {"linear(out=10,1)", "options without name= must come before those with it"},
        {"conv2d(8)", "needs k"},
        {"maxpool(0)", "k='0' must be an integer in [1,"},
        {"flatten(2)", "takes no options"},
        {"linear(10", "unbalanced parentheses"},
        {"linear(10),", "trailing comma"},
        {"linear(10),,relu", "empty module"},
        {"", "no modules"},
        {"residual", "needs its modules in braces"},
        {"relu{linear(3)}", "only residual takes modules in braces"},
        {"residual{linear(3)|linear(3)|linear(3)}", "more than one '|'"},
        {"residual{}", "empty module at position 1 (in layers.0)"},
        {"residual{linear(3)|}", "empty module at position 3 (in layers.0)"},
        {"residual{linear(3)}relu", "follows its '}'"},
        {"residual(relu=2){linear(3)}", "relu='2' must be 0 or 1"},
        {"a b:linear(3)", "label 'a b': letters, digits"},
        {":linear(3)", "empty label"},
        {"resnet7", "unknown module (known: linear"},
        {"resnet18,linear(3)", "'resnet18' is a preset, a whole model"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_msg(dp_model_spec_parse(bad[i].spec, &spec) == DP_EINVAL, "'%s' accepted", bad[i].spec);
        ck_assert_msg(strstr(dp_last_error(), bad[i].phrase) && strstr(dp_last_error(), "--model"),
                      "'%s': %s", bad[i].spec, dp_last_error());
    }
    ck_assert_int_eq(dp_model_spec_parse("batchnorm,linear(10)", &spec), 0);
    dp_model m;
    ck_assert_int_eq(dp_model_create(&m, dp_backend_cpu(), &spec, 5, 4), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "comes before any linear"));
}
END_TEST

/* A block's modules are named as a PyTorch module holding body and shortcut Sequentials would
 * name them; labels replace a module's place; a body and shortcut of other shapes are refused
 * naming both. */
START_TEST(residual_blocks_name_their_tensors_and_check_their_shapes)
{
    dp_model_spec spec;
    ck_assert_int_eq(dp_model_spec_parse("stem:linear(4),residual{linear(4),relu|s.0:linear(4)},residual{linear(4)},"
                                         "linear(2)", &spec), 0);
    ck_assert_int_eq(spec.count, 12); /* 4 modules, 2 blocks of 3 markers, 4 inside them */
    dp_model m;
    ck_assert_int_eq(dp_model_create(&m, dp_backend_cpu(), &spec, 5, 4), 0);
    static const char *const names[] = {"stem.weight", "layers.1.body.0.weight", "layers.1.s.0.weight",
                                        "layers.2.body.0.bias", "layers.3.weight"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        ck_assert_msg(dp_params_find(&m.params, names[i]), "no tensor %s", names[i]);
    ck_assert_int_eq(m.params.count, 10);
    dp_model_free(&m);
    ck_assert_int_eq(dp_model_spec_parse("linear(4),blk:residual{linear(3)}", &spec), 0);
    ck_assert_int_eq(dp_model_create(&m, dp_backend_cpu(), &spec, 5, 4), DP_EINVAL);
    ck_assert_msg(strstr(dp_last_error(), "residual block blk (module 1): its body makes [3] of its input [4] but its "
                                          "shortcut makes [4]"), "%s", dp_last_error());
}
END_TEST

/* torchvision's sizes: resnet18 at 10 classes has 11,181,642 parameters; resnet50 at 1000 has
 * 25,557,032 in 161 tensors, and 53 BatchNorms. */
START_TEST(resnet_presets_have_torchvisions_sizes)
{
    static const struct {
        const char *name;
        int classes;
        size_t params;
        int tensors, batchnorms;
    } presets[] = {{"resnet18", 10, 11181642, 62, 20}, {"resnet50", 1000, 25557032, 161, 53}};
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        dp_model_spec spec;
        ck_assert_int_eq(dp_model_spec_parse(presets[i].name, &spec), 0);
        ck_assert(dp_model_spec_needs_classes(&spec));
        dp_model_spec_set_classes(&spec, presets[i].classes);
        ck_assert(!dp_model_spec_needs_classes(&spec));
        dp_dims image = {.ndim = 3, .dim = {3, 64, 64}};
        dp_model m;
        ck_assert_msg(dp_model_create_owning(&m, dp_backend_cpu(), &spec, &image, 1, DP_MODEL_OWNS_ALL) == 0, "%s",
                      dp_last_error());
        ck_assert_uint_eq(dp_params_floats(&m.params), presets[i].params);
        ck_assert_int_eq(m.params.count, presets[i].tensors);
        ck_assert_int_eq(m.batchnorms, presets[i].batchnorms);
        ck_assert_ptr_nonnull(dp_params_find(&m.params, "layer2.0.downsample.0.weight"));
        ck_assert_ptr_nonnull(dp_params_find(&m.buffers, "layer4.1.bn2.num_batches_tracked"));
        ck_assert_int_eq(m.outputs, presets[i].classes);
        dp_model_free(&m);
    }
}
END_TEST

START_TEST(layer_specs_parse_and_bad_ones_are_named)
{
    dp_model_spec spec;
    ck_assert_int_eq(dp_model_spec_from_layers("784,256,10", &spec), 0);
    ck_assert_int_eq(spec.inputs, 784);
    ck_assert_int_eq(spec.count, 3); /* linear, relu, linear */
    ck_assert_int_eq(spec.modules[2].options.out_features, 10);
    static const char *const bad[] = {"", "784", "784,0,10", "784,-3", "784,,10", "784,10,", "7a,10"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_int_lt(dp_model_spec_from_layers(bad[i], &spec), 0);
        ck_assert_ptr_nonnull(strstr(dp_last_error(), "--layers"));
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("nn");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, mlp_gradients_match_finite_differences);
    tcase_add_test(tc, batchnorm_dropout_relu_gradients_match_finite_differences);
    tcase_add_test(tc, accumulating_two_halves_equals_the_whole_batch);
    tcase_add_test(tc, gradient_ready_hook_announces_modules_with_parameters_last_first);
    tcase_add_test(tc, weight_gradients_come_in_row_blocks_when_pieces_are_wanted);
    tcase_add_test(tc, a_slice_drawn_alone_equals_the_whole_initialisation);
    tcase_add_test(tc, layers_initialisation_is_version_1s_bytes);
    tcase_add_test(tc, modules_declare_shapes_and_linear_flattens);
    tcase_add_test(tc, tensor_names_follow_pytorch);
    tcase_add_test(tc, dropout_masks_do_not_depend_on_how_rows_are_split);
    tcase_add_test(tc, batchnorm_running_statistics_follow_pytorch);
    tcase_add_test(tc, model_specs_parse_and_bad_ones_are_named);
    tcase_add_test(tc, layer_specs_parse_and_bad_ones_are_named);
    tcase_add_test(tc, residual_blocks_name_their_tensors_and_check_their_shapes);
    tcase_add_test(tc, resnet_presets_have_torchvisions_sizes);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
