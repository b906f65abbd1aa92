/* SGD and AdamW against values worked by hand from torch.optim.SGD's definition and
 * computed by torch.optim.AdamW (PyTorch 1.13), weight-decay rules from the parameter table,
 * the fused gradient scaling and non-finite count, and updates over a range. */
#include "dp/optim.h"
#include "tests/testutil.h"
#include "tests/controls_reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* A table of one weight matrix [rows, 1] (decayed) followed by a bias [bias_count] (not). */
static void weight_and_bias(dp_param_table *t, int64_t rows, int64_t bias_count)
{
    int64_t weight_shape[2] = {rows, 1}, bias_shape[1] = {bias_count};
    *t = (dp_param_table){0};
    ck_assert_int_eq(dp_params_add(t, "layers.0.weight", 2, weight_shape, DP_DTYPE_F32, DP_PARAM_DECAY, 0), 0);
    if (bias_count)
        ck_assert_int_eq(dp_params_add(t, "layers.0.bias", 1, bias_shape, DP_DTYPE_F32, 0, 0), 0);
}

/* steps updates of params (count elements) with the gradients grads[step][i], scale 1. */
static void run_steps(dp_optimizer_config config, float lr, const dp_param_table *t, float *params, const float *grads,
                      int steps, float *after)
{
    size_t n = dp_params_floats(t);
    dp_optimizer opt;
    ck_assert_int_eq(dp_optimizer_init(&opt, dp_backend_cpu(), &config, t, 0, n), 0);
    float *g = malloc(n * sizeof(float));
    double nonfinite = 0.0;
    for (int s = 0; s < steps; s++) {
        for (size_t i = 0; i < n; i++)
            g[i] = grads[(size_t)s * n + i];
        dp_optimizer_prepare(&opt, 1.0f, 1.0f, lr);
        dp_optimizer_step(&opt, params, g, 1, &nonfinite);
        for (size_t i = 0; i < n; i++)
            after[(size_t)s * n + i] = params[i];
    }
    ck_assert(nonfinite == 0.0);
    ck_assert_int_eq(opt.steps, steps);
    free(g);
    dp_optimizer_free(&opt);
}

static dp_optimizer_config sgd(float momentum, float weight_decay)
{
    return (dp_optimizer_config){.kind = DP_OPTIMIZER_SGD, .momentum = momentum, .weight_decay = weight_decay};
}

START_TEST(momentum_buffer_starts_at_the_first_gradient)
{
    dp_param_table t;
    weight_and_bias(&t, 1, 0);
    const float grads[] = {0.5f, 0.5f, 0.5f};
    float p = 1.0f, after[3];
    run_steps(sgd(0.9f, 0.0f), 0.1f, &t, &p, grads, 3, after);
    /* v1 = 0.5, v2 = 0.95, v3 = 1.355 */
    ck_assert_float_eq_tol(after[0], 0.95f, 1e-6f);
    ck_assert_float_eq_tol(after[1], 0.855f, 1e-6f);
    ck_assert_float_eq_tol(after[2], 0.7195f, 1e-6f);
    dp_params_free(&t);
}
END_TEST

START_TEST(sgd_weight_decay_is_added_to_every_gradient_before_momentum)
{
    dp_param_table t;
    weight_and_bias(&t, 1, 1); /* torch.optim.SGD decays biases too */
    const float grads[] = {0.0f, 0.0f, 0.0f, 0.0f};
    float p[2] = {1.0f, 1.0f}, after[4];
    run_steps(sgd(0.9f, 0.1f), 0.1f, &t, p, grads, 2, after);
    /* d1 = 0.1, v1 = 0.1; d2 = 0.099, v2 = 0.189 */
    for (int i = 0; i < 2; i++) {
        ck_assert_float_eq_tol(after[i], 0.99f, 1e-6f);
        ck_assert_float_eq_tol(after[2 + i], 0.9711f, 1e-6f);
    }
    dp_params_free(&t);
}
END_TEST

