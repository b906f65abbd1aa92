#include "dp/mlp.h"

#include "dp/error.h"
#include "dp/rng.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dp_mlp_parse_widths(const char *spec, int *widths, int *count)
{
    const char *p = spec;
    int n = 0;
    while (*p) {
        char *end;
        errno = 0;
        long w = strtol(p, &end, 10);
        if (end == p || errno || w <= 0 || w > INT_MAX || (*end && *end != ','))
            return dp_fail(DP_EINVAL, "--layers '%s': widths must be positive integers separated by commas", spec);
        if (n == DP_MLP_MAX_LAYERS + 1)
            return dp_fail(DP_EINVAL, "--layers '%s': at most %d widths", spec, DP_MLP_MAX_LAYERS + 1);
        widths[n++] = (int)w;
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return dp_fail(DP_EINVAL, "--layers '%s': trailing comma", spec);
    }
    if (n < 2)
        return dp_fail(DP_EINVAL, "--layers '%s': needs at least an input and an output width", spec);
    *count = n;
    return 0;
}

size_t dp_mlp_param_count(const int *widths, int nwidths)
{
    size_t n = 0;
    for (int i = 0; i + 1 < nwidths; i++)
        n += (size_t)widths[i + 1] * widths[i] + widths[i + 1];
    return n;
}

static int max_width(const int *widths, int nwidths)
{
    int widest = 0;
    for (int i = 0; i < nwidths; i++)
        if (widths[i] > widest)
            widest = widths[i];
    return widest;
}

int dp_mlp_create(dp_mlp *m, const dp_backend *be, const int *widths, int nwidths, int max_rows)
{
    memset(m, 0, sizeof *m);
    m->be = be;
    m->nlayers = nwidths - 1;
    m->max_rows = max_rows;
    memcpy(m->widths, widths, (size_t)nwidths * sizeof *widths);
    size_t offset = 0;
    for (int i = 0; i < m->nlayers; i++) {
        m->offsets[i] = offset;
        offset += (size_t)widths[i + 1] * widths[i] + widths[i + 1];
    }
    m->nparams = offset;
    size_t delta_floats = (size_t)max_rows * max_width(widths, nwidths);
    m->params = be->alloc(m->nparams * sizeof(float), "the parameters");
    m->grads = be->alloc(m->nparams * sizeof(float), "the gradients");
    m->delta[0] = be->alloc(delta_floats * sizeof(float), "activation gradients");
    m->delta[1] = be->alloc(delta_floats * sizeof(float), "activation gradients");
    int ok = m->params && m->grads && m->delta[0] && m->delta[1];
    for (int i = 1; ok && i <= m->nlayers; i++)
        ok = (m->acts[i] = be->alloc((size_t)max_rows * widths[i] * sizeof(float), "activations")) != NULL;
    if (!ok) {
        dp_mlp_free(m);
        return DP_ENOMEM;
    }
    return 0;
}

void dp_mlp_free(dp_mlp *m)
{
    if (!m->be)
        return;
    m->be->free(m->params);
    m->be->free(m->grads);
    m->be->free(m->delta[0]);
    m->be->free(m->delta[1]);
    for (int i = 1; i <= m->nlayers; i++)
        m->be->free(m->acts[i]);
    memset(m, 0, sizeof *m);
}

void dp_mlp_init_uniform(const int *widths, int nwidths, uint64_t seed, float *host_params)
{
    dp_rng rng;
    dp_rng_seed(&rng, dp_rng_mix(seed, 0x1a17));
    float *p = host_params;
    for (int i = 0; i + 1 < nwidths; i++) {
        float bound = 1.0f / sqrtf((float)widths[i]);
        size_t layer_params = (size_t)widths[i + 1] * widths[i] + widths[i + 1];
        for (size_t j = 0; j < layer_params; j++)
            *p++ = (2.0f * dp_rng_uniform(&rng) - 1.0f) * bound;
    }
}

