/* How samples reach the backend: every micro-batch reads only this rank's rows through the
 * dataset's reader (dp_dataset_read_rows), straight into the batch buffers on a host backend,
 * or into page-locked host staging then one upload per buffer on a device (staging.c); or,
 * with the sets held in a device's memory (--data-on-device, resident.c), gathers them there. */
#include "src/train/trainer.h"

#include "dp/error.h"

#include <stdlib.h>

int dp_batches_open(dp_batches *b, const dp_backend *be, const dp_dataset *train, const dp_dataset *test,
                    const dp_sampler *sampler, int max_rows, int outputs, dp_data_placement placement)
{
    *b = (dp_batches){.be = be, .train = train, .test = test, .sampler = sampler, .rows = (size_t)max_rows,
                      .order_epoch = -1};
    /* A test set has the training data's width: both were checked against the model's. */
    size_t rows = (size_t)max_rows, width = (size_t)train->dim;
    b->x = be->alloc(be, rows * width * sizeof(float), DP_MEM_ACTIVATIONS, "the input batch");
    b->labels = be->alloc(be, rows * sizeof(int32_t), DP_MEM_ACTIVATIONS, "the label batch");
    b->targets = be->alloc(be, rows * (size_t)outputs * sizeof(float), DP_MEM_ACTIVATIONS, "the target batch");
    b->row_index = dp_alloc(rows * sizeof *b->row_index, "the evaluation's row indices");
    if (!b->x || !b->labels || !b->targets || !b->row_index)
        return DP_ENOMEM;
    int status = be->host_memory ? 0 : dp_staging_open(&b->stage, be, rows, width, (size_t)outputs);
    return status ? status : dp_resident_open(b, placement);
}

void dp_batches_close(dp_batches *b)
{
    const dp_backend *be = b->be;
    if (!be)
        return;
    dp_resident_close(b);
    be->free(be, b->x);
    be->free(be, b->labels);
    be->free(be, b->targets);
    dp_staging_close(&b->stage, be);
    free(b->row_index);
    *b = (dp_batches){0};
}

/* Reads rows index[0..n) of data into the batch buffers and says where they are. */
static int read_rows(dp_batches *b, const dp_dataset *data, const size_t *index, size_t n, dp_rows *out)
{
    const dp_backend *be = b->be;
    int status = 0;
    if (be->host_memory) {
        status = dp_dataset_read_rows(data, index, n, b->x, b->labels, b->targets);
    } else {
        dp_row_buffers batch = {.x = b->x, .labels = b->labels, .targets = b->targets};
        status = dp_staging_upload(be, &b->stage, data, index, n, &batch, 0);
    }
    *out = dp_batches_rows(b, data, n);
    return status;
}

static int gather(void *arg, size_t begin, size_t end, dp_rows *rows)
{
    dp_batches *b = arg;
    if (b->resident)
        return dp_resident_train_rows(b, begin, end, rows);
    return read_rows(b, b->train, b->sampler->order + begin, end - begin, rows);
}

dp_row_source dp_batches_source(dp_batches *b)
{
    return (dp_row_source){.gather = gather, .arg = b};
}

int dp_batches_read_test(dp_batches *b, size_t begin, size_t end, dp_rows *rows)
{
    if (b->resident) {
        dp_resident_test_rows(b, begin, end, rows);
        return 0;
    }
    for (size_t i = begin; i < end; i++)
        b->row_index[i - begin] = i;
    return read_rows(b, b->test, b->row_index, end - begin, rows);
}
