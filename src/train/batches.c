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

int dp_trainer_place_data(trainer *t)
{
    const dp_backend *be = t->be;
    int status = place_dataset(be, t->train, &t->train_rows);
    if (!status && t->test)
        status = place_dataset(be, t->test, &t->test_rows);
    if (status || be->host_memory) {
        t->order = t->sampler.order;
        return status;
    }
    t->device_order = be->alloc(t->sampler.count * sizeof(size_t), DP_MEM_DATA, "the epoch's sample order");
    t->order = t->device_order;
    return t->device_order ? 0 : DP_ENOMEM;
}

void dp_trainer_free_data(trainer *t)
{
    free_dataset(t->be, &t->train_rows);
    free_dataset(t->be, &t->test_rows);
    if (t->device_order)
        t->be->free(t->device_order);
    t->device_order = NULL;
    t->order = NULL;
}

void dp_trainer_set_epoch(trainer *t, long epoch)
{
    dp_sampler_set_epoch(&t->sampler, epoch);
    if (t->device_order)
        t->be->upload(t->device_order, t->sampler.order, t->sampler.count * sizeof(size_t));
}

int dp_trainer_gather(trainer *t, size_t begin, size_t end)
{
    const dp_backend *be = t->be;
    int rows = (int)(end - begin);
    const size_t *index = t->order + begin;
    be->gather_rows(t->dev_x, t->train_rows.features, index, rows, t->train->dim);
    if (t->train_rows.labels)
        be->gather_rows(t->dev_labels, t->train_rows.labels, index, rows, 1);
    else
        be->gather_rows(t->dev_targets, t->train_rows.targets, index, rows, t->train->outputs);
    return rows;
}

void dp_trainer_test_rows(const trainer *t, size_t begin, const float **x, const int32_t **labels,
                          const float **targets)
{
    const dp_resident *rows = &t->test_rows;
    *x = rows->features + begin * (size_t)t->test->dim;
    *labels = rows->labels ? rows->labels + begin : NULL;
    *targets = rows->targets ? rows->targets + begin * (size_t)t->test->outputs : NULL;
}
