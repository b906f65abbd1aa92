#include "dp/tensor.h"

/* One row per dp_dtype, in enum order. */
static const struct {
    size_t size;
    const char *name;
} dtypes[] = {
    [DP_DTYPE_F32] = {4, "F32"},
    [DP_DTYPE_I64] = {8, "I64"},
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
