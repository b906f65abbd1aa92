/* A named float32 tensor view: how the model describes its parameters to checkpoint I/O
 * without either module knowing the other. */
#ifndef DP_TENSOR_H
#define DP_TENSOR_H

#include <stdint.h>

#define DP_TENSOR_MAX_DIMS 4
#define DP_TENSOR_NAME_MAX 64

typedef struct dp_tensor_ref {
    char name[DP_TENSOR_NAME_MAX];
    int ndim;
    int64_t shape[DP_TENSOR_MAX_DIMS];
    float *data; /* shape's product elements, row-major, host memory */
} dp_tensor_ref;

/* Number of elements: the product of the shape (1 for ndim 0). */
int64_t dp_tensor_numel(const dp_tensor_ref *t);

#endif
