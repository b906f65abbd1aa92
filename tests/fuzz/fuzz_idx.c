/* Fuzz target: the IDX reader on arbitrary bytes, as given (raw, or gzip when the bytes are a
 * gzip stream) and gzip-compressed, read as labels, matrices and images, and as the image
 * file of an image/label pair. */
#include "dp/data.h"
#include "tests/fuzz/fuzz_input.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Pairs are tried up to this many images, so a label file stays small. */
#define FUZZ_MAX_PAIR_IMAGES 4096

enum { SLOT_INPUT, SLOT_GZIP, SLOT_LABELS };

/* gzip format (window bits 15 + 16), fastest level: the bytes matter, not the ratio. */
static size_t gzip_compress(const uint8_t *data, size_t size, uint8_t **out)
{
    z_stream z = {0};
    fuzz_require(deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK,
                 "deflateInit2 failed");
    size_t bound = deflateBound(&z, (uLong)size);
    *out = malloc(bound);
    fuzz_require(*out != NULL, "out of memory for the gzip copy");
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)size;
    z.next_out = *out;
    z.avail_out = (uInt)bound;
    fuzz_require(deflate(&z, Z_FINISH) == Z_STREAM_END, "deflate did not finish");
    size_t len = bound - z.avail_out;
    deflateEnd(&z);
    return len;
}

/* A label file for images->dims[0] images, labels taken from the pixels so they vary. */
static const char *write_labels(const dp_idx *images)
{
    size_t count = images->dims[0];
    uint8_t *file = malloc(8 + count);
    fuzz_require(file != NULL, "out of memory for the label file");
    static const uint8_t magic[4] = {0, 0, 0x08, 1};
    memcpy(file, magic, 4);
    for (int b = 0; b < 4; b++)
        file[4 + b] = (uint8_t)(count >> (24 - 8 * b));
    for (size_t i = 0; i < count; i++)
        file[8 + i] = images->count ? images->data[i % images->count] : 0;
    const char *path = fuzz_file_put(SLOT_LABELS, file, 8 + count);
    free(file);
    return path;
}

static void check_pair(const char *images_path, const dp_idx *images)
{
    if (images->dims[0] > FUZZ_MAX_PAIR_IMAGES)
        return;
    dp_dataset ds;
    if (dp_idx_load_pair(images_path, write_labels(images), &ds) != 0) {
        fuzz_require(ds.reader_state == NULL && ds.labels == NULL, "failed load left buffers");
        return;
    }
    fuzz_require(ds.count == images->dims[0], "pair count differs from the header");
    fuzz_require((size_t)ds.dim == (size_t)images->dims[1] * images->dims[2],
                 "pair dimension differs from the header");
    fuzz_read_rows(&ds);
    dp_dataset_free(&ds);
}

static void read_every_way(const char *path)
{
    for (int ndim = 1; ndim <= 3; ndim++) {
        dp_idx idx;
        if (dp_idx_read(path, ndim, &idx) != 0) {
            fuzz_require(idx.data == NULL, "failed read left a buffer");
            continue;
        }
        size_t count = 1;
        for (int i = 0; i < ndim; i++)
            count *= idx.dims[i];
        fuzz_require(idx.ndim == ndim && idx.count == count, "count differs from the header");
        fuzz_touch(idx.data, idx.count);
        if (ndim == 3)
            check_pair(path, &idx);
        dp_idx_free(&idx);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    read_every_way(fuzz_file_put(SLOT_INPUT, data, size));
    uint8_t *gz = NULL;
    size_t gz_len = gzip_compress(data, size, &gz);
    read_every_way(fuzz_file_put(SLOT_GZIP, gz, gz_len));
    free(gz);
    return 0;
}