START_TEST(plain_sgd_without_momentum_keeps_no_state)
{
    dp_param_table t;
    weight_and_bias(&t, 1, 0);
    dp_optimizer opt;
    dp_optimizer_config config = sgd(0.0f, 0.0f);
    ck_assert_int_eq(dp_optimizer_init(&opt, dp_backend_cpu(), &config, &t, 0, 1), 0);
    ck_assert_int_eq(dp_optimizer_state_count(&opt), 0);
    ck_assert_ptr_null(opt.state[0]);
    dp_optimizer_free(&opt);
    const float grads[] = {0.5f, -1.0f};
    float p = 1.0f, after[2];
    run_steps(config, 0.1f, &t, &p, grads, 2, after);
    ck_assert_float_eq_tol(after[0], 0.95f, 1e-7f);
    ck_assert_float_eq_tol(after[1], 1.05f, 1e-7f);
    dp_params_free(&t);
}
END_TEST

/* torch.optim.AdamW(lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1) with the bias in a
 * group of weight_decay 0 (dptrain's default rule), three steps; values from PyTorch 1.13. */
START_TEST(adamw_matches_pytorch_and_skips_decay_on_biases)
{
    dp_param_table t;
    weight_and_bias(&t, 2, 1);
    const float grads[] = {0.5f, -1.0f, 2.0f, 0.25f, 0.75f, -0.5f, -1.5f, 0.125f, 1.0f};
    static const float expected[] = {0.89000004529953f, -1.8799999952316284f, 0.4000000059604645f,
                                     0.7878820896148682f, -1.8522675037384033f, 0.35305318236351013f,
                                     0.8147255778312683f, -1.8332359790802002f, 0.29250577092170715f};
    float p[3] = {1.0f, -2.0f, 0.5f}, after[9];
    dp_optimizer_config config = {.kind = DP_OPTIMIZER_ADAMW, .beta1 = 0.9f, .beta2 = 0.999f,
                                  .eps = 1e-8f, .weight_decay = 0.1f};
    run_steps(config, 0.1f, &t, p, grads, 3, after);
    for (int i = 0; i < 9; i++)
        ck_assert_msg(fabsf(after[i] - expected[i]) <= 2e-7f * fabsf(expected[i]) + 1e-7f,
                      "element %d after step %d: %.9g, PyTorch %.9g", i % 3, i / 3 + 1, after[i], expected[i]);
    dp_params_free(&t);
}
END_TEST

/* decay_all decays the bias too: torch.optim.AdamW's own default, lr 0.1, weight decay 0.1. */
START_TEST(adamw_decay_all_decays_biases_like_pytorchs_default)
{
    dp_param_table t;
    weight_and_bias(&t, 1, 1);
    const float grads[] = {0.0f, 2.0f, 0.0f, -0.5f, 0.0f, 1.0f};
    static const float expected_bias[] = {0.39500001072883606f, 0.3441031873226166f, 0.2801147401332855f};
    float p[2] = {0.0f, 0.5f}, after[6];
    dp_optimizer_config config = {.kind = DP_OPTIMIZER_ADAMW, .beta1 = 0.9f, .beta2 = 0.999f,
                                  .eps = 1e-8f, .weight_decay = 0.1f, .decay_all = 1};
    run_steps(config, 0.1f, &t, p, grads, 3, after);
    for (int s = 0; s < 3; s++)
        ck_assert_float_eq_tol(after[2 * s + 1], expected_bias[s], 2e-7f);
    dp_params_free(&t);
}
END_TEST

/* The pass finishes the gradient (x scale), counts non-finite values, and with apply 0 leaves
 * the parameters and the optimizer's step alone (--on-nan skip's first pass). */
