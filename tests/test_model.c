/* The model's gradients against finite differences of an independent double-precision
 * forward pass, plus initialisation, layout and the gradient-ready hook. */
#include "dp/error.h"
#include "dp/mlp.h"
#include "dp/rng.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 7 };
static const int widths[] = {5, 6, 4, 3};
#define NWIDTHS 4

typedef struct fixture {
    dp_mlp m;
    float x[ROWS * 5];
    int32_t labels[ROWS];
    float targets[ROWS * 3];
} fixture;

static void make_fixture(fixture *f)
{
    ck_assert_int_eq(dp_mlp_create(&f->m, dp_backend_cpu(), widths, NWIDTHS, ROWS), 0);
    dp_mlp_init_uniform(widths, NWIDTHS, 11, f->m.params);
    dp_rng rng;
    dp_rng_seed(&rng, 99);
    for (int i = 0; i < ROWS * 5; i++)
        f->x[i] = 2.0f * dp_rng_uniform(&rng) - 1.0f;
    for (int r = 0; r < ROWS; r++)
        f->labels[r] = r % 3;
    for (int i = 0; i < ROWS * 3; i++)
        f->targets[i] = dp_rng_uniform(&rng);
}

/* The loss summed over rows, computed from scratch in double: the reference. */
static double reference_loss(const double *params, const float *x, const int32_t *labels,
                             const float *targets, dp_loss loss)
{
    double total = 0.0;
    for (int r = 0; r < ROWS; r++) {
        double act[8], next[8];
        for (int i = 0; i < widths[0]; i++)
            act[i] = x[r * widths[0] + i];
        const double *p = params;
        for (int layer = 0; layer + 1 < NWIDTHS; layer++) {
            int in = widths[layer], out = widths[layer + 1];
            for (int o = 0; o < out; o++) {
                double z = p[out * in + o];
                for (int i = 0; i < in; i++)
                    z += p[o * in + i] * act[i];
                next[o] = layer + 2 < NWIDTHS && z < 0.0 ? 0.0 : z;
            }
            p += out * in + out;
            memcpy(act, next, sizeof act);
        }
        int k = widths[NWIDTHS - 1];
        if (loss == DP_LOSS_XENT) {
            double sum = 0.0;
            for (int c = 0; c < k; c++)
                sum += exp(act[c]);
            total += log(sum) - act[labels[r]];
        } else {
            for (int c = 0; c < k; c++)
                total += (act[c] - targets[r * k + c]) * (act[c] - targets[r * k + c]) / k;
        }
    }
    return total;
}

static void check_gradients_against_finite_differences(dp_loss loss)
{
    fixture f;
    make_fixture(&f);
    double loss_sum = 0.0;
    long correct = 0;
    f.m.be->zero(f.m.grads, f.m.nparams);
    dp_mlp_forward_backward(&f.m, f.x, f.labels, f.targets, ROWS, loss, &loss_sum, &correct);

    double *p = malloc(f.m.nparams * sizeof *p);
    for (size_t i = 0; i < f.m.nparams; i++)
        p[i] = f.m.params[i];
    ck_assert_double_eq_tol(loss_sum, reference_loss(p, f.x, f.labels, f.targets, loss), 1e-5);
    const double h = 1e-6;
    for (size_t i = 0; i < f.m.nparams; i++) {
        double saved = p[i];
        p[i] = saved + h;
        double up = reference_loss(p, f.x, f.labels, f.targets, loss);
        p[i] = saved - h;
        double down = reference_loss(p, f.x, f.labels, f.targets, loss);
        p[i] = saved;
        double numeric = (up - down) / (2 * h);
        ck_assert_msg(fabs(f.m.grads[i] - numeric) <= 1e-4 + 1e-3 * fabs(numeric),
                      "parameter %zu: analytic %.7g, finite difference %.7g", i, f.m.grads[i], numeric);
    }
    free(p);
    dp_mlp_free(&f.m);
}

START_TEST(cross_entropy_gradients_match_finite_differences)
{
    check_gradients_against_finite_differences(DP_LOSS_XENT);
}
END_TEST

START_TEST(mse_gradients_match_finite_differences)
{
    check_gradients_against_finite_differences(DP_LOSS_MSE);
}
END_TEST

START_TEST(backward_accumulates_so_two_halves_equal_the_whole)
{
    fixture f;
    make_fixture(&f);
    double loss_whole = 0.0, loss_halves = 0.0;
    long correct = 0;
    float *whole = malloc(f.m.nparams * sizeof(float));
    f.m.be->zero(f.m.grads, f.m.nparams);
    dp_mlp_forward_backward(&f.m, f.x, f.labels, NULL, ROWS, DP_LOSS_XENT, &loss_whole, &correct);
    memcpy(whole, f.m.grads, f.m.nparams * sizeof(float));
    f.m.be->zero(f.m.grads, f.m.nparams);
    dp_mlp_forward_backward(&f.m, f.x, f.labels, NULL, 3, DP_LOSS_XENT, &loss_halves, &correct);
    dp_mlp_forward_backward(&f.m, f.x + 3 * 5, f.labels + 3, NULL, ROWS - 3, DP_LOSS_XENT,
                            &loss_halves, &correct);
    ck_assert_double_eq_tol(loss_whole, loss_halves, 1e-5);
    for (size_t i = 0; i < f.m.nparams; i++)
        ck_assert_float_eq_tol(whole[i], f.m.grads[i], 1e-5f);
    free(whole);
    dp_mlp_free(&f.m);
}
END_TEST

