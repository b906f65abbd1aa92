/* A small residual network (a stem, an identity BasicBlock, one with a projection shortcut, global
 * average pooling) trained 20 full-batch steps equals PyTorch's: SGD with momentum and weight
 * decay, and AdamW, from the same initial tensors on the same data. Each step's loss and the final
 * parameters and running statistics agree to 1e-5 (tests/resnet_reference.h, written by
 * scripts/torch_reference_resnet.py with PyTorch; this test needs no PyTorch). */
#include "dp/error.h"
#include "dp/nn.h"
#include "dp/optim.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "tests/resnet_reference.h"

/* Where tensor `name` lives in m's flat buffers: the parameters or the running statistics. */
static float *tensor_of(dp_model *m, const char *name, int count)
{
    const dp_param *p = dp_params_find(&m->params, name);
    float *base = m->weights;
    if (!p) {
        p = dp_params_find(&m->buffers, name);
        base = m->buffer_values;
    }
    ck_assert_msg(p && (int)p->count == count, "tensor %s missing or of another size", name);
    return base + p->offset;
}

static double relative_error(const float *a, const float *b, int n)
{
    double diff = 0.0, norm = 0.0;
    for (int i = 0; i < n; i++) {
        diff += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        norm += (double)b[i] * b[i];
    }
    return sqrt(diff / (norm > 0.0 ? norm : 1.0));
}

static void train_like_pytorch(const dp_optimizer_config *config, float lr, const double *losses,
                               const struct resnet_ref_tensor *final, int final_count)
{
    dp_model_spec spec;
    ck_assert_msg(dp_model_spec_parse(RESNET_REF_SPEC, &spec) == 0, "%s", dp_last_error());
    dp_dims image = {.ndim = 3, .dim = {RESNET_REF_CHANNELS, RESNET_REF_HEIGHT, RESNET_REF_WIDTH}};
    dp_model m;
    ck_assert_msg(dp_model_create_owning(&m, dp_backend_cpu(), &spec, &image, RESNET_REF_ROWS, DP_MODEL_OWNS_ALL) == 0,
                  "%s", dp_last_error());
    for (size_t i = 0; i < sizeof resnet_ref_init / sizeof *resnet_ref_init; i++) {
        const struct resnet_ref_tensor *t = &resnet_ref_init[i];
        float *to = tensor_of(&m, t->name, t->count);
        for (int j = 0; j < t->count; j++)
            to[j] = t->values[j];
    }
    size_t n = dp_params_floats(&m.params);
    dp_optimizer opt;
    ck_assert_int_eq(dp_optimizer_init(&opt, dp_backend_cpu(), config, &m.params, 0, n), 0);
    dp_nn_context ctx = {.be = dp_backend_cpu(), .training = 1};
    float scale = 1.0f / RESNET_REF_ROWS; /* the mean loss: summed row gradients, scaled once */
    for (int step = 0; step < RESNET_REF_STEPS; step++) {
        const float *out;
        double totals[2] = {0.0, 0.0}, nonfinite = 0.0;
        ck_assert_int_eq(dp_model_forward(&m, &ctx, resnet_ref_x, RESNET_REF_ROWS, &out), 0);
        dp_model_loss(&m, DP_LOSS_XENT, out, resnet_ref_labels, NULL, RESNET_REF_ROWS, m.delta[0], totals);
        ck_assert_int_eq(dp_model_backward(&m, &ctx, m.delta[0], RESNET_REF_ROWS, NULL), 0);
        double loss = totals[0] / RESNET_REF_ROWS;
        ck_assert_msg(fabs(loss - losses[step]) <= 1e-5 * fabs(losses[step]), "%s step %d: loss %.9g, PyTorch's %.9g",
                      dp_optimizer_title(&opt), step + 1, loss, losses[step]);
        dp_optimizer_prepare(&opt, scale, scale, lr);
        dp_optimizer_step(&opt, m.weights, m.grads, 1, &nonfinite);
    }
    for (int i = 0; i < final_count; i++) {
        const struct resnet_ref_tensor *t = &final[i];
        double error = relative_error(tensor_of(&m, t->name, t->count), t->values, t->count);
        ck_assert_msg(error <= 1e-5, "%s: %s differs from PyTorch's by %.3g after %d steps", dp_optimizer_title(&opt),
                      t->name, error, RESNET_REF_STEPS);
    }
    printf("%s: %d steps of the residual network equal PyTorch's (losses %.6f -> %.6f)\n", dp_optimizer_title(&opt),
           RESNET_REF_STEPS, losses[0], losses[RESNET_REF_STEPS - 1]);
    dp_optimizer_free(&opt);
    dp_model_free(&m);
}

START_TEST(residual_network_trains_as_pytorch_with_sgd)
{
    dp_optimizer_config sgd = {.kind = DP_OPTIMIZER_SGD, .momentum = 0.9f, .weight_decay = 1e-3f};
    train_like_pytorch(&sgd, 0.1f, resnet_ref_sgd_losses, resnet_ref_sgd,
                       (int)(sizeof resnet_ref_sgd / sizeof *resnet_ref_sgd));
}
END_TEST

START_TEST(residual_network_trains_as_pytorch_with_adamw)
{
    dp_optimizer_config adamw = {.kind = DP_OPTIMIZER_ADAMW, .weight_decay = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                                 .eps = 1e-8f};
    train_like_pytorch(&adamw, 0.01f, resnet_ref_adamw_losses, resnet_ref_adamw,
                       (int)(sizeof resnet_ref_adamw / sizeof *resnet_ref_adamw));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("residual");
    TCase *tc = tcase_create("pytorch");
    tcase_add_test(tc, residual_network_trains_as_pytorch_with_sgd);
    tcase_add_test(tc, residual_network_trains_as_pytorch_with_adamw);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s);
}