START_TEST(the_pass_scales_gradients_and_counts_nonfinite_ones)
{
    dp_param_table t;
    weight_and_bias(&t, 4, 0);
    dp_optimizer_config config = {.kind = DP_OPTIMIZER_ADAMW, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    dp_optimizer opt;
    ck_assert_int_eq(dp_optimizer_init(&opt, dp_backend_cpu(), &config, &t, 0, 4), 0);
    float p[4] = {1, 2, 3, 4}, g[4] = {2.0f, NAN, -4.0f, INFINITY};
    double nonfinite = 0.0;
    dp_optimizer_prepare(&opt, 0.25f, 1.0f, 0.1f);
    dp_optimizer_step(&opt, p, g, 0, &nonfinite);
    ck_assert(nonfinite == 2.0);
    ck_assert_float_eq(g[0], 0.5f);
    ck_assert_float_eq(g[2], -1.0f);
    ck_assert_float_eq(p[0], 1.0f);
    ck_assert_float_eq(p[3], 4.0f);
    ck_assert_int_eq(opt.steps, 0);
    dp_optimizer_free(&opt);
    dp_params_free(&t);
}
END_TEST

/* A ZeRO shard is a range: the pass is handed the range's own memory (element 0 = offset
 * begin), touches nothing else, and its state is the range's. */
START_TEST(an_optimizer_over_a_range_updates_only_that_range)
{
    enum { N = 1001 };
    dp_param_table t;
    weight_and_bias(&t, 1000, 1);
    float *p = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) {
        p[i] = (float)i;
        g[i] = (float)(i % 7) - 3.0f;
    }
    dp_optimizer opt;
    dp_optimizer_config config = sgd(0.0f, 0.0f);
    ck_assert_int_eq(dp_optimizer_init(&opt, dp_backend_cpu(), &config, &t, 300, 1001), 0);
    double nonfinite = 0.0;
    dp_optimizer_prepare(&opt, 1.0f, 1.0f, 0.5f);
    dp_optimizer_step(&opt, p + 300, g + 300, 1, &nonfinite);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(p[i], i < 300 ? (float)i : (float)i - 0.5f * ((float)(i % 7) - 3.0f));
    dp_optimizer_free(&opt);
    dp_params_free(&t);
    free(p);
    free(g);
}
END_TEST

static float lr_at(dp_lr_schedule schedule, float base, long step, long total)
{
    dp_lr_plan plan = {.schedule = schedule, .base = base, .total = total};
    return dp_lr_at(&plan, step);
}

START_TEST(cosine_schedule_anneals_from_base_to_zero)
{
    ck_assert_float_eq(lr_at(DP_LR_CONSTANT, 0.1f, 70, 100), 0.1f);
    ck_assert_float_eq_tol(lr_at(DP_LR_COSINE, 0.1f, 0, 100), 0.1f, 1e-8f);
    ck_assert_float_eq_tol(lr_at(DP_LR_COSINE, 0.1f, 50, 100), 0.05f, 1e-8f);
    ck_assert_float_eq_tol(lr_at(DP_LR_COSINE, 0.1f, 25, 100), 0.1f * (0.5f + 0.5f * 0.70710678f), 1e-7f);
    ck_assert_float_eq_tol(lr_at(DP_LR_COSINE, 0.1f, 100, 100), 0.0f, 1e-8f);
    /* Version 4's cosine, bit for bit: a run without the new settings keeps its rates. */
    for (long step = 0; step < 100; step++)
        ck_assert_float_eq(lr_at(DP_LR_COSINE, 0.05f, step, 100),
                           (float)(0.5 * 0.05f * (1.0 + cos(3.14159265358979323846 * (double)step / 100.0))));
}
END_TEST

/* Every step of 200-step runs against torch.optim.lr_scheduler (LinearLR's warm-up, SequentialLR
 * into CosineAnnealingLR, LinearLR, StepLR or a constant; tests/controls_reference.h): PyTorch
 * chains each step's rate from the last in double, dptrain works each out from the step, and
 * both round to the same float32 at every step. */
