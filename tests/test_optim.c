/* SGD against values worked by hand from torch.optim.SGD's definition. */
#include "dp/optim.h"
#include "tests/testutil.h"

#include <stdlib.h>

static void run_steps(float lr, float momentum, float weight_decay, const float *grad_per_step,
                      int steps, float *param, float *after)
{
    dp_sgd opt;
    ck_assert_int_eq(dp_sgd_init(&opt, dp_backend_cpu(), 1, lr, momentum, weight_decay), 0);
    for (int s = 0; s < steps; s++) {
        dp_sgd_step(&opt, param, &grad_per_step[s]);
        after[s] = *param;
    }
    dp_sgd_free(&opt);
}

START_TEST(momentum_buffer_starts_at_the_first_gradient)
{
    const float grads[] = {0.5f, 0.5f, 0.5f};
    float p = 1.0f, after[3];
    run_steps(0.1f, 0.9f, 0.0f, grads, 3, &p, after);
    /* v1 = 0.5, v2 = 0.95, v3 = 1.355 */
    ck_assert_float_eq_tol(after[0], 0.95f, 1e-6f);
    ck_assert_float_eq_tol(after[1], 0.855f, 1e-6f);
    ck_assert_float_eq_tol(after[2], 0.7195f, 1e-6f);
}
END_TEST

START_TEST(weight_decay_is_added_to_the_gradient_before_momentum)
{
    const float grads[] = {0.0f, 0.0f};
    float p = 1.0f, after[2];
    run_steps(0.1f, 0.9f, 0.1f, grads, 2, &p, after);
    /* d1 = 0.1, v1 = 0.1; d2 = 0.099, v2 = 0.189 */
    ck_assert_float_eq_tol(after[0], 0.99f, 1e-6f);
    ck_assert_float_eq_tol(after[1], 0.9711f, 1e-6f);
}
END_TEST

START_TEST(plain_sgd_without_momentum_keeps_no_state)
{
    const float grads[] = {0.5f, -1.0f};
    float p = 1.0f, after[2];
    dp_sgd opt;
    ck_assert_int_eq(dp_sgd_init(&opt, dp_backend_cpu(), 1, 0.1f, 0.0f, 0.0f), 0);
    ck_assert_ptr_null(opt.velocity);
    dp_sgd_free(&opt);
    run_steps(0.1f, 0.0f, 0.0f, grads, 2, &p, after);
    ck_assert_float_eq_tol(after[0], 0.95f, 1e-7f);
    ck_assert_float_eq_tol(after[1], 1.05f, 1e-7f);
}
END_TEST

START_TEST(every_element_is_updated_independently)
{
    enum { N = 1001 };
    float *p = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) {
        p[i] = (float)i;
        g[i] = (float)(i % 7) - 3.0f;
    }
    dp_sgd opt;
    ck_assert_int_eq(dp_sgd_init(&opt, dp_backend_cpu(), N, 0.5f, 0.0f, 0.0f), 0);
    dp_sgd_step(&opt, p, g);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(p[i], (float)i - 0.5f * ((float)(i % 7) - 3.0f));
    dp_sgd_free(&opt);
    free(p);
    free(g);
}
END_TEST

START_TEST(cosine_schedule_anneals_from_base_to_zero)
{
    ck_assert_float_eq(dp_lr_at(DP_LR_CONSTANT, 0.1f, 70, 100), 0.1f);
    ck_assert_float_eq_tol(dp_lr_at(DP_LR_COSINE, 0.1f, 0, 100), 0.1f, 1e-8f);
    ck_assert_float_eq_tol(dp_lr_at(DP_LR_COSINE, 0.1f, 50, 100), 0.05f, 1e-8f);
    ck_assert_float_eq_tol(dp_lr_at(DP_LR_COSINE, 0.1f, 25, 100), 0.1f * (0.5f + 0.5f * 0.70710678f), 1e-7f);
    ck_assert_float_eq_tol(dp_lr_at(DP_LR_COSINE, 0.1f, 100, 100), 0.0f, 1e-8f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("sgd");
    tcase_add_test(tc, momentum_buffer_starts_at_the_first_gradient);
    tcase_add_test(tc, weight_decay_is_added_to_the_gradient_before_momentum);
    tcase_add_test(tc, plain_sgd_without_momentum_keeps_no_state);
    tcase_add_test(tc, every_element_is_updated_independently);
    tcase_add_test(tc, cosine_schedule_anneals_from_base_to_zero);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
