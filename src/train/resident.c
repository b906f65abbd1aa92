/* --data-on-device: the training and test sets held whole in a device's memory, so that a step
 * moves no rows over the bus. The sets are uploaded once, read through the dataset's reader in
 * chunks of the batch staging's rows; each epoch's order goes up once as int32 row indices;
 * each micro-batch's rows are then gathered on the device (gather_rows, queued on the stream:
 * no host wait, and outside a CUDA graph's capture, so a replay reads the rows gathered for its
 * step into the same batch buffers, a slot per micro-batch), and evaluation reads the test
 * set's rows where they are. */
#include "src/train/trainer.h"

#include "dp/error.h"

#include <stdint.h>
#include <stdio.h>

static double mib(size_t bytes)
{
    return (double)bytes / (1 << 20);
}

/* One set's bytes held whole: features, and labels or targets. */
static size_t set_bytes(const dp_dataset *data)
{
    size_t per_row = (size_t)data->dim + (data->labels ? 1 : (size_t)data->outputs);
    return data->count * per_row * sizeof(float);
}

size_t dp_resident_bytes(const dp_dataset *train, const dp_dataset *test)
{
    return set_bytes(train) + (test ? set_bytes(test) : 0) + train->count * sizeof(int32_t);
}

void dp_resident_describe(const dp_dataset *train, const dp_dataset *test, char *text, size_t size)
{
    char held[64] = "";
    if (test)
        snprintf(held, sizeof held, ", test set %.2f MiB", mib(set_bytes(test)));
    snprintf(text, size, "%.2f MiB (training set %.2f MiB%s, the epoch's order %.2f MiB)",
             mib(dp_resident_bytes(train, test)), mib(set_bytes(train)), held, mib(train->count * sizeof(int32_t)));
}

/* Why the sets stay on the host (a phrase), or NULL when they are held on the device; on
 * refuses what auto would decline with an error naming the size and the limit. */
static const char *decide(const dp_batches *b, dp_data_placement placement, size_t bytes, char *why, size_t size,
                          int *status)
{
    const dp_backend *be = b->be;
    *status = 0;
    if (placement == DP_DATA_OFF)
        return "--data-on-device off";
    if (be->host_memory) {
        if (placement == DP_DATA_ON)
            *status = dp_fail(DP_EINVAL, "--data-on-device on: the %s backend computes in host memory, where the "
                              "rows are read already (use auto or off)", be->name);
        return "host memory is the backend's memory";
    }
    if (b->train->count > INT32_MAX) {
        snprintf(why, size, "%zu training samples: the gather's row indices are int32", b->train->count);
    } else {
        size_t free_bytes = 0, total = 0;
        be->memory_info(be, &free_bytes, &total);
        /* --max-memory-mb's headroom, where it is less than the GPU's free memory. */
        dp_memory_usage held = dp_memory_usage_now();
        size_t headroom = held.limit > held.total ? held.limit - held.total : 0;
        size_t room = held.limit && headroom < free_bytes ? headroom : free_bytes;
        if (bytes <= room && (placement == DP_DATA_ON || bytes <= total / DP_RESIDENT_AUTO_SHARE))
            return NULL;
        if (bytes > room)
            snprintf(why, size, "the sets take %.2f MiB but the GPU has %.2f MiB free of %.2f MiB%s", mib(bytes),
                     mib(room), mib(total), room < free_bytes ? " under --max-memory-mb" : "");
        else
            snprintf(why, size, "the sets take %.2f MiB, more than auto's 1/%d of the GPU's %.2f MiB (on holds them "
                     "where they fit its free memory)", mib(bytes), DP_RESIDENT_AUTO_SHARE, mib(total));
    }
    if (placement == DP_DATA_ON)
        *status = dp_fail(DP_EINVAL, "--data-on-device on: %s (training data %s%s%s)", why, b->train->description,
                          b->test ? ", test data " : "", b->test ? b->test->description : "");
    return why;
}