typedef struct hook_log {
    int calls, layers[8];
    size_t offsets[8], counts[8];
    float snapshot[8][64]; /* each layer's gradient when announced */
    const float *grads;
} hook_log;

static void record_ready(void *ctx, int layer, size_t offset, size_t count)
{
    hook_log *log = ctx;
    log->layers[log->calls] = layer;
    log->offsets[log->calls] = offset;
    log->counts[log->calls] = count;
    memcpy(log->snapshot[log->calls], log->grads + offset, count * sizeof(float));
    log->calls++;
}

START_TEST(gradient_ready_hook_announces_final_layers_last_first)
{
    fixture f;
    make_fixture(&f);
    hook_log log = {.grads = f.m.grads};
    f.m.grad_ready = record_ready;
    f.m.grad_ready_ctx = &log;
    double loss = 0.0;
    long correct = 0;
    f.m.be->zero(f.m.grads, f.m.nparams);
    dp_mlp_forward_backward(&f.m, f.x, f.labels, NULL, ROWS, DP_LOSS_XENT, &loss, &correct);
    ck_assert_int_eq(log.calls, NWIDTHS - 1);
    size_t end = f.m.nparams;
    for (int call = 0; call < log.calls; call++) {
        int layer = NWIDTHS - 2 - call;
        ck_assert_int_eq(log.layers[call], layer);
        ck_assert_uint_eq(log.offsets[call] + log.counts[call], end); /* slices tile the buffer */
        ck_assert_uint_eq(log.counts[call], (size_t)widths[layer + 1] * widths[layer] + widths[layer + 1]);
        ck_assert_mem_eq(log.snapshot[call], f.m.grads + log.offsets[call], log.counts[call] * sizeof(float));
        end = log.offsets[call];
    }
    ck_assert_uint_eq(end, 0);
    log.calls = 0;
    dp_mlp_forward_backward(&f.m, f.x, f.labels, NULL, 0, DP_LOSS_XENT, &loss, &correct);
    ck_assert_int_eq(log.calls, NWIDTHS - 1); /* an empty slice still announces every layer */
    dp_mlp_free(&f.m);
}
END_TEST

START_TEST(initialisation_is_pytorch_uniform_and_seeded)
{
    static const int big[] = {400, 300, 10};
    size_t n = dp_mlp_param_count(big, 3);
    ck_assert_uint_eq(n, 400 * 300 + 300 + 300 * 10 + 10);
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    dp_mlp_init_uniform(big, 3, 5, a);
    dp_mlp_init_uniform(big, 3, 5, b);
    ck_assert_mem_eq(a, b, n * sizeof(float));
    double bound0 = 1.0 / sqrt(400.0), bound1 = 1.0 / sqrt(300.0), max0 = 0.0, sum0 = 0.0;
    for (size_t i = 0; i < 400 * 300 + 300; i++) {
        ck_assert(fabs(a[i]) <= bound0);
        max0 = fmax(max0, fabs(a[i]));
        sum0 += a[i];
    }
    ck_assert(max0 > 0.99 * bound0);                   /* fills the whole range */
    ck_assert(fabs(sum0 / (400 * 300 + 300)) < 0.01 * bound0 * 10); /* centred */
    for (size_t i = 400 * 300 + 300; i < n; i++)
        ck_assert(fabs(a[i]) <= bound1);
    dp_mlp_init_uniform(big, 3, 6, b);
    ck_assert(memcmp(a, b, n * sizeof(float)) != 0);
    free(a);
    free(b);
}
END_TEST

START_TEST(tensor_refs_use_pytorch_names_and_layouts)
{
    float params[6 * 5 + 6 + 4 * 6 + 4 + 3 * 4 + 3];
    dp_tensor_ref refs[6];
    dp_mlp_tensor_refs(widths, NWIDTHS, params, refs);
    ck_assert_str_eq(refs[0].name, "layers.0.weight");
    ck_assert_int_eq(refs[0].ndim, 2);
    ck_assert_int_eq(refs[0].shape[0], 6);
    ck_assert_int_eq(refs[0].shape[1], 5);
    ck_assert_str_eq(refs[1].name, "layers.0.bias");
    ck_assert_ptr_eq(refs[1].data, params + 30);
    ck_assert_str_eq(refs[5].name, "layers.2.bias");
    ck_assert_ptr_eq(refs[5].data + 3, params + sizeof params / sizeof *params);
}
END_TEST

START_TEST(layer_specs_parse_and_bad_ones_are_named)
{
    int w[DP_MLP_MAX_LAYERS + 1], n = 0;
    ck_assert_int_eq(dp_mlp_parse_widths("784,256,10", w, &n), 0);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(w[1], 256);
    static const char *const bad[] = {"", "784", "784,0,10", "784,-3", "784,,10", "784,10,", "7a,10"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_int_lt(dp_mlp_parse_widths(bad[i], w, &n), 0);
        ck_assert_ptr_nonnull(strstr(dp_last_error(), "--layers"));
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("mlp");
    tcase_add_test(tc, cross_entropy_gradients_match_finite_differences);
    tcase_add_test(tc, mse_gradients_match_finite_differences);
    tcase_add_test(tc, backward_accumulates_so_two_halves_equal_the_whole);
    tcase_add_test(tc, gradient_ready_hook_announces_final_layers_last_first);
    tcase_add_test(tc, initialisation_is_pytorch_uniform_and_seeded);
    tcase_add_test(tc, tensor_refs_use_pytorch_names_and_layouts);
    tcase_add_test(tc, layer_specs_parse_and_bad_ones_are_named);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
