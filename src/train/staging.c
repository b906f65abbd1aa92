/* Rows through page-locked host staging to a device backend's memory (staging.h). */
#include "src/train/staging.h"

#include "dp/error.h"

int dp_staging_open(dp_row_buffers *stage, const dp_backend *be, size_t rows, size_t width, size_t outputs)
{
    stage->x = be->alloc_host(be, rows * width * sizeof(float), "the input batch's staging");
    stage->labels = be->alloc_host(be, rows * sizeof(int32_t), "the label batch's staging");
    stage->targets = be->alloc_host(be, rows * outputs * sizeof(float), "the target batch's staging");
    return stage->x && stage->labels && stage->targets ? 0 : DP_ENOMEM;
}

void dp_staging_close(dp_row_buffers *stage, const dp_backend *be)
{
    void *held[] = {stage->x, stage->labels, stage->targets};
    for (size_t i = 0; i < sizeof held / sizeof *held; i++)
        if (held[i])
            be->free_host(be, held[i]);
    *stage = (dp_row_buffers){0};
}

int dp_staging_upload(const dp_backend *be, const dp_row_buffers *stage, const dp_dataset *data,
                      const size_t *index, size_t n, const dp_row_buffers *to, size_t at)
{
    size_t dim = (size_t)data->dim, outputs = (size_t)data->outputs;
    int status = dp_dataset_read_rows(data, index, n, stage->x, stage->labels, stage->targets);
    if (status)
        return status;
    be->upload(be, to->x + at * dim, stage->x, n * dim * sizeof(float));
    if (data->labels)
        be->upload(be, to->labels + at, stage->labels, n * sizeof(int32_t));
    else
        be->upload(be, to->targets + at * outputs, stage->targets, n * outputs * sizeof(float));
    return 0;
}