/* data's rows, features and labels or targets, into set (allocated here) through the staging. */
static int upload_set(dp_batches *b, const dp_dataset *data, dp_row_buffers *set, const char *what)
{
    const dp_backend *be = b->be;
    size_t dim = (size_t)data->dim, outputs = (size_t)data->outputs;
    char name[96];
    snprintf(name, sizeof name, "%s's features", what);
    set->x = be->alloc(be, data->count * dim * sizeof(float), DP_MEM_DATA, name);
    snprintf(name, sizeof name, "%s's %s", what, data->labels ? "labels" : "targets");
    if (data->labels)
        set->labels = be->alloc(be, data->count * sizeof(int32_t), DP_MEM_DATA, name);
    else
        set->targets = be->alloc(be, data->count * outputs * sizeof(float), DP_MEM_DATA, name);
    if (!set->x || (!set->labels && !set->targets))
        return DP_ENOMEM;
    size_t chunk = b->rows;
    for (size_t begin = 0; begin < data->count; begin += chunk) {
        size_t n = begin + chunk < data->count ? chunk : data->count - begin;
        for (size_t i = 0; i < n; i++)
            b->row_index[i] = begin + i;
        int status = dp_staging_upload(be, &b->stage, data, b->row_index, n, set, begin);
        if (status)
            return status;
    }
    return 0;
}

int dp_resident_open(dp_batches *b, dp_data_placement placement)
{
    char why[256];
    int status;
    size_t bytes = dp_resident_bytes(b->train, b->test);
    const char *reason = decide(b, placement, bytes, why, sizeof why, &status);
    if (status)
        return status;
    if (reason) {
        snprintf(b->placement, sizeof b->placement, "off%s: %s; every micro-batch's rows are read on the host and "
                 "uploaded", placement == DP_DATA_AUTO ? " (auto)" : "", reason);
        return 0;
    }
    const dp_backend *be = b->be;
    b->resident = 1;
    b->order = be->alloc(be, b->train->count * sizeof(int32_t), DP_MEM_DATA, "the epoch's order on the device");
    b->stage_order = be->alloc_host(be, b->train->count * sizeof(int32_t), "the epoch's order's staging");
    if (!b->order || !b->stage_order)
        return DP_ENOMEM;
    if ((status = upload_set(b, b->train, &b->train_set, "the training set")))
        return status;
    if (b->test && (status = upload_set(b, b->test, &b->test_set, "the test set")))
        return status;
    char held[192];
    dp_resident_describe(b->train, b->test, held, sizeof held);
    snprintf(b->placement, sizeof b->placement, "on%s: %s held in GPU memory; each micro-batch's rows are gathered "
             "there", placement == DP_DATA_AUTO ? " (auto)" : "", held);
    return 0;
}

void dp_resident_close(dp_batches *b)
{
    const dp_backend *be = b->be;
    void *held[] = {b->train_set.x, b->train_set.labels, b->train_set.targets, b->test_set.x, b->test_set.labels,
                    b->test_set.targets, b->order};
    for (size_t i = 0; i < sizeof held / sizeof *held; i++)
        if (held[i])
            be->free(be, held[i]);
    if (b->stage_order)
        be->free_host(be, b->stage_order);
}

/* The sampler's order of a new epoch to the device, once: positions become the gathers' rows. */
static void upload_order(dp_batches *b)
{
    const dp_sampler *sampler = b->sampler;
    for (size_t i = 0; i < sampler->count; i++)
        b->stage_order[i] = (int32_t)sampler->order[i];
    b->be->upload(b->be, b->order, b->stage_order, sampler->count * sizeof(int32_t));
    b->order_epoch = sampler->epoch;
}

int dp_resident_train_rows(dp_batches *b, size_t begin, size_t end, int slot, dp_rows *rows)
{
    const dp_backend *be = b->be;
    const dp_dataset *data = b->train;
    const dp_row_buffers *to = &b->slots[slot];
    if (b->order_epoch != b->sampler->epoch)
        upload_order(b);
    const int32_t *index = b->order + begin;
    int n = (int)(end - begin);
    be->gather_rows(be, to->x, b->train_set.x, index, n, data->dim);
    if (data->labels)
        be->gather_rows(be, to->labels, b->train_set.labels, index, n, 1);
    else
        be->gather_rows(be, to->targets, b->train_set.targets, index, n, data->outputs);
    *rows = dp_batches_rows(b, slot, data, (size_t)n);
    return 0;
}

void dp_resident_test_rows(const dp_batches *b, size_t begin, size_t end, dp_rows *rows)
{
    const dp_row_buffers *set = &b->test_set;
    const dp_dataset *data = b->test;
    *rows = (dp_rows){.x = set->x + begin * (size_t)data->dim,
                      .labels = set->labels ? set->labels + begin : NULL,
                      .targets = set->targets ? set->targets + begin * (size_t)data->outputs : NULL,
                      .count = (int)(end - begin)};
}
