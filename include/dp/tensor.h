/* A named tensor view: how the model and the training state describe themselves to
 * checkpoint I/O without either module knowing the other. */
#ifndef DP_TENSOR_H
#define DP_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#define DP_TENSOR_MAX_DIMS 4
#define DP_TENSOR_NAME_MAX 64

/* Element types: float32 parameters and state, int64 counters (as PyTorch's BatchNorm
 * num_batches_tracked), bfloat16 for a device backend's reduced-precision operations (what a
 * backend takes is its `supports`). The zero value is float32. */
typedef enum dp_dtype { DP_DTYPE_F32 = 0, DP_DTYPE_I64, DP_DTYPE_BF16, DP_DTYPES } dp_dtype;

typedef struct dp_tensor_ref {
    char name[DP_TENSOR_NAME_MAX];
    int ndim;
    int64_t shape[DP_TENSOR_MAX_DIMS];
    dp_dtype dtype;
    void *data; /* shape's product elements of dtype, row-major, host memory */
} dp_tensor_ref;

/* One sample's shape, the batch's N left out: [F] features, or [C, H, W] images. Modules
 * declare theirs in and out; the kernels see [rows, numel]. */
typedef struct dp_dims {
    int ndim;
    int64_t dim[DP_TENSOR_MAX_DIMS - 1];
} dp_dims;

/* [n]: a sample of n features. */
dp_dims dp_dims_features(int64_t n);
/* Elements per sample: the product of dim (1 for ndim 0). */
int64_t dp_dims_numel(const dp_dims *s);
/* The same count in double, which no shape of int dimensions overflows (0 for no dimensions). */
double dp_dims_values(const dp_dims *s);
/* "[1, 28, 28]". */
void dp_dims_text(const dp_dims *s, char *text, size_t size);

/* Number of elements: the product of the shape (1 for ndim 0). */
int64_t dp_tensor_numel(const dp_tensor_ref *t);

/* Bytes of one element of dtype, and its safetensors name ("F32", "I64", "BF16"). */
size_t dp_dtype_size(dp_dtype dtype);
const char *dp_dtype_name(dp_dtype dtype);

/* Bytes of the whole tensor. */
int64_t dp_tensor_bytes(const dp_tensor_ref *t);

/* A part of one tensor: elements [first, first + count) in row-major order (a block of rows
 * of a weight, or a rank's slice of a flat tensor). ref names the tensor with its dtype and
 * its WHOLE shape; ref.data holds the part alone. */
typedef struct dp_tensor_part {
    dp_tensor_ref ref;
    size_t first, count;
} dp_tensor_part;

#endif
