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

/* The coefficient slots: one per pass (counting, applying) and decay rule. */
enum { PASSES = 2, DECAY_RULES = 2, COEF_SLOTS = PASSES * DECAY_RULES };

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
    o->coefs = be->alloc(be, COEF_SLOTS * sizeof(dp_optimizer_coefs), DP_MEM_OPTIMIZER, "the optimizer's coefficients");
    o->host_coefs = o->coefs ? be->alloc_host(be, COEF_SLOTS * sizeof(dp_optimizer_coefs), "their staging") : NULL;
    if (!o->host_coefs) {
        dp_optimizer_free(o);
        return DP_ENOMEM;
    }
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
    if (o->coefs)
        o->be->free(o->be, o->coefs);
    if (o->host_coefs)
        o->be->free_host(o->be, o->host_coefs);
    o->coefs = o->host_coefs = NULL;
}

int dp_optimizer_decays(const dp_optimizer *o, const dp_param *p)
{
    return o->type->decays_everything || o->config.decay_all || (p->flags & DP_PARAM_DECAY);
}

/* Queued, not waited for: every step waits for its non-finite count before the next prepares. */
void dp_optimizer_prepare(dp_optimizer *o, float count_scale, float apply_scale, float lr)
{
    dp_optimizer_coefs *host = o->host_coefs;
    memset(host, 0, COEF_SLOTS * sizeof *host);
    /* The counting pass has no update to number: the first one's coefficients, unused. */
    dp_optimizer_pass passes[PASSES] = {{.grad_scale = count_scale, .lr = lr, .apply = 0, .step = o->steps > 0 ? o->steps : 1},
                                        {.grad_scale = apply_scale, .lr = lr, .apply = 1, .step = o->steps + 1}};
    for (int pass = 0; pass < PASSES; pass++)
        for (int decays = 0; decays < DECAY_RULES; decays++)
            o->type->coefs(o, &passes[pass], decays, &host[pass * DECAY_RULES + decays]);
    o->be->upload_queued(o->be, o->coefs, host, COEF_SLOTS * sizeof *host);
}

void dp_optimizer_step(dp_optimizer *o, float *params, float *grads, int apply, double *nonfinite)
{
    if (apply)
        o->steps++;
    const dp_optimizer_coefs *slots = (const dp_optimizer_coefs *)o->coefs + (apply ? DECAY_RULES : 0);
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
            o->type->run(o, &slots[run_decays], params, grads, run_begin, first, nonfinite);
            run_begin = first;
        }
        run_decays = decays;
    }
    if (run_decays >= 0)
        o->type->run(o, &slots[run_decays], params, grads, run_begin, o->end, nonfinite);
}

void dp_optimizer_count_replayed(dp_optimizer *o)
{
    o->steps++;
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

float dp_lr_at(const dp_lr_plan *plan, long step)
{
    double base = plan->base, min = plan->min, pi = 3.14159265358979323846;
    if (step < plan->warmup_steps) {
        double start = plan->warmup_start;
        return (float)(base * (start + (1.0 - start) * (double)step / (double)plan->warmup_steps));
    }
    long s = step - plan->warmup_steps, horizon = plan->total - plan->warmup_steps;
    switch (plan->schedule) {
    case DP_LR_COSINE:
        return horizon <= 0 ? plan->base : (float)(min + (base - min) * (1.0 + cos(pi * (double)s / (double)horizon)) / 2.0);
    case DP_LR_LINEAR:
        return horizon <= 0 ? plan->base : (float)(base * (1.0 + (min / base - 1.0) * (double)s / (double)horizon));
    case DP_LR_STEP:
        return (float)(base * pow((double)plan->step_gamma, (double)(s / plan->step_every)));
    default:
        return plan->base;
    }
}
