/* The convolutional modules (conv2d, maxpool, avgpool, flatten, batchnorm on images): every
 * parameter's gradient against finite differences of an independent double-precision forward
 * (stride, padding, non-square images, several input channels, kernels 1, 3 and 5, overlapping
 * pooling windows), max pooling's ties, the output shapes, and the errors that name the module
 * and the shapes. Each gradient of the first module passes through every later module's input
 * gradient, so those are checked too. */
#include "dp/error.h"
#include "dp/nn.h"
#include "dp/rng.h"
#include "src/nn/module.h"
#include "tests/nn_reference.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 3 };

typedef struct fixture {
    dp_model m;
    float *x;
    int32_t labels[ROWS];
    double *totals;
} fixture;

static void make_fixture(fixture *f, const char *text, dp_dims image)
{
    dp_model_spec spec;
    ck_assert_msg(dp_model_spec_parse(text, &spec) == 0, "%s", dp_last_error());
    ck_assert_msg(dp_model_create_owning(&f->m, dp_backend_cpu(), &spec, &image, ROWS, DP_MODEL_OWNS_ALL) == 0, "%s",
                  dp_last_error());
    dp_model_init(&f->m, 5, f->m.weights, f->m.buffer_values, f->m.counters);
    dp_rng rng;
    dp_rng_seed(&rng, 17);
    for (size_t i = 0; i < dp_params_floats(&f->m.params); i++) /* BatchNorm's weight and bias away from 1, 0 */
        f->m.weights[i] += 0.2f * (2.0f * dp_rng_uniform(&rng) - 1.0f);
    size_t n = (size_t)ROWS * f->m.inputs;
    f->x = malloc(n * sizeof *f->x);
    for (size_t i = 0; i < n; i++)
        f->x[i] = 2.0f * dp_rng_uniform(&rng) - 1.0f;
    for (int r = 0; r < ROWS; r++)
        f->labels[r] = r % 2;
    f->totals = calloc(2, sizeof(double));
}

static void free_fixture(fixture *f)
{
    dp_model_free(&f->m);
    free(f->x);
    free(f->totals);
}

/* --- the reference: each module's forward in double on [ROWS, C, H, W] --- */

static void conv_ref(const dp_module *mod, const double *p, const double *in, double *out)
{
    int c_in = (int)mod->in_shape.dim[0], h_in = (int)mod->in_shape.dim[1], w_in = (int)mod->in_shape.dim[2];
    int c_out = (int)mod->out_shape.dim[0], h_out = (int)mod->out_shape.dim[1], w_out = (int)mod->out_shape.dim[2];
    int k = mod->options.kernel, s = mod->options.stride, pad = mod->options.padding;
    const double *bias = mod->options.bias ? p + (size_t)c_out * c_in * k * k : NULL;
    for (int r = 0; r < ROWS; r++)
        for (int o = 0; o < c_out; o++)
            for (int y = 0; y < h_out; y++)
                for (int x = 0; x < w_out; x++) {
                    double z = bias ? bias[o] : 0.0;
                    for (int c = 0; c < c_in; c++)
                        for (int i = 0; i < k; i++)
                            for (int j = 0; j < k; j++) {
                                int h = y * s - pad + i, w = x * s - pad + j;
                                if (h >= 0 && h < h_in && w >= 0 && w < w_in)
                                    z += p[((o * c_in + c) * k + i) * k + j] *
                                         in[((r * c_in + c) * h_in + h) * w_in + w];
                            }
                    out[((r * c_out + o) * h_out + y) * w_out + x] = z;
                }
}

/* Max pooling's padding never wins; average pooling's counts as zeros (count_include_pad);
 * globalavgpool is one window over the whole image. */
