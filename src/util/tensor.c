#include "dp/tensor.h"

int64_t dp_tensor_numel(const dp_tensor_ref *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}
