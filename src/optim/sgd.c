#include "dp/optim.h"

#include "dp/error.h"

#include <math.h>

int dp_sgd_init(dp_sgd *opt, const dp_backend *be, size_t count, float lr, float momentum,
                float weight_decay)
{
    opt->be = be;
    opt->count = count;
    opt->lr = lr;
    opt->momentum = momentum;
    opt->weight_decay = weight_decay;
    opt->velocity = NULL;
    if (momentum == 0.0f)
        return 0;
    opt->velocity = be->alloc(count * sizeof(float), "the momentum buffer");
    if (!opt->velocity)
        return DP_ENOMEM;
    /* Zero velocity makes the first step v = d, exactly PyTorch's first-step buffer. */
    be->zero(opt->velocity, count);
    return 0;
}

void dp_sgd_step(dp_sgd *opt, float *params, const float *grads)
{
    opt->be->sgd_update(params, grads, opt->velocity, opt->count, opt->lr, opt->momentum,
                        opt->weight_decay);
}

void dp_sgd_free(dp_sgd *opt)
{
    if (opt->be && opt->velocity)
        opt->be->free(opt->velocity);
    opt->velocity = NULL;
}

float dp_lr_at(dp_lr_schedule schedule, float base, long step, long total)
{
    if (schedule == DP_LR_CONSTANT || total <= 0)
        return base;
    return (float)(0.5 * base * (1.0 + cos(3.14159265358979323846 * (double)step / (double)total)));
}
