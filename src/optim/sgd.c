/* torch.optim.SGD (dampening 0, no Nesterov): d = g + wd p; v = momentum v + d (v = d on the
 * first step, which zero state gives exactly); p -= lr v. Weight decay applies to every
 * parameter, as PyTorch's SGD does. */
#include "src/optim/types.h"

static int sgd_state_count(const dp_optimizer *o)
{
    return o->config.momentum != 0.0f;
}

static void sgd_coefs(const dp_optimizer *o, const dp_optimizer_pass *pass, int decays, dp_optimizer_coefs *out)
{
    out->sgd = (dp_sgd_coefs){.grad_scale = pass->grad_scale, .lr = pass->lr, .momentum = o->config.momentum,
                              .weight_decay = decays ? o->config.weight_decay : 0.0f, .apply = pass->apply};
}

static void sgd_run(const dp_optimizer *o, const dp_optimizer_coefs *k, float *params, float *grads, size_t begin,
                    size_t end, double *nonfinite)
{
    size_t at = begin - o->begin;
    float *velocity = o->state[0] ? o->state[0] + at : NULL;
    o->be->sgd_step(o->be, params + at, grads + at, velocity, end - begin, &k->sgd, nonfinite);
}

const dp_optimizer_type dp_optimizer_sgd = {
    .name = "sgd",
    .title = "SGD",
    .state_names = {"optimizer.momentum_buffer"},
    .decays_everything = 1,
    .state_count = sgd_state_count,
    .coefs = sgd_coefs,
    .run = sgd_run,
};
