/* What every reader shares: reading rows (features through the reader, labels or targets from
 * memory), the in-memory reader, and freeing. */
#include "dp/data.h"

#include <stdlib.h>
#include <string.h>

static int read_in_memory(const dp_dataset *ds, const size_t *index, size_t n, float *x)
{
    size_t width = (size_t)ds->dim;
    for (size_t r = 0; r < n; r++)
        memcpy(x + r * width, ds->features + index[r] * width, width * sizeof *x);
    return 0;
}

const dp_reader dp_reader_in_memory = {.name = "memory", .read_features = read_in_memory};

int dp_dataset_read_rows(const dp_dataset *ds, const size_t *index, size_t n, float *x,
                         int32_t *labels, float *targets)
{
    int status = ds->reader->read_features(ds, index, n, x);
    if (status)
        return status;
    if (ds->labels) {
        for (size_t r = 0; r < n; r++)
            labels[r] = ds->labels[index[r]];
        return 0;
    }
    size_t width = (size_t)ds->outputs;
    for (size_t r = 0; r < n; r++)
        memcpy(targets + r * width, ds->targets + index[r] * width, width * sizeof *targets);
    return 0;
}

void dp_dataset_free(dp_dataset *ds)
{
    if (ds->reader && ds->reader->close)
        ds->reader->close(ds->reader_state);
    free(ds->features);
    free(ds->labels);
    free(ds->targets);
    memset(ds, 0, sizeof *ds);
}
