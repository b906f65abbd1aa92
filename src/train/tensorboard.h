/* Inside train/: TensorBoard's event files written by hand (tensorboard.c): TFRecord framing
 * (a little-endian uint64 length, the masked CRC-32C of those 8 bytes, the data, the masked
 * CRC-32C of the data) around Event protocol buffers, the first holding the file version
 * ("brain.Event:2"), each later one a Summary of scalar values (simple_value) at a step. */
#ifndef DP_TRAIN_TENSORBOARD_H
#define DP_TRAIN_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The most values one event holds. */
#define DP_TENSORBOARD_MAX_VALUES 32

typedef struct dp_tensorboard {
    FILE *file;
    char path[1200];
    int count;                                  /* values gathered for the next event */
    const char *tags[DP_TENSORBOARD_MAX_VALUES];
    float values[DP_TENSORBOARD_MAX_VALUES];
} dp_tensorboard;

/* CRC-32C (Castagnoli) of n bytes, and TFRecord's mask of it. */
uint32_t dp_crc32c(const void *data, size_t n);
uint32_t dp_crc32c_masked(const void *data, size_t n);

/* Creates dir (and missing parents) and opens dir/events.out.tfevents.TIME.HOST (TIME: wall_time's seconds),
 * writing the file-version event; messages start with "--tensorboard DIR". */
int dp_tensorboard_open(dp_tensorboard *tb, const char *dir, double wall_time);
/* A scalar for the next event (tag must outlive dp_tensorboard_write; beyond the most, dropped). */
void dp_tensorboard_add(dp_tensorboard *tb, const char *tag, double value);
/* The values added since the last write as one event at step and wall_time, flushed to the file
 * whole, so that a crash leaves every earlier event readable. */
int dp_tensorboard_write(dp_tensorboard *tb, long step, double wall_time);
int dp_tensorboard_close(dp_tensorboard *tb);

#endif
