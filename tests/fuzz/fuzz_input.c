/* memfd_create is a Linux call, declared only with _GNU_SOURCE. */
#define _GNU_SOURCE
#include "tests/fuzz/fuzz_input.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static int slot_fd[FUZZ_SLOTS] = {-1, -1, -1};
static char slot_path[FUZZ_SLOTS][32];

void fuzz_require(int ok, const char *message)
{
    if (ok)
        return;
    fprintf(stderr, "fuzz: %s\n", message);
    abort();
}

/* Writes all of bytes at offset 0; memfd writes only fail when memory runs out. */
static void write_all(int fd, const uint8_t *bytes, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pwrite(fd, bytes + done, len - done, (off_t)done);
        fuzz_require(n > 0, "cannot write the in-memory input file");
        done += (size_t)n;
    }
}

const char *fuzz_file_put(int slot, const void *bytes, size_t len)
{
    fuzz_require(slot >= 0 && slot < FUZZ_SLOTS, "fuzz_file_put: no such slot");
    if (slot_fd[slot] < 0) {
        slot_fd[slot] = memfd_create("dptrain-fuzz", 0);
        fuzz_require(slot_fd[slot] >= 0, "memfd_create failed");
        snprintf(slot_path[slot], sizeof slot_path[slot], "/proc/self/fd/%d", slot_fd[slot]);
    }
    fuzz_require(ftruncate(slot_fd[slot], 0) == 0, "cannot truncate the in-memory input file");
    write_all(slot_fd[slot], bytes, len);
    return slot_path[slot];
}

/* Written, never read: a volatile store keeps the reads in fuzz_touch from being optimised out. */
static volatile uint8_t touched_sum;

void fuzz_touch(const void *buf, size_t len)
{
    const uint8_t *bytes = buf;
    uint8_t sum = 0;
    for (size_t i = 0; i < len; i++)
        sum = (uint8_t)(sum + bytes[i]);
    touched_sum = sum;
}

void fuzz_read_rows(const dp_dataset *ds)
{
    size_t *index = malloc(ds->count * sizeof *index);
    float *x = malloc(ds->count * (size_t)ds->dim * sizeof *x);
    /* Only the buffer of the dataset's kind: outputs may be a label's value up to INT32_MAX. */
    int32_t *labels = ds->labels ? malloc(ds->count * sizeof *labels) : NULL;
    float *targets = ds->targets ? malloc(ds->count * (size_t)ds->outputs * sizeof *targets) : NULL;
    fuzz_require(index && x && (labels || targets), "out of memory for the dataset's rows");
    for (size_t i = 0; i < ds->count; i++)
        index[i] = ds->count - 1 - i;
    fuzz_require(dp_dataset_read_rows(ds, index, ds->count, x, labels, targets) == 0, "reading rows failed");
    fuzz_touch(x, ds->count * (size_t)ds->dim * sizeof *x);
    if (ds->labels)
        fuzz_touch(labels, ds->count * sizeof *labels);
    else
        fuzz_touch(targets, ds->count * (size_t)ds->outputs * sizeof *targets);
    free(index);
    free(x);
    free(labels);
    free(targets);
}
