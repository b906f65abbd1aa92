/* Inside optim: what each optimizer provides. */
#ifndef DP_OPTIM_TYPES_H
#define DP_OPTIM_TYPES_H

#include "dp/optim.h"

/* What one pass over the range asks of every run of tensors; step numbers the update it applies. */
typedef struct dp_optimizer_pass {
    float grad_scale, lr;
    int apply;
    int64_t step;
} dp_optimizer_pass;

/* One run's coefficients as the backend's pass reads them (backend memory). */
typedef union dp_optimizer_coefs {
    dp_sgd_coefs sgd;
    dp_adamw_coefs adamw;
} dp_optimizer_coefs;

typedef struct dp_optimizer_type {
    const char *name;   /* as --optimizer takes it */
    const char *title;  /* as PyTorch spells it */
    const char *state_names[DP_OPTIMIZER_MAX_STATE];
    int decays_everything; /* SGD's L2 term applies to every parameter, as torch.optim.SGD */
    int counts_steps;      /* its update depends on how many it has applied (AdamW's bias correction) */
    int (*state_count)(const dp_optimizer *o);
    /* The coefficients of a pass over tensors of one decay rule, worked out on the host. */
    void (*coefs)(const dp_optimizer *o, const dp_optimizer_pass *pass, int decays, dp_optimizer_coefs *out);
    /* The backend's pass over [begin, end) of the flat buffers (absolute offsets; params and
     * grads start at o->begin) with the coefficients k (backend memory). */
    void (*run)(const dp_optimizer *o, const dp_optimizer_coefs *k, float *params, float *grads, size_t begin,
                size_t end, double *nonfinite);
} dp_optimizer_type;

extern const dp_optimizer_type dp_optimizer_sgd, dp_optimizer_adamw;

#endif
