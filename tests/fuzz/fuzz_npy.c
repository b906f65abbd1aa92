/* Fuzz target: the .npy reader on arbitrary bytes, alone and in feature/label pairs: the
 * input as features and its own targets, and as class labels for generated features. */
#include "dp/data.h"
#include "tests/fuzz/fuzz_input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Label arrays are paired with generated features up to this many samples. */
#define FUZZ_MAX_PAIR_SAMPLES 4096

enum { SLOT_INPUT, SLOT_FEATURES };

static size_t element_size(enum dp_npy_dtype dtype)
{
    return dtype == DP_NPY_I64 ? 8 : 4;
}

/* A version 1.0 float32 [count, 1] array of zeros, header padded as numpy pads it. */
static const char *write_features(size_t count)
{
    char header[128];
    int len = snprintf(header, sizeof header,
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, 1), }", count);
    size_t header_len = (10 + (size_t)len + 1 + 63) / 64 * 64 - 10;
    size_t file_len = 10 + header_len + count * sizeof(float);
    uint8_t *file = calloc(file_len, 1);
    fuzz_require(file != NULL, "out of memory for the features file");
    memcpy(file, "\x93NUMPY\x01\x00", 8);
    file[8] = (uint8_t)header_len;
    file[9] = (uint8_t)(header_len >> 8);
    memset(file + 10, ' ', header_len);
    memcpy(file + 10, header, (size_t)len);
    file[10 + header_len - 1] = '\n';
    const char *path = fuzz_file_put(SLOT_FEATURES, file, file_len);
    free(file);
    return path;
}

static void check_pair(const char *features_path, const char *labels_path)
{
    dp_dataset ds;
    if (dp_npy_load_pair(features_path, labels_path, &ds) != 0) {
        fuzz_require(ds.reader_state == NULL && ds.labels == NULL && ds.targets == NULL,
                     "failed load left buffers");
        return;
    }
    fuzz_require(ds.count > 0 && ds.dim > 0 && ds.outputs > 0, "empty dataset accepted");
    fuzz_read_rows(&ds);
    for (size_t i = 0; ds.labels && i < ds.count; i++)
        fuzz_require(ds.labels[i] >= 0 && ds.labels[i] < ds.outputs, "label out of range");
    dp_dataset_free(&ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file_put(SLOT_INPUT, data, size);
    dp_npy npy;
    if (dp_npy_read(path, &npy) != 0) {
        fuzz_require(npy.data == NULL, "failed read left a buffer");
        return 0;
    }
    fuzz_require(npy.ndim >= 1 && npy.ndim <= DP_NPY_MAX_DIMS, "unsupported rank accepted");
    size_t bytes = element_size(npy.dtype);
    for (int i = 0; i < DP_NPY_MAX_DIMS; i++) {
        fuzz_require(i < npy.ndim || npy.shape[i] == 1, "a dim past ndim is not 1");
        bytes *= npy.shape[i];
    }
    fuzz_require(bytes <= size, "array larger than the file");
    fuzz_touch(npy.data, bytes);
    check_pair(path, path);
    if (npy.dtype != DP_NPY_F32 && npy.ndim == 1 && npy.shape[0] <= FUZZ_MAX_PAIR_SAMPLES)
        check_pair(write_features(npy.shape[0]), path);
    dp_npy_free(&npy);
    return 0;
}
