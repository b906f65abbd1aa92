/* Host staging for a device backend (src/train/staging.c): rows read through a dataset's
 * reader into page-locked host memory, then one upload per buffer. Below both of its users,
 * batches.c (each micro-batch's rows) and resident.c (whole sets, chunk by chunk). */
#ifndef DP_TRAIN_STAGING_H
#define DP_TRAIN_STAGING_H

#include "dp/backend.h"
#include "dp/data.h"

#include <stddef.h>
#include <stdint.h>

/* Rows of a dataset in one place: features, and labels or targets. */
typedef struct dp_row_buffers {
    float *x;                      /* [N, dim] features */
    int32_t *labels;               /* [N] class labels, or NULL */
    float *targets;                /* [N, outputs] regression targets, or NULL */
} dp_row_buffers;

/* Page-locked host room for `rows` rows of `width` features, a label and `outputs` targets;
 * what was allocated before a failure is freed by dp_staging_close. */
int dp_staging_open(dp_row_buffers *stage, const dp_backend *be, size_t rows, size_t width, size_t outputs);
void dp_staging_close(dp_row_buffers *stage, const dp_backend *be);
/* Reads rows index[0..n) of data into stage, then uploads them to rows [at, at + n) of `to`:
 * the features, and the labels or the targets, whichever data has. */
int dp_staging_upload(const dp_backend *be, const dp_row_buffers *stage, const dp_dataset *data,
                      const size_t *index, size_t n, const dp_row_buffers *to, size_t at);

#endif