static void pool_ref(const dp_module *mod, const double *in, double *out)
{
    int c_n = (int)mod->in_shape.dim[0], h_in = (int)mod->in_shape.dim[1], w_in = (int)mod->in_shape.dim[2];
    int h_out = (int)mod->out_shape.dim[1], w_out = (int)mod->out_shape.dim[2];
    int global = mod->type == &dp_module_globalavgpool, pad = global ? 0 : mod->options.padding;
    int kh = global ? h_in : mod->options.kernel, kw = global ? w_in : mod->options.kernel;
    int s = global ? 1 : mod->options.stride ? mod->options.stride : kh;
    for (int rc = 0; rc < ROWS * c_n; rc++)
        for (int y = 0; y < h_out; y++)
            for (int x = 0; x < w_out; x++) {
                double best = -INFINITY, sum = 0.0;
                for (int i = 0; i < kh; i++)
                    for (int j = 0; j < kw; j++) {
                        int h = y * s - pad + i, w = x * s - pad + j;
                        if (h < 0 || h >= h_in || w < 0 || w >= w_in)
                            continue;
                        double v = in[((size_t)rc * h_in + h) * w_in + w];
                        best = v > best ? v : best;
                        sum += v;
                    }
                out[((size_t)rc * h_out + y) * w_out + x] = mod->type == &dp_module_maxpool ? best : sum / (kh * kw);
            }
}

/* A residual block in double: the input kept at `residual`, the body's output at `shortcut`
 * (which hands the input to the shortcut), their sum (and ReLU) at `add`. */
typedef struct ref_residual {
    double *input, *body;
} ref_residual;

static void residual_ref(const dp_module *mod, ref_residual *blocks, int *depth, const double *in, double *out)
{
    size_t n = (size_t)ROWS * mod->in_width, m = (size_t)ROWS * mod->out_width;
    if (mod->type == &dp_module_residual) {
        ref_residual *b = &blocks[(*depth)++];
        b->input = malloc(n * sizeof *b->input);
        memcpy(b->input, in, n * sizeof *in);
        memcpy(out, in, n * sizeof *in);
    } else if (mod->type == &dp_module_shortcut) {
        ref_residual *b = &blocks[*depth - 1];
        b->body = malloc(n * sizeof *b->body);
        memcpy(b->body, in, n * sizeof *in);
        memcpy(out, b->input, m * sizeof *out);
    } else {
        ref_residual *b = &blocks[--*depth];
        for (size_t i = 0; i < m; i++) {
            double sum = b->body[i] + in[i];
            out[i] = mod->options.relu && sum < 0.0 ? 0.0 : sum;
        }
        free(b->input);
        free(b->body);
    }
}

/* Training mode on images: per channel over rows and pixels, the biased variance. */
static void batchnorm2d_ref(const dp_module *mod, const double *p, const double *in, double *out)
{
    int c_n = (int)mod->in_shape.dim[0], pixels = (int)(mod->in_shape.dim[1] * mod->in_shape.dim[2]);
    double count = (double)ROWS * pixels;
    for (int c = 0; c < c_n; c++) {
        double mean = 0.0, var = 0.0;
        for (int r = 0; r < ROWS; r++)
            for (int q = 0; q < pixels; q++)
                mean += in[((size_t)r * c_n + c) * pixels + q] / count;
        for (int r = 0; r < ROWS; r++)
            for (int q = 0; q < pixels; q++) {
                double d = in[((size_t)r * c_n + c) * pixels + q] - mean;
                var += d * d / count;
            }
        for (int r = 0; r < ROWS; r++)
            for (int q = 0; q < pixels; q++) {
                size_t at = ((size_t)r * c_n + c) * pixels + q;
                out[at] = p[c] * (in[at] - mean) / sqrt(var + mod->options.eps) + p[c_n + c];
            }
    }
}

