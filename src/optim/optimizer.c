/* The optimizer interface: state over a range of the flat buffer, and the pass that walks the
 * range tensor by tensor so each part gets its weight-decay rule from the parameter table. */
#include "dp/optim.h"

#include "dp/error.h"
#include "src/optim/types.h"

#include <math.h>
#include <string.h>

static const dp_optimizer_type *const types[] = {
    [DP_OPTIMIZER_SGD] = &dp_optimizer_sgd,
    [DP_OPTIMIZER_ADAMW] = &dp_optimizer_adamw,
};

const char *dp_optimizer_kind_name(dp_optimizer_kind kind)
{
    return types[kind]->name;
}

int dp_optimizer_init(dp_optimizer *o, const dp_backend *be, const dp_optimizer_config *config,
                      const dp_param_table *params, size_t begin, size_t end)
{
    memset(o, 0, sizeof *o);
    o->type = types[config->kind];
    o->be = be;
    o->config = *config;
    o->params = params;
    o->begin = begin;
    o->end = end;
    for (int i = 0; i < dp_optimizer_state_count(o); i++) {
        size_t n = end - begin;
        o->state[i] = be->alloc(be, (n ? n : 1) * sizeof(float), DP_MEM_OPTIMIZER, o->type->state_names[i]);
        if (!o->state[i]) {
            dp_optimizer_free(o);
            return DP_ENOMEM;
        }
        /* Zero state is PyTorch's first step: v = d for SGD, m = v = 0 for AdamW. */
        be->zero(be, o->state[i], n);
    }
    return 0;
}

void dp_optimizer_free(dp_optimizer *o)
{
    for (int i = 0; i < DP_OPTIMIZER_MAX_STATE; i++)
        if (o->state[i])
            o->be->free(o->be, o->state[i]);
    memset(o->state, 0, sizeof o->state);
}

int dp_optimizer_decays(const dp_optimizer *o, const dp_param *p)
{
    return o->type->decays_everything || o->config.decay_all || (p->flags & DP_PARAM_DECAY);
}

void dp_optimizer_step(dp_optimizer *o, float *params, float *grads, float grad_scale, float lr,
                       int apply, double *nonfinite)
{
    if (apply)
        o->steps++;
    dp_optimizer_pass pass = {.grad_scale = grad_scale, .lr = lr, .apply = apply, .nonfinite = nonfinite};
    /* Runs of consecutive tensors with the same decay rule go to the backend as one range. */
    size_t run_begin = o->begin;
    int run_decays = -1;
    for (int i = 0; i < o->params->count; i++) {
        const dp_param *p = &o->params->entries[i];
        size_t first = p->offset > o->begin ? p->offset : o->begin;
        size_t last = p->offset + p->count < o->end ? p->offset + p->count : o->end;
        if (p->dtype != DP_DTYPE_F32 || first >= last)
            continue;
        int decays = dp_optimizer_decays(o, p);
        if (run_decays >= 0 && decays != run_decays) {
            o->type->run(o, &pass, params, grads, run_begin, first, run_decays);
            run_begin = first;
        }
        run_decays = decays;
    }
    if (run_decays >= 0)
        o->type->run(o, &pass, params, grads, run_begin, o->end, run_decays);
}

const char *dp_optimizer_title(const dp_optimizer *o)
{
    return o->type->title;
}

int dp_optimizer_state_count(const dp_optimizer *o)
{
    return o->type->state_count(o);
}

int dp_optimizer_counts_steps(const dp_optimizer *o)
{
    return o->type->counts_steps;
}

const char *dp_optimizer_state_name(const dp_optimizer *o, int i)
{
    return o->type->state_names[i];
}

float dp_lr_at(dp_lr_schedule schedule, float base, long step, long total)
{
    if (schedule == DP_LR_CONSTANT || total <= 0)
        return base;
    return (float)(0.5 * base * (1.0 + cos(3.14159265358979323846 * (double)step / (double)total)));
}