START_TEST(schedules_match_pytorchs_at_every_step)
{
    int steps = 0;
    for (size_t r = 0; r < sizeof lr_references / sizeof *lr_references; r++) {
        const struct lr_reference *ref = &lr_references[r];
        dp_lr_plan plan = {.schedule = (dp_lr_schedule)ref->schedule, .base = ref->base, .min = ref->lr_min,
                           .warmup_steps = ref->warmup, .warmup_start = ref->start, .step_every = ref->every,
                           .step_gamma = ref->gamma, .total = CONTROLS_TOTAL_STEPS};
        for (long step = 0; step < CONTROLS_TOTAL_STEPS; step++, steps++) {
            float ours = dp_lr_at(&plan, step), theirs = (float)ref->lr[step];
            ck_assert_msg(ours == theirs, "%s: step %ld: %.9g, PyTorch %.17g", ref->name, step, (double)ours,
                          ref->lr[step]);
        }
    }
    printf("schedules: %d steps of %zu runs, every one PyTorch's float32\n", steps,
           sizeof lr_references / sizeof *lr_references);
}
END_TEST

/* --clip-grad-norm's arithmetic against torch.nn.utils.clip_grad_norm_ on three tensors' gradients
 * (tests/controls_reference.h, max_norm 1.5): the norm of the averaged gradient (here 8 x the
 * gradient summed, scaled by 1/8 as the update scales it) from the backend's sum of squares, and
 * the update with the gradient scaled by max / (norm + 1e-6) (src/engine/update.c): SGD at lr 1
 * from zeros leaves minus the clipped gradient. Both within 1e-6 relative of PyTorch's. */
START_TEST(clipping_matches_pytorchs_clip_grad_norm)
{
    enum { N = sizeof clip_grads / sizeof *clip_grads };
    int64_t shape[1] = {N};
    dp_param_table t = {0};
    ck_assert_int_eq(dp_params_add(&t, "layers.0.weight", 1, shape, DP_DTYPE_F32, 0, 0), 0);
    float summed[N], params[N] = {0};
    for (int i = 0; i < N; i++)
        summed[i] = 8.0f * clip_grads[i];
    const dp_backend *be = dp_backend_cpu();
    double squares = 0.0;
    be->sum_squares(be, summed, N, 0.125f, &squares);
    double norm = sqrt(squares), coef = (double)CLIP_MAX_NORM / (norm + 1e-6);
    ck_assert_msg(fabs(norm - clip_norm) <= 1e-6 * clip_norm, "norm %.9g, PyTorch %.9g", norm, clip_norm);
    ck_assert(coef < 1.0);
    dp_optimizer opt;
    dp_optimizer_config config = sgd(0.0f, 0.0f);
    ck_assert_int_eq(dp_optimizer_init(&opt, be, &config, &t, 0, N), 0);
    double nonfinite = 0.0;
    dp_optimizer_prepare(&opt, 0.125f, (float)(0.125 * coef), 1.0f);
    dp_optimizer_step(&opt, params, summed, 1, &nonfinite);
    for (int i = 0; i < N; i++)
        ck_assert_msg(fabsf(-params[i] - clip_clipped[i]) <= 1e-6f * fabsf(clip_clipped[i]), "element %d: %.9g, PyTorch %.9g",
                      i, (double)-params[i], (double)clip_clipped[i]);
    dp_optimizer_free(&opt);
    dp_params_free(&t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("optimizers");
    tcase_add_test(tc, momentum_buffer_starts_at_the_first_gradient);
    tcase_add_test(tc, sgd_weight_decay_is_added_to_every_gradient_before_momentum);
    tcase_add_test(tc, plain_sgd_without_momentum_keeps_no_state);
    tcase_add_test(tc, adamw_matches_pytorch_and_skips_decay_on_biases);
    tcase_add_test(tc, adamw_decay_all_decays_biases_like_pytorchs_default);
    tcase_add_test(tc, the_pass_scales_gradients_and_counts_nonfinite_ones);
    tcase_add_test(tc, an_optimizer_over_a_range_updates_only_that_range);
    tcase_add_test(tc, cosine_schedule_anneals_from_base_to_zero);
    tcase_add_test(tc, schedules_match_pytorchs_at_every_step);
    tcase_add_test(tc, clipping_matches_pytorchs_clip_grad_norm);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