static double reference_loss(const fixture *f, const double *params)
{
    size_t widest = (size_t)f->m.inputs;
    for (int i = 0; i < f->m.count; i++)
        widest = (size_t)f->m.modules[i].out_width > widest ? (size_t)f->m.modules[i].out_width : widest;
    double *in = calloc(ROWS * widest, sizeof *in), *out = calloc(ROWS * widest, sizeof *out);
    ref_residual blocks[DP_RESIDUAL_DEPTH_MAX];
    int depth = 0;
    for (size_t i = 0; i < (size_t)ROWS * f->m.inputs; i++)
        in[i] = f->x[i];
    for (int i = 0; i < f->m.count; i++) {
        const dp_module *mod = &f->m.modules[i];
        const double *p = params + mod->first_param;
        size_t n = (size_t)ROWS * mod->out_width;
        if (mod->type == &dp_module_conv2d)
            conv_ref(mod, p, in, out);
        else if (mod->type == &dp_module_maxpool || mod->type == &dp_module_avgpool ||
                 mod->type == &dp_module_globalavgpool)
            pool_ref(mod, in, out);
        else if (mod->type->residual)
            residual_ref(mod, blocks, &depth, in, out);
        else if (mod->type == &dp_module_batchnorm)
            batchnorm2d_ref(mod, p, in, out);
        else if (mod->type == &dp_module_linear)
            nn_ref_linear(mod, p, in, out, ROWS);
        else if (mod->type == &dp_module_flatten)
            memcpy(out, in, n * sizeof *out);
        else
            nn_ref_relu(mod, in, out, n);
        double *swap = in;
        in = out;
        out = swap;
    }
    double total = nn_ref_xent(in, f->labels, ROWS, f->m.outputs);
    free(in);
    free(out);
    return total;
}

