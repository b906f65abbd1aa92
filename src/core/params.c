#include "dp/params.h"

#include "dp/error.h"

#include <stdlib.h>
#include <string.h>

static int grow(dp_param_table *t)
{
    if (t->count < t->capacity)
        return 0;
    int capacity = t->capacity ? 2 * t->capacity : 16;
    dp_param *entries = realloc(t->entries, (size_t)capacity * sizeof *entries);
    if (!entries)
        return dp_fail(DP_ENOMEM, "out of memory growing the parameter table to %d entries", capacity);
    t->entries = entries;
    t->capacity = capacity;
    return 0;
}

int dp_params_add(dp_param_table *t, const char *name, int ndim, const int64_t *shape,
                  dp_dtype dtype, unsigned flags, int module)
{
    if (strlen(name) >= DP_TENSOR_NAME_MAX)
        return dp_fail(DP_EINVAL, "tensor name '%s' is longer than %d characters", name, DP_TENSOR_NAME_MAX - 1);
    if (dp_params_find(t, name))
        return dp_fail(DP_EINVAL, "tensor name '%s' appears twice in the model", name);
    int status = grow(t);
    if (status)
        return status;
    dp_param *p = &t->entries[t->count++];
    memset(p, 0, sizeof *p);
    strcpy(p->name, name);
    p->ndim = ndim;
    p->count = 1;
    for (int d = 0; d < ndim; d++) {
        p->shape[d] = shape[d];
        p->count *= (size_t)shape[d];
    }
    p->dtype = dtype;
    p->offset = t->totals[dtype];
    t->totals[dtype] += p->count;
    p->flags = flags;
    p->module = module;
    return 0;
}

const dp_param *dp_params_find(const dp_param_table *t, const char *name)
{
    for (int i = 0; i < t->count; i++)
        if (strcmp(t->entries[i].name, name) == 0)
            return &t->entries[i];
    return NULL;
}

/* p's name, shape and dtype over data. */
static dp_tensor_ref ref_of(const dp_param *p, void *data)
{
    dp_tensor_ref r;
    memset(&r, 0, sizeof r);
    strcpy(r.name, p->name);
    r.ndim = p->ndim;
    memcpy(r.shape, p->shape, sizeof r.shape);
    r.dtype = p->dtype;
    r.data = data;
    return r;
}

int dp_params_refs(const dp_param_table *t, float *f32, int64_t *i64, dp_tensor_ref *out)
{
    for (int i = 0; i < t->count; i++) {
        const dp_param *p = &t->entries[i];
        out[i] = ref_of(p, p->dtype == DP_DTYPE_F32 ? (void *)(f32 + p->offset) : (void *)(i64 + p->offset));
    }
    return t->count;
}

int dp_params_parts(const dp_param_table *t, dp_range range, float *f32, dp_tensor_part *out)
{
    for (int i = 0; i < t->count; i++) {
        const dp_param *p = &t->entries[i];
        size_t begin = p->offset > range.begin ? p->offset : range.begin;
        size_t end = p->offset + p->count < range.end ? p->offset + p->count : range.end;
        int inside = p->dtype == DP_DTYPE_F32 && begin < end;
        out[i] = (dp_tensor_part){ref_of(p, inside ? f32 + (begin - range.begin) : NULL), inside ? begin - p->offset : 0,
                                  inside ? end - begin : 0};
    }
    return t->count;
}

void dp_params_free(dp_param_table *t)
{
    free(t->entries);
    memset(t, 0, sizeof *t);
}
