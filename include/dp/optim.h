/* Optimizers over a range of the flat parameter buffer: the whole buffer under DDP, a rank's
 * shard under ZeRO. Every rank applies the same update to the same averaged gradient, so the
 * replicas stay bitwise identical without exchanging parameters. The update is one pass that
 * also finishes the gradient (scales it by 1 / the global sample count) and counts its
 * non-finite values. */
#ifndef DP_OPTIM_H
#define DP_OPTIM_H

#include "dp/backend.h"
#include "dp/params.h"

#include <stddef.h>
#include <stdint.h>

typedef enum dp_optimizer_kind { DP_OPTIMIZER_SGD, DP_OPTIMIZER_ADAMW } dp_optimizer_kind;

typedef struct dp_optimizer_config {
    dp_optimizer_kind kind;
    float momentum;       /* SGD */
    float weight_decay;   /* SGD: L2 added to the gradient; AdamW: decoupled */
    float beta1, beta2;   /* AdamW */
    float eps;            /* AdamW */
    int decay_all;        /* AdamW: decay biases and normalisation weights too (PyTorch's default) */
} dp_optimizer_config;

#define DP_OPTIMIZER_MAX_STATE 2

typedef struct dp_optimizer {
    const struct dp_optimizer_type *type;
    const dp_backend *be;
    dp_optimizer_config config;
    const dp_param_table *params;
    size_t begin, end;                     /* the range of the flat buffer it updates */
    float *state[DP_OPTIMIZER_MAX_STATE];  /* backend memory, end - begin each; NULL: unused */
    void *coefs;                           /* backend memory: each pass's coefficients (dp_optimizer_prepare) */
    void *host_coefs;                      /* their staging (alloc_host) */
    int64_t steps;                         /* updates applied (AdamW's bias correction counts them) */
} dp_optimizer;

/* The optimizer of config over [begin, end) of the buffer params describes; state zeroed. */
int dp_optimizer_init(dp_optimizer *o, const dp_backend *be, const dp_optimizer_config *config,
                      const dp_param_table *params, size_t begin, size_t end);
void dp_optimizer_free(dp_optimizer *o);

/* Works out the step's coefficients on the host and queues their copy to backend memory, before
 * the step's work: the passes read them there when they run, so a replayed CUDA graph's pass
 * takes its own step's. Something must wait for the backend's stream (the update's non-finite
 * count) before the next call rewrites the staging. The counting pass scales by count_scale; the applying pass scales
 * by apply_scale and applies update number steps + 1 at learning rate lr. */
void dp_optimizer_prepare(dp_optimizer *o, float count_scale, float apply_scale, float lr);

/* One pass over the range with the prepared coefficients: grads *= the scale, *nonfinite
 * (backend memory) += their NaN and infinite values, and with apply the update (counted in
 * steps). params and grads hold the range alone: element 0 is flat offset `begin` (the whole
 * buffers when begin is 0; a ZeRO shard's own memory otherwise). */
void dp_optimizer_step(dp_optimizer *o, float *params, float *grads, int apply, double *nonfinite);

/* Counts an update that a replayed graph applied (the pass dp_optimizer_step captured). */
void dp_optimizer_count_replayed(dp_optimizer *o);

/* 1 when weight decay applies to parameter-table entry p under this optimizer's rule. */
int dp_optimizer_decays(const dp_optimizer *o, const dp_param *p);

/* "SGD", "AdamW"; the name --optimizer takes; state tensors: how many, and their names in
 * checkpoints ("optimizer.momentum_buffer", "optimizer.exp_avg", ...). */
const char *dp_optimizer_title(const dp_optimizer *o);
const char *dp_optimizer_kind_name(dp_optimizer_kind kind);
int dp_optimizer_state_count(const dp_optimizer *o);
/* 1 when `steps` is state too (AdamW's bias correction), saved as "optimizer.step". */
int dp_optimizer_counts_steps(const dp_optimizer *o);
const char *dp_optimizer_state_name(const dp_optimizer *o, int i);

typedef enum dp_lr_schedule { DP_LR_CONSTANT, DP_LR_COSINE, DP_LR_LINEAR, DP_LR_STEP } dp_lr_schedule;

/* The learning rate over a run: an optional linear warm-up, then a schedule, each as PyTorch's
 * scheduler of the same name computes it. */
typedef struct dp_lr_plan {
    dp_lr_schedule schedule;
    float base;          /* --lr */
    float min;           /* --lr-min: cosine's eta_min, linear's last rate */
    long warmup_steps;   /* 0: none */
    float warmup_start;  /* the warm-up's first factor of base */
    long step_every;     /* step: the rate times gamma every so many steps after the warm-up */
    float step_gamma;
    long total;          /* optimizer steps in the run */
} dp_lr_plan;

/* The learning rate of optimizer step `step` (0 for the first), a function of the global step
 * alone: for step < warmup_steps, base * (warmup_start + (1 - warmup_start) step / warmup_steps)
 * (torch.optim.lr_scheduler.LinearLR); after it, with s = step - warmup_steps and T = total -
 * warmup_steps (SequentialLR's restart of the next scheduler at the milestone): constant base;
 * cosine min + (base - min)(1 + cos(pi s / T)) / 2 (CosineAnnealingLR, T_max = T, eta_min =
 * min); linear base (1 + (min / base - 1) s / T) (LinearLR from 1 to min / base over T);
 * step base gamma^floor(s / step_every) (StepLR). Worked out in double, rounded to float once. */
float dp_lr_at(const dp_lr_plan *plan, long step);

#endif