static void check_gradients(const char *spec, dp_dims image)
{
    fixture f;
    make_fixture(&f, spec, image);
    dp_nn_context ctx = {.be = dp_backend_cpu(), .training = 1, .seed = 3};
    const float *out;
    ck_assert_int_eq(dp_model_forward(&f.m, &ctx, f.x, ROWS, &out), 0);
    dp_model_loss(&f.m, DP_LOSS_XENT, out, f.labels, NULL, ROWS, f.m.delta[0], f.totals);
    ck_assert_int_eq(dp_model_backward(&f.m, &ctx, f.m.delta[0], ROWS, NULL), 0);
    size_t n = dp_params_floats(&f.m.params);
    double *p = calloc(n, sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = f.m.weights[i];
    ck_assert_msg(fabs(f.totals[0] - reference_loss(&f, p)) < 1e-4, "%s: loss %.9g, reference %.9g", spec, f.totals[0],
                  reference_loss(&f, p));
    const double h = 1e-6;
    for (size_t i = 0; i < n; i++) {
        double saved = p[i];
        p[i] = saved + h;
        double up = reference_loss(&f, p);
        p[i] = saved - h;
        double down = reference_loss(&f, p);
        p[i] = saved;
        double numeric = (up - down) / (2 * h);
        ck_assert_msg(fabs(f.m.grads[i] - numeric) <= 2e-4 + 2e-3 * fabs(numeric),
                      "%s: parameter %zu: analytic %.7g, finite difference %.7g", spec, i, f.m.grads[i], numeric);
    }
    free(p);
    free_fixture(&f);
}

static dp_dims image(int c, int h, int w)
{
    return (dp_dims){.ndim = 3, .dim = {c, h, w}};
}

START_TEST(conv_stride_padding_non_square_gradients_match_finite_differences)
{
    check_gradients("conv2d(3,3,stride=2,padding=1),relu,conv2d(4,1),maxpool(2),flatten,linear(3)", image(2, 7, 6));
}
END_TEST

START_TEST(conv_k5_batchnorm_avgpool_gradients_match_finite_differences)
{
    check_gradients("conv2d(2,5,padding=2,bias=0),batchnorm,relu,avgpool(2,stride=1),conv2d(3,3),flatten,linear(3)",
                    image(1, 9, 8));
}
END_TEST

START_TEST(overlapping_maxpool_and_batchnorm_gradients_match_finite_differences)
{
    check_gradients("conv2d(4,3,padding=1),batchnorm,maxpool(3,stride=2),conv2d(2,2,stride=2),flatten,linear(4)",
                    image(3, 8, 8));
}
END_TEST

/* torchvision's BasicBlock twice: an identity shortcut, then a projection (1x1 conv2d with stride
 * and batchnorm) and a block without the final ReLU, a padded max pool and the global average. */
START_TEST(residual_blocks_gradients_match_finite_differences)
{
    check_gradients("conv2d(3,3,padding=1,bias=0),batchnorm,relu,maxpool(3,stride=2,padding=1),"
                    "residual{conv2d(3,3,padding=1,bias=0),batchnorm,relu,conv2d(3,3,padding=1,bias=0),batchnorm},"
                    "residual(relu=0){conv2d(4,3,stride=2,padding=1,bias=0),batchnorm,relu,conv2d(4,1),batchnorm"
                    "|conv2d(4,1,stride=2,bias=0),batchnorm},globalavgpool,flatten,linear(3)",
                    image(2, 9, 8));
}
END_TEST

/* A block inside a block's body and one inside a shortcut, and padded average pooling. */
START_TEST(nested_residual_blocks_gradients_match_finite_differences)
{
    check_gradients("conv2d(2,3,padding=1),relu,residual{residual{conv2d(2,3,padding=1),relu},avgpool(3,stride=1,"
                    "padding=1)|residual(relu=0){conv2d(2,1)}},flatten,linear(3)",
                    image(1, 5, 6));
}
END_TEST

/* Where backward reports gradient pieces final: DDP's buckets are cut in reverse flat order, so
 * a nested model must finish its gradients in that order (the shortcut's before the body's). */
typedef struct piece_log {
    size_t next_end; /* where the next piece must end: the last one's start */
    int pieces, out_of_order;
} piece_log;

static int log_piece(void *arg, size_t offset, size_t count)
{
    piece_log *log = arg;
    log->out_of_order += offset + count != log->next_end;
    log->next_end = offset;
    log->pieces++;
    return 0;
}

START_TEST(residual_gradients_become_final_in_reverse_flat_order)
{
    fixture f;
    make_fixture(&f, "conv2d(4,3,padding=1,bias=0),batchnorm,relu,residual{conv2d(4,3,padding=1),batchnorm,relu,"
                     "residual{conv2d(4,1)},batchnorm|conv2d(4,1,bias=0),batchnorm},flatten,linear(3)", image(2, 5, 5));
    dp_nn_context ctx = {.be = dp_backend_cpu(), .training = 1, .seed = 3};
    const float *out;
    ck_assert_int_eq(dp_model_forward(&f.m, &ctx, f.x, ROWS, &out), 0);
    dp_model_loss(&f.m, DP_LOSS_XENT, out, f.labels, NULL, ROWS, f.m.delta[0], f.totals);
    piece_log log = {.next_end = dp_params_floats(&f.m.params)};
    dp_grad_pieces pieces = {.max_floats = 20, .ready = log_piece, .arg = &log};
    ck_assert_int_eq(dp_model_backward(&f.m, &ctx, f.m.delta[0], ROWS, &pieces), 0);
    ck_assert_int_eq(log.out_of_order, 0);
    ck_assert_uint_eq(log.next_end, 0);
    ck_assert_int_gt(log.pieces, 8);
    free_fixture(&f);
}
END_TEST

/* Ties: the whole gradient goes to the window's first maximum (PyTorch's rule). */
START_TEST(maxpool_gives_ties_gradient_to_the_first_maximum)
{
    const dp_backend *be = dp_backend_cpu();
    dp_window w = {.channels = 1, .height = 2, .width = 4, .kernel_h = 2, .kernel_w = 2, .stride = 2, .out_h = 1,
                   .out_w = 2};
    float x[8] = {1, 5, 7, 7, 5, 5, 7, 2}, dy[2] = {3, 4}, y[2], dx[8];
    be->pool_forward(be, x, y, 1, &w, DP_POOL_MAX);
    ck_assert_float_eq(y[0], 5.0f);
    ck_assert_float_eq(y[1], 7.0f);
    be->pool_backward(be, x, dy, dx, 1, &w, DP_POOL_MAX);
    float want[8] = {0, 3, 4, 0, 0, 0, 0, 0};
    for (int i = 0; i < 8; i++)
        ck_assert_msg(dx[i] == want[i], "dx[%d] = %g, want %g", i, dx[i], want[i]);
}
END_TEST

/* A batch larger than a chunk of col (conv2d.c's CHUNK_BYTES: here 6 samples of the second
 * conv2d, so 9 rows run as 6 + 3, the last chunk's lowering reused by backward) equals its
 * samples run one at a time, each a single chunk that the finite differences above check:
 * the outputs, and every gradient summed over the samples (dy given, so the sum is exact
 * up to rounding; the first conv2d's come through the second's input gradient). */
START_TEST(conv_in_several_chunks_equals_one_sample_at_a_time)
{
    enum { BATCH = 9 };
    dp_model_spec spec;
    ck_assert_int_eq(dp_model_spec_parse("conv2d(4,3,padding=1),conv2d(3,5,padding=2),flatten,linear(2)", &spec), 0);
    dp_model m;
    ck_assert_msg(dp_model_create_owning(&m, dp_backend_cpu(), &spec, &(dp_dims){3, {2, 40, 40}}, BATCH,
                                         DP_MODEL_OWNS_ALL) == 0, "%s", dp_last_error());
    dp_model_init(&m, 5, m.weights, m.buffer_values, m.counters);
    size_t inputs = (size_t)m.inputs, n = dp_params_floats(&m.params);
    float *x = malloc(BATCH * inputs * sizeof *x), dy[BATCH * 2], batch_out[BATCH * 2];
    float *batch_grads = malloc(n * sizeof *batch_grads);
    dp_rng rng;
    dp_rng_seed(&rng, 23);
    for (size_t i = 0; i < BATCH * inputs; i++)
        x[i] = 2.0f * dp_rng_uniform(&rng) - 1.0f;
    for (int i = 0; i < BATCH * 2; i++)
        dy[i] = 2.0f * dp_rng_uniform(&rng) - 1.0f;
    dp_nn_context ctx = {.be = dp_backend_cpu(), .training = 1};
    const float *out;
    ck_assert_int_eq(dp_model_forward(&m, &ctx, x, BATCH, &out), 0);
    memcpy(batch_out, out, sizeof batch_out);
    memcpy(m.delta[0], dy, sizeof dy);
    ck_assert_int_eq(dp_model_backward(&m, &ctx, m.delta[0], BATCH, NULL), 0);
    memcpy(batch_grads, m.grads, n * sizeof *batch_grads);
    for (int r = 0; r < BATCH; r++) {
        ctx.accumulate = r > 0;
        ck_assert_int_eq(dp_model_forward(&m, &ctx, x + (size_t)r * inputs, 1, &out), 0);
        for (int k = 0; k < 2; k++)
            ck_assert_msg(fabsf(out[k] - batch_out[r * 2 + k]) <= 1e-5f * (1.0f + fabsf(out[k])),
                          "sample %d output %d: alone %.9g, in the batch %.9g", r, k, out[k], batch_out[r * 2 + k]);
        memcpy(m.delta[0], dy + r * 2, 2 * sizeof *dy);
        ck_assert_int_eq(dp_model_backward(&m, &ctx, m.delta[0], 1, NULL), 0);
    }
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabsf(m.grads[i] - batch_grads[i]) <= 1e-4f * (1.0f + fabsf(m.grads[i])),
                      "parameter %zu: summed one at a time %.9g, in chunks %.9g", i, m.grads[i], batch_grads[i]);
    free(x);
    free(batch_grads);
    dp_model_free(&m);
}
END_TEST