void dp_mlp_tensor_refs(const int *widths, int nwidths, float *host_params, dp_tensor_ref *out)
{
    float *p = host_params;
    for (int i = 0; i + 1 < nwidths; i++) {
        dp_tensor_ref *weight = &out[2 * i], *bias = &out[2 * i + 1];
        snprintf(weight->name, sizeof weight->name, "layers.%d.weight", i);
        weight->ndim = 2;
        weight->shape[0] = widths[i + 1];
        weight->shape[1] = widths[i];
        weight->data = p;
        p += (size_t)widths[i + 1] * widths[i];
        snprintf(bias->name, sizeof bias->name, "layers.%d.bias", i);
        bias->ndim = 1;
        bias->shape[0] = widths[i + 1];
        bias->data = p;
        p += widths[i + 1];
    }
}

const float *dp_mlp_forward(dp_mlp *m, const float *x, int rows)
{
    m->acts[0] = (float *)x;
    for (int i = 0; i < m->nlayers; i++) {
        int in = m->widths[i], out = m->widths[i + 1];
        const float *weight = m->params + m->offsets[i];
        const float *bias = weight + (size_t)out * in;
        /* Y = X W^T with W stored [out, in], as nn.Linear. */
        m->be->gemm(0, 1, rows, out, in, 1.0f, m->acts[i], in, weight, in, 0.0f, m->acts[i + 1], out);
        m->be->bias_act_forward(m->acts[i + 1], bias, rows, out, i + 1 < m->nlayers);
    }
    return m->acts[m->nlayers];
}

static void compute_loss(dp_mlp *m, const int32_t *labels, const float *targets, int rows,
                         dp_loss loss, float *dout, double *loss_sum, long *correct)
{
    const float *out = m->acts[m->nlayers];
    int k = m->widths[m->nlayers];
    if (loss == DP_LOSS_XENT)
        m->be->softmax_xent(out, labels, rows, k, dout, loss_sum, correct);
    else
        m->be->mse(out, targets, rows, k, dout, loss_sum);
}

static void backward(dp_mlp *m, int rows)
{
    int cur = 0;
    for (int i = m->nlayers - 1; i >= 0; i--) {
        int in = m->widths[i], out = m->widths[i + 1];
        const float *weight = m->params + m->offsets[i];
        float *dweight = m->grads + m->offsets[i];
        float *dbias = dweight + (size_t)out * in;
        const float *dy = m->delta[cur];
        /* dW += dY^T X ; db += column sums of dY. */
        m->be->gemm(1, 0, out, in, rows, 1.0f, dy, out, m->acts[i], in, 1.0f, dweight, in);
        m->be->bias_grad(dy, rows, out, dbias);
        if (m->grad_ready)
            m->grad_ready(m->grad_ready_ctx, i, m->offsets[i], (size_t)out * in + out);
        if (i == 0)
            break;
        /* dX = dY W, then through the ReLU that produced X. */
        m->be->gemm(0, 0, rows, in, out, 1.0f, dy, out, weight, in, 0.0f, m->delta[1 - cur], in);
        m->be->relu_backward(m->delta[1 - cur], m->acts[i], (size_t)rows * in);
        cur = 1 - cur;
    }
}

static void announce_all_ready(dp_mlp *m)
{
    for (int i = m->nlayers - 1; i >= 0 && m->grad_ready; i--)
        m->grad_ready(m->grad_ready_ctx, i, m->offsets[i],
                      (size_t)m->widths[i + 1] * m->widths[i] + m->widths[i + 1]);
}

void dp_mlp_forward_backward(dp_mlp *m, const float *x, const int32_t *labels,
                             const float *targets, int rows, dp_loss loss,
                             double *loss_sum, long *correct)
{
    /* A rank with no samples in a micro-batch still reports every layer ready, so a
     * communication hook sees the same sequence on every rank. */
    if (rows == 0) {
        announce_all_ready(m);
        return;
    }
    dp_mlp_forward(m, x, rows);
    compute_loss(m, labels, targets, rows, loss, m->delta[0], loss_sum, correct);
    backward(m, rows);
}

void dp_mlp_evaluate(dp_mlp *m, const float *x, const int32_t *labels, const float *targets,
                     int rows, dp_loss loss, double *loss_sum, long *correct)
{
    if (rows == 0)
        return;
    dp_mlp_forward(m, x, rows);
    compute_loss(m, labels, targets, rows, loss, NULL, loss_sum, correct);
}
