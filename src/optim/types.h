/* Inside optim: what each optimizer provides. */
#ifndef DP_OPTIM_TYPES_H
#define DP_OPTIM_TYPES_H

#include "dp/optim.h"

/* What one pass over the range asks of every run of tensors. */
typedef struct dp_optimizer_pass {
    float grad_scale, lr;
    int apply;
    double *nonfinite;
} dp_optimizer_pass;

typedef struct dp_optimizer_type {
    const char *name;   /* as --optimizer takes it */
    const char *title;  /* as PyTorch spells it */
    const char *state_names[DP_OPTIMIZER_MAX_STATE];
    int decays_everything; /* SGD's L2 term applies to every parameter, as torch.optim.SGD */
    int counts_steps;      /* its update depends on how many it has applied (AdamW's bias correction) */
    int (*state_count)(const dp_optimizer *o);
    /* The pass over [begin, end) of the flat buffers (absolute offsets; params and grads start
     * at o->begin), one decay rule. */
    void (*run)(const dp_optimizer *o, const dp_optimizer_pass *pass, float *params, float *grads,
                size_t begin, size_t end, int decays);
} dp_optimizer_type;

extern const dp_optimizer_type dp_optimizer_sgd, dp_optimizer_adamw;

#endif