START_TEST(shapes_and_tensors_follow_pytorch)
{
    dp_model_spec spec;
    const char *text = "conv2d(32,3,padding=1,bias=0),batchnorm,relu,maxpool(2),conv2d(64,3,padding=1),batchnorm,relu,"
                       "maxpool(2),flatten,linear(128),relu,dropout(0.3),linear(10)";
    ck_assert_int_eq(dp_model_spec_parse(text, &spec), 0);
    dp_model m;
    dp_dims in = image(1, 28, 28);
    ck_assert_int_eq(dp_model_create_owning(&m, dp_backend_cpu(), &spec, &in, 2, DP_MODEL_OWNS_ALL), 0);
    char shape[64];
    dp_dims_text(&m.modules[7].out_shape, shape, sizeof shape);
    ck_assert_str_eq(shape, "[64, 7, 7]");
    ck_assert_int_eq(m.modules[9].in_width, 3136);
    const dp_param *e = &m.params.entries[0];
    ck_assert_str_eq(e->name, "layers.0.weight");
    ck_assert_int_eq(e->ndim, 4);
    ck_assert_int_eq(e->shape[0], 32);
    ck_assert_int_eq(e->shape[1], 1);
    ck_assert_int_eq(e->shape[3], 3);
    ck_assert_str_eq(m.params.entries[1].name, "layers.1.weight");
    ck_assert_int_eq(m.params.entries[1].shape[0], 32);
    ck_assert_str_eq(m.params.entries[3].name, "layers.4.weight");
    ck_assert_str_eq(m.params.entries[4].name, "layers.4.bias");
    int widest, overflow = 0;
    dp_module_size sizes[DP_MODEL_MAX_MODULES];
    ck_assert_uint_eq(dp_model_spec_module_params(&spec, &in, sizes, &widest, &overflow), dp_params_floats(&m.params));
    ck_assert_uint_eq(sizes[4].params, 64 * 32 * 9 + 64);
    /* Cut under a ZeRO budget in out-channel rows of C k k floats, as the built module says. */
    size_t row, rows;
    dp_model_module_rows(&m, 4, &row, &rows);
    ck_assert_uint_eq(sizes[4].rows, 64);
    ck_assert_uint_eq(sizes[4].row, 32 * 9);
    ck_assert(row == sizes[4].row && rows == sizes[4].rows);
    dp_model_free(&m);
}
END_TEST

