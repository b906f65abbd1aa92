/* torch.optim.AdamW (amsgrad off): decoupled weight decay p *= 1 - lr wd, then Adam with bias
 * correction. The scalars are worked out in double and rounded to float once, as PyTorch's
 * Python scalars are when they meet float32 tensors. By default biases and normalisation
 * weights are not decayed (most recipes' choice); decay_all decays everything. */
#include "src/optim/types.h"

#include <math.h>

static int adamw_state_count(const dp_optimizer *o)
{
    (void)o;
    return 2;
}

static void adamw_coefs(const dp_optimizer *o, const dp_optimizer_pass *pass, int decays, dp_optimizer_coefs *out)
{
    const dp_optimizer_config *c = &o->config;
    double lr = pass->lr, beta1 = c->beta1, beta2 = c->beta2, step = (double)pass->step;
    double bias_correction1 = 1.0 - pow(beta1, step), bias_correction2 = 1.0 - pow(beta2, step);
    out->adamw = (dp_adamw_coefs){
        .grad_scale = pass->grad_scale,
        .decay_factor = (float)(1.0 - lr * (decays ? c->weight_decay : 0.0f)),
        .beta1 = c->beta1,
        .one_minus_beta1 = (float)(1.0 - beta1),
        .beta2 = c->beta2,
        .one_minus_beta2 = (float)(1.0 - beta2),
        .bias_correction2_sqrt = (float)sqrt(bias_correction2),
        .eps = c->eps,
        .neg_step_size = (float)(-lr / bias_correction1),
        .apply = pass->apply,
    };
}

static void adamw_run(const dp_optimizer *o, const dp_optimizer_coefs *k, float *params, float *grads, size_t begin,
                      size_t end, double *nonfinite)
{
    size_t at = begin - o->begin;
    o->be->adamw_step(o->be, params + at, grads + at, o->state[0] + at, o->state[1] + at, end - begin, &k->adamw,
                      nonfinite);
}

const dp_optimizer_type dp_optimizer_adamw = {
    .name = "adamw",
    .title = "AdamW",
    .state_names = {"optimizer.exp_avg", "optimizer.exp_avg_sq"},
    .counts_steps = 1,
    .state_count = adamw_state_count,
    .coefs = adamw_coefs,
    .run = adamw_run,
};
