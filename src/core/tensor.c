#include "dp/tensor.h"

#include <stdio.h>

/* One row per dp_dtype, in enum order. */
static const struct {
    size_t size;
    const char *name;
} dtypes[] = {
    [DP_DTYPE_F32] = {4, "F32"},
    [DP_DTYPE_I64] = {8, "I64"},
    [DP_DTYPE_BF16] = {2, "BF16"},
};

int64_t dp_tensor_numel(const dp_tensor_ref *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

size_t dp_dtype_size(dp_dtype dtype)
{
    return dtypes[dtype].size;
}

const char *dp_dtype_name(dp_dtype dtype)
{
    return dtypes[dtype].name;
}

int64_t dp_tensor_bytes(const dp_tensor_ref *t)
{
    return dp_tensor_numel(t) * (int64_t)dp_dtype_size(t->dtype);
}

dp_dims dp_dims_features(int64_t n)
{
    return (dp_dims){.ndim = 1, .dim = {n}};
}

int64_t dp_dims_numel(const dp_dims *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= s->dim[i];
    return n;
}

double dp_dims_values(const dp_dims *s)
{
    double n = s->ndim ? 1.0 : 0.0;
    for (int i = 0; i < s->ndim; i++)
        n *= (double)s->dim[i];
    return n;
}

void dp_dims_text(const dp_dims *s, char *text, size_t size)
{
    size_t used = (size_t)snprintf(text, size, "[");
    for (int i = 0; i < s->ndim && used < size; i++)
        used += (size_t)snprintf(text + used, size - used, "%s%lld", i ? ", " : "", (long long)s->dim[i]);
    if (used < size)
        snprintf(text + used, size - used, "]");
}
