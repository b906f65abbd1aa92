/* How samples reach the backend: each dataset is placed in backend memory once (on a host
 * backend it is there already) with the epoch's sample order beside it, and a step gathers its
 * rows there, so the step loop moves nothing between host and device. */
#include "src/train/trainer.h"

#include "dp/error.h"

/* A device copy of n_values 4-byte values, or NULL (with the allocation's error). */
static void *copy_to_device(const dp_backend *be, const void *host, size_t n_values, const char *what)
{
    void *copy = be->alloc(n_values * sizeof(float), DP_MEM_DATA, what);
    if (copy)
        be->upload(copy, host, n_values * sizeof(float));
    return copy;
}

static int place_dataset(const dp_backend *be, const dp_dataset *data, dp_resident *out)
{
    if (be->host_memory) {
        *out = (dp_resident){.features = data->features, .labels = data->labels, .targets = data->targets};
        return 0;
    }
    out->owned = 1;
    out->features = copy_to_device(be, data->features, data->count * (size_t)data->dim, "the dataset's features");
    if (!out->features)
        return DP_ENOMEM;
    if (data->labels)
        out->labels = copy_to_device(be, data->labels, data->count, "the dataset's labels");
    else
        out->targets = copy_to_device(be, data->targets, data->count * (size_t)data->outputs, "the dataset's targets");
    return out->labels || out->targets ? 0 : DP_ENOMEM;
}

static void free_dataset(const dp_backend *be, dp_resident *rows)
{
    if (rows->owned) {
        be->free(rows->features);
        be->free(rows->labels);
        be->free(rows->targets);
    }
    *rows = (dp_resident){0};
}

static int allocate_rows(dp_batches *b, int max_rows, int outputs)
{
    const dp_backend *be = b->be;
    size_t rows = (size_t)max_rows;
    b->x = be->alloc(rows * (size_t)b->train->dim * sizeof(float), DP_MEM_ACTIVATIONS, "the input batch");
    b->labels = be->alloc(rows * sizeof(int32_t), DP_MEM_ACTIVATIONS, "the label batch");
    b->targets = be->alloc(rows * (size_t)outputs * sizeof(float), DP_MEM_ACTIVATIONS, "the target batch");
    return b->x && b->labels && b->targets ? 0 : DP_ENOMEM;
}

int dp_batches_open(dp_batches *b, const dp_backend *be, const dp_dataset *train, const dp_dataset *test,
                    const dp_sampler *sampler, int max_rows, int outputs)
{
    *b = (dp_batches){.be = be, .train = train, .test = test, .sampler = sampler};
    int status = place_dataset(be, train, &b->train_rows);
    if (!status && test)
        status = place_dataset(be, test, &b->test_rows);
    if (!status && be->host_memory)
        b->order = sampler->order;
    if (!status && !be->host_memory) {
        b->device_order = be->alloc(sampler->count * sizeof(size_t), DP_MEM_DATA, "the epoch's sample order");
        b->order = b->device_order;
        status = b->device_order ? 0 : DP_ENOMEM;
    }
    return status ? status : allocate_rows(b, max_rows, outputs);
}

void dp_batches_close(dp_batches *b)
{
    if (!b->be)
        return;
    free_dataset(b->be, &b->train_rows);
    free_dataset(b->be, &b->test_rows);
    if (b->device_order)
        b->be->free(b->device_order);
    b->be->free(b->x);
    b->be->free(b->labels);
    b->be->free(b->targets);
    *b = (dp_batches){0};
}

void dp_batches_set_epoch(dp_batches *b)
{
    if (b->device_order)
        b->be->upload(b->device_order, b->sampler->order, b->sampler->count * sizeof(size_t));
}

static int gather(void *arg, size_t begin, size_t end, dp_rows *out)
{
    dp_batches *b = arg;
    const dp_backend *be = b->be;
    int rows = (int)(end - begin);
    const size_t *index = b->order + begin;
    be->gather_rows(b->x, b->train_rows.features, index, rows, b->train->dim);
    if (b->train_rows.labels)
        be->gather_rows(b->labels, b->train_rows.labels, index, rows, 1);
    else
        be->gather_rows(b->targets, b->train_rows.targets, index, rows, b->train->outputs);
    *out = (dp_rows){.x = b->x, .labels = b->train_rows.labels ? b->labels : NULL,
                     .targets = b->train_rows.labels ? NULL : b->targets, .count = rows};
    return 0;
}

dp_row_source dp_batches_source(dp_batches *b)
{
    return (dp_row_source){.gather = gather, .arg = b};
}

void dp_batches_test_rows(const dp_batches *b, size_t begin, const float **x, const int32_t **labels,
                          const float **targets)
{
    const dp_resident *rows = &b->test_rows;
    *x = rows->features + begin * (size_t)b->test->dim;
    *labels = rows->labels ? rows->labels + begin : NULL;
    *targets = rows->targets ? rows->targets + begin * (size_t)b->test->outputs : NULL;
}
