/* The optimizer passes: SGD (plain, weight decay, momentum, and a pass that only scales and
 * counts) and AdamW (an update, and counting only), one step from hostile parameters, gradients
 * and state, in the roundings include/dp/backend.h states (PyTorch's order). Elementwise, and
 * the count an integer: every backend gives the reference's bits. */
#include "tests/ops/op_table.h"

#include <math.h>
#include <string.h>

/* Operands 0-4: parameters, gradients, two states, the non-finite count; 5: the coefficients,
 * which the backend reads from its own memory. */
static void optimizer_prepare(op_run *r, const void *coefs, size_t bytes)
{
    size_t n = op_elements(r);
    op_output_f32(r, n, FILL_HOSTILE, 1.0f, SAME_BITS_EVERYWHERE);
    op_output_f32(r, n, FILL_HOSTILE, 1.0f, SAME_BITS_EVERYWHERE);
    op_output_f32(r, n, FILL_HOSTILE, 0.1f, SAME_BITS_EVERYWHERE);
    op_output_f32(r, n, FILL_POSITIVE, 0.1f, SAME_BITS_EVERYWHERE);
    *(double *)op_output(r, OP_F64, 1, SAME_BITS_EVERYWHERE) = 2.0;
    memcpy(op_input(r, OP_F32, bytes / sizeof(float)), coefs, bytes);
}

/* ---- sgd_step: param 0 plain, 1 weight decay, 2 momentum and decay, 3 scale and count only ---- */

static dp_sgd_coefs sgd_coefs(const op_run *r)
{
    return (dp_sgd_coefs){.grad_scale = 1.0f / 3.0f, .lr = 0.05f, .momentum = r->param == 2 ? 0.9f : 0.0f,
                          .weight_decay = r->param == 1 || r->param == 2 ? 1e-3f : 0.0f, .apply = r->param != 3};
}

static void sgd_prepare(op_run *r)
{
    dp_sgd_coefs k = sgd_coefs(r);
    optimizer_prepare(r, &k, sizeof k);
}

static void sgd_run(const dp_backend *be, op_run *r)
{
    be->sgd_step(be, OP_DEV(r, 0), OP_DEV(r, 1), r->param == 2 ? OP_DEV(r, 2) : NULL, op_elements(r), OP_DEV(r, 5),
                 OP_DEV(r, 4));
}

static void sgd_reference(op_run *r)
{
    dp_sgd_coefs k = sgd_coefs(r);
    float *p = OP_HOST(r, 0), *g = OP_HOST(r, 1), *v = OP_HOST(r, 2);
    double *nonfinite = OP_HOST(r, 4);
    for (size_t i = 0; i < op_elements(r); i++) {
        g[i] = op_round((double)g[i] * k.grad_scale);
        if (!k.apply) { /* counting only: the non-finite gradients */
            *nonfinite += !isfinite(g[i]);
            continue;
        }
        float d = op_round((double)g[i] + op_round((double)k.weight_decay * p[i]));
        if (k.momentum != 0.0f)
            d = v[i] = op_round((double)op_round((double)k.momentum * v[i]) + d);
        p[i] = op_round((double)p[i] - op_round((double)k.lr * d));
        *nonfinite += !isfinite(p[i]); /* updating: the non-finite results */
    }
}

const op_impl op_sgd_step = {sgd_prepare, sgd_run, sgd_reference};

/* ---- adamw_step: the second step's coefficients; param 1 scales and counts only ---- */

static dp_adamw_coefs adamw_coefs(const op_run *r)
{
    return (dp_adamw_coefs){.grad_scale = 1.0f / 3.0f, .decay_factor = 0.999f, .beta1 = 0.9f, .one_minus_beta1 = 0.1f,
                            .beta2 = 0.999f, .one_minus_beta2 = 1e-3f,
                            .bias_correction2_sqrt = (float)sqrt(1.0 - 0.999 * 0.999), .eps = 1e-8f,
                            .neg_step_size = (float)(-1e-3 / (1.0 - 0.9 * 0.9)), .apply = !r->param};
}

static void adamw_prepare(op_run *r)
{
    dp_adamw_coefs k = adamw_coefs(r);
    optimizer_prepare(r, &k, sizeof k);
}

static void adamw_run(const dp_backend *be, op_run *r)
{
    be->adamw_step(be, OP_DEV(r, 0), OP_DEV(r, 1), OP_DEV(r, 2), OP_DEV(r, 3), op_elements(r), OP_DEV(r, 5), OP_DEV(r, 4));
}

static void adamw_reference(op_run *r)
{
    dp_adamw_coefs k = adamw_coefs(r);
    float *p = OP_HOST(r, 0), *g = OP_HOST(r, 1), *m = OP_HOST(r, 2), *v = OP_HOST(r, 3);
    double *nonfinite = OP_HOST(r, 4);
    for (size_t i = 0; i < op_elements(r); i++) {
        g[i] = op_round((double)g[i] * k.grad_scale);
        if (!k.apply) { /* counting only: the non-finite gradients */
            *nonfinite += !isfinite(g[i]);
            continue;
        }
        float decayed = op_round((double)p[i] * k.decay_factor);
        m[i] = op_round((double)op_round((double)m[i] * k.beta1) + op_round((double)k.one_minus_beta1 * g[i]));
        v[i] = op_round((double)op_round((double)v[i] * k.beta2) +
                        op_round((double)op_round((double)k.one_minus_beta2 * g[i]) * g[i]));
        float root = op_round(sqrt((double)v[i]));
        float denom = op_round((double)op_round((double)root / k.bias_correction2_sqrt) + k.eps);
        p[i] = op_round((double)decayed + op_round((double)k.neg_step_size * op_round((double)m[i] / denom)));
        *nonfinite += !isfinite(p[i]); /* updating: the non-finite results */
    }
}

const op_impl op_adamw_step = {adamw_prepare, adamw_run, adamw_reference};
