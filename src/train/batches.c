/* How samples reach the backend: every micro-batch reads only this rank's rows through the
 * dataset's reader (dp_dataset_read_rows), straight into the batch buffers on a host backend,
 * or into page-locked host staging then one upload per buffer on a device (staging.c); or,
 * with the sets held in a device's memory (--data-on-device, resident.c), gathers them there.
 * A step replayed from a CUDA graph reads each micro-batch from its own buffers (a slot), all
 * filled before the launch. */
#include "src/train/trainer.h"

#include "dp/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One set of batch buffers for `rows` rows, counted as `kind`. */
static int open_slot(dp_row_buffers *slot, const dp_backend *be, size_t rows, size_t width, size_t outputs,
                     dp_memory_kind kind)
{
    slot->x = be->alloc(be, rows * width * sizeof(float), kind, "the input batch");
    slot->labels = be->alloc(be, rows * sizeof(int32_t), kind, "the label batch");
    slot->targets = be->alloc(be, rows * outputs * sizeof(float), kind, "the target batch");
    return slot->x && slot->labels && slot->targets ? 0 : DP_ENOMEM;
}

static void close_slot(dp_row_buffers *slot, const dp_backend *be)
{
    void *held[] = {slot->x, slot->labels, slot->targets};
    for (size_t i = 0; i < sizeof held / sizeof *held; i++)
        if (held[i])
            be->free(be, held[i]);
}

size_t dp_batches_rows_bytes(size_t rows, size_t width, size_t outputs)
{
    return rows * (width * sizeof(float) + sizeof(int32_t) + outputs * sizeof(float));
}

size_t dp_batches_slot_bytes(int slots, size_t micro_rows, size_t width, size_t outputs)
{
    return (size_t)(slots - 1) * dp_batches_rows_bytes(micro_rows, width, outputs);
}

int dp_batches_open(dp_batches *b, const dp_backend *be, const dp_dataset *train, const dp_dataset *test,
                    const dp_sampler *sampler, int max_rows, int outputs, dp_data_placement placement, int slots,
                    size_t micro_rows)
{
    *b = (dp_batches){.be = be, .train = train, .test = test, .sampler = sampler, .rows = (size_t)max_rows,
                      .order_epoch = -1};
    /* A test set has the training data's width: both were checked against the model's. */
    size_t rows = (size_t)max_rows, width = (size_t)train->dim;
    b->slots = dp_calloc((size_t)slots, sizeof *b->slots, "the batch buffers' slots");
    b->row_index = dp_alloc(rows * sizeof *b->row_index, "the evaluation's row indices");
    if (!b->slots || !b->row_index)
        return DP_ENOMEM;
    b->slot_count = slots;
    int status = open_slot(&b->slots[0], be, rows, width, (size_t)outputs, DP_MEM_ACTIVATIONS);
    /* A graph's further micro-batches: data waiting for the launch, not a layer's activations. */
    for (int k = 1; !status && k < slots; k++)
        status = open_slot(&b->slots[k], be, micro_rows, width, (size_t)outputs, DP_MEM_DATA);
    b->slot_bytes = dp_batches_slot_bytes(slots, micro_rows, width, (size_t)outputs);
    if (!status && !be->host_memory)
        status = dp_staging_open(&b->stage, be, rows, width, (size_t)outputs);
    if (!status)
        status = dp_resident_open(b, placement);
    size_t said = strlen(b->placement);
    if (!status && slots > 1)
        snprintf(b->placement + said, sizeof b->placement - said, "; the CUDA graph's %d further micro-batches' "
                 "rows in their own buffers, %.2f MiB", slots - 1, (double)b->slot_bytes / (1 << 20));
    return status;
}

void dp_batches_close(dp_batches *b)
{
    const dp_backend *be = b->be;
    if (!be)
        return;
    dp_resident_close(b);
    for (int k = 0; b->slots && k < b->slot_count; k++)
        close_slot(&b->slots[k], be);
    free(b->slots);
    dp_staging_close(&b->stage, be);
    free(b->row_index);
    *b = (dp_batches){0};
}

/* Reads rows index[0..n) of data into the batch buffers of `slot` and says where they are. */
static int read_rows(dp_batches *b, const dp_dataset *data, const size_t *index, size_t n, int slot, dp_rows *out)
{
    const dp_backend *be = b->be;
    const dp_row_buffers *to = &b->slots[slot];
    int status = be->host_memory ? dp_dataset_read_rows(data, index, n, to->x, to->labels, to->targets)
                                 : dp_staging_upload(be, &b->stage, data, index, n, to, 0);
    *out = dp_batches_rows(b, slot, data, n);
    return status;
}

static int gather(void *arg, size_t begin, size_t end, int slot, dp_rows *rows)
{
    dp_batches *b = arg;
    if (b->resident)
        return dp_resident_train_rows(b, begin, end, slot, rows);
    return read_rows(b, b->train, b->sampler->order + begin, end - begin, slot, rows);
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
    return read_rows(b, b->test, b->row_index, end - begin, 0, rows);
}
