/* How samples reach the backend: every micro-batch reads only this rank's rows through the
 * dataset's reader (dp_dataset_read_rows), straight into the batch buffers on a host backend,
 * or into page-locked host staging then one upload per buffer on a device. Nothing holds a
 * whole dataset in backend memory. */
#include "src/train/trainer.h"

#include "dp/error.h"

#include <stdlib.h>

/* The batch buffers hold max_rows rows of the training data's width: a test set must match it. */
static int check_test_width(const trainer *t)
{
    if (!t->test || t->test->dim == t->train->dim)
        return 0;
    return dp_fail(DP_EINVAL, "test data %s has %d features per sample but the training data %s has %d",
                   t->test->description, t->test->dim, t->train->description, t->train->dim);
}

int dp_trainer_open_batches(trainer *t)
{
    const dp_backend *be = t->be;
    size_t rows = (size_t)t->max_rows;
    int status = check_test_width(t);
    if (status)
        return status;
    t->row_index = dp_alloc(rows * sizeof *t->row_index, "the evaluation's row indices");
    if (!t->row_index || be->host_memory)
        return t->row_index ? 0 : DP_ENOMEM;
    t->stage_x = be->alloc_host(rows * (size_t)t->train->dim * sizeof(float), "the input batch's staging");
    t->stage_labels = be->alloc_host(rows * sizeof(int32_t), "the label batch's staging");
    t->stage_targets = be->alloc_host(rows * (size_t)t->model.outputs * sizeof(float), "the target batch's staging");
    return t->stage_x && t->stage_labels && t->stage_targets ? 0 : DP_ENOMEM;
}

void dp_trainer_close_batches(trainer *t)
{
    if (t->stage_x)
        t->be->free_host(t->stage_x);
    if (t->stage_labels)
        t->be->free_host(t->stage_labels);
    if (t->stage_targets)
        t->be->free_host(t->stage_targets);
    free(t->row_index);
    t->stage_x = t->stage_targets = NULL;
    t->stage_labels = NULL;
    t->row_index = NULL;
}

/* Reads rows index[0..n) of data into dev_x and dev_labels or dev_targets. */
static int read_rows(trainer *t, const dp_dataset *data, const size_t *index, size_t n)
{
    const dp_backend *be = t->be;
    if (be->host_memory)
        return dp_dataset_read_rows(data, index, n, t->dev_x, t->dev_labels, t->dev_targets);
    int status = dp_dataset_read_rows(data, index, n, t->stage_x, t->stage_labels, t->stage_targets);
    if (status)
        return status;
    be->upload(t->dev_x, t->stage_x, n * (size_t)data->dim * sizeof(float));
    if (data->labels)
        be->upload(t->dev_labels, t->stage_labels, n * sizeof(int32_t));
    else
        be->upload(t->dev_targets, t->stage_targets, n * (size_t)data->outputs * sizeof(float));
    return 0;
}

int dp_trainer_gather(trainer *t, size_t begin, size_t end)
{
    return read_rows(t, t->train, t->sampler.order + begin, end - begin);
}

int dp_trainer_read_test_rows(trainer *t, size_t begin, size_t end)
{
    for (size_t i = begin; i < end; i++)
        t->row_index[i - begin] = i;
    return read_rows(t, t->test, t->row_index, end - begin);
}
