/* Optimizers. Every rank applies the same update to the same averaged gradient, so the
 * replicas stay bitwise identical without exchanging parameters. */
#ifndef DP_OPTIM_H
#define DP_OPTIM_H

#include "dp/backend.h"

#include <stddef.h>

typedef struct dp_sgd {
    const dp_backend *be;
    size_t count;
    float lr, momentum, weight_decay;
    float *velocity; /* backend memory; NULL without momentum */
} dp_sgd;

/* SGD with PyTorch's semantics (torch.optim.SGD, dampening 0, no Nesterov). */
int dp_sgd_init(dp_sgd *opt, const dp_backend *be, size_t count, float lr, float momentum,
                float weight_decay);
void dp_sgd_step(dp_sgd *opt, float *params, const float *grads);
void dp_sgd_free(dp_sgd *opt);

typedef enum dp_lr_schedule { DP_LR_CONSTANT, DP_LR_COSINE } dp_lr_schedule;

/* Learning rate for optimizer step `step` of `total`: constant, or cosine annealing from
 * base to 0 (as torch.optim.lr_scheduler.CosineAnnealingLR with T_max = total, eta_min = 0). */
float dp_lr_at(dp_lr_schedule schedule, float base, long step, long total);

#endif
