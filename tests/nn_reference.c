/* The shared double-precision reference forward (tests/nn_reference.h). */
#include "tests/nn_reference.h"

#include <math.h>

void nn_ref_linear(const dp_module *mod, const double *p, const double *in, double *out, int rows)
{
    int n_in = mod->in_width, n_out = mod->out_width;
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < n_out; o++) {
            double z = mod->options.bias ? p[(size_t)n_out * n_in + o] : 0.0;
            for (int i = 0; i < n_in; i++)
                z += p[(size_t)o * n_in + i] * in[(size_t)r * n_in + i];
            out[(size_t)r * n_out + o] = mod->absorbs_next && z < 0.0 ? 0.0 : z;
        }
}

void nn_ref_relu(const dp_module *mod, const double *in, double *out, size_t n)
{
    for (size_t j = 0; j < n; j++)
        out[j] = mod->absorbed || in[j] > 0.0 ? in[j] : 0.0;
}

double nn_ref_xent(const double *logits, const int32_t *labels, int rows, int classes)
{
    double total = 0.0;
    for (int r = 0; r < rows; r++) {
        const double *z = logits + (size_t)r * classes;
        double sum = 0.0;
        for (int c = 0; c < classes; c++)
            sum += exp(z[c]);
        total += log(sum) - z[labels[r]];
    }
    return total;
}
