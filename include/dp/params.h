/* THE parameter table: for every tensor of a model its PyTorch name, shape, dtype, offset in
 * its flat buffer and flags. Checkpoints, weight decay, buckets and ZeRO shards all read it,
 * so nothing addresses a tensor by a magic index. A model keeps two tables: trainable
 * parameters (one flat float buffer, mirrored by the gradient buffer) and buffers such as
 * BatchNorm's running statistics (float32 in one flat buffer that is never all-reduced as a
 * gradient, int64 counters in another). */
#ifndef DP_PARAMS_H
#define DP_PARAMS_H

#include "dp/partition.h"
#include "dp/tensor.h"

#include <stddef.h>
#include <stdint.h>

enum dp_param_flag {
    DP_PARAM_DECAY = 1u << 0, /* a weight matrix: weight decay applies (biases and norms: no) */
};

typedef struct dp_param {
    char name[DP_TENSOR_NAME_MAX];
    int ndim;
    int64_t shape[DP_TENSOR_MAX_DIMS];
    dp_dtype dtype;
    size_t offset; /* first element in the flat buffer of its dtype */
    size_t count;  /* elements */
    unsigned flags;
    int module;    /* index of the owning module in its model */
} dp_param;

typedef struct dp_param_table {
    dp_param *entries;
    int count, capacity;
    size_t totals[DP_DTYPES]; /* elements per dtype */
} dp_param_table;

/* Appends a tensor at the end of its dtype's flat buffer; a duplicate name is DP_EINVAL. */
int dp_params_add(dp_param_table *t, const char *name, int ndim, const int64_t *shape,
                  dp_dtype dtype, unsigned flags, int module);

/* The entry called name, or NULL. */
const dp_param *dp_params_find(const dp_param_table *t, const char *name);

/* Tensor views of every entry over host arrays laid out like the flat buffers: f32 for the
 * float32 entries, i64 for the int64 ones (NULL when the table has none). out has room for
 * t->count entries; returns that count. */
int dp_params_refs(const dp_param_table *t, float *f32, int64_t *i64, dp_tensor_ref *out);

/* One part per tensor of t: its elements inside the flat range of the F32 buffer (an I64
 * tensor: none), over f32, which holds [range.begin, range.end). A tensor outside range gets a
 * part of 0 elements, so a reader still checks its entry. Returns t->count. */
int dp_params_parts(const dp_param_table *t, dp_range range, float *f32, dp_tensor_part *out);

/* The float32 elements of the table. */
static inline size_t dp_params_floats(const dp_param_table *t)
{
    return t->totals[DP_DTYPE_F32];
}

void dp_params_free(dp_param_table *t);

#endif