static void assert_refused(const char *text, dp_dims in, const char *phrase1, const char *phrase2)
{
    dp_model_spec spec;
    ck_assert_int_eq(dp_model_spec_parse(text, &spec), 0);
    dp_model m;
    ck_assert_msg(dp_model_create_owning(&m, dp_backend_cpu(), &spec, &in, 2, DP_MODEL_OWNS_ALL) == DP_EINVAL,
                  "'%s' accepted", text);
    ck_assert_msg(strstr(dp_last_error(), phrase1) && strstr(dp_last_error(), phrase2), "'%s': %s", text,
                  dp_last_error());
}

START_TEST(bad_shapes_name_the_module_and_the_shapes)
{
    assert_refused("conv2d(4,7,padding=1),flatten,linear(2)", image(1, 4, 4), "module 0 (conv2d)",
                   "kernel 7x7 is larger than its input [1, 4, 4] padded by 1");
    assert_refused("conv2d(4,3),flatten,linear(2)", dp_dims_features(784), "module 0 (conv2d) needs images",
                   "[784]");
    assert_refused("conv2d(4,3),maxpool(5),flatten,linear(2)", image(1, 6, 6), "module 1 (maxpool)",
                   "window 5x5 is larger than its input [4, 4, 4]");
    assert_refused("conv2d(4,3),relu,linear(2)", image(1, 6, 6), "module 2 (linear) gets images [4, 4, 4] from module 0 "
                   "(conv2d)", "put flatten before it");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("conv");
    TCase *tc = tcase_create("conv");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, conv_stride_padding_non_square_gradients_match_finite_differences);
    tcase_add_test(tc, conv_k5_batchnorm_avgpool_gradients_match_finite_differences);
    tcase_add_test(tc, overlapping_maxpool_and_batchnorm_gradients_match_finite_differences);
    tcase_add_test(tc, residual_blocks_gradients_match_finite_differences);
    tcase_add_test(tc, nested_residual_blocks_gradients_match_finite_differences);
    tcase_add_test(tc, residual_gradients_become_final_in_reverse_flat_order);
    tcase_add_test(tc, maxpool_gives_ties_gradient_to_the_first_maximum);
    tcase_add_test(tc, conv_in_several_chunks_equals_one_sample_at_a_time);
    tcase_add_test(tc, shapes_and_tensors_follow_pytorch);
    tcase_add_test(tc, bad_shapes_name_the_module_and_the_shapes);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
