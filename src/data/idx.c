#include "dp/data.h"
#include "dp/error.h"
#include "dp/input_file.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_TYPE_UBYTE 0x08
#define IDX_MAX_NDIM 3
/* gzread counts in unsigned int, so large reads go in slices. */
#define IDX_READ_SLICE ((size_t)1 << 24)
/* First data buffer size; it doubles as data arrives, up to what the header announces. */
#define IDX_FIRST_CAPACITY ((size_t)1 << 26)
/* Deflate expands at most 1032:1 (zlib's technical details), which bounds a gzip file's data. */
#define IDX_GZIP_MAX_EXPANSION 1032

static uint32_t be32(const uint8_t *bytes)
{
    return (uint32_t)bytes[0] << 24 | (uint32_t)bytes[1] << 16 | (uint32_t)bytes[2] << 8 |
           (uint32_t)bytes[3];
}

/* Reads len bytes unless the stream ends first; *got says how many arrived. */
static int read_up_to(gzFile gz, const char *path, uint8_t *buf, size_t len, size_t *got)
{
    *got = 0;
    while (*got < len) {
        size_t want = len - *got < IDX_READ_SLICE ? len - *got : IDX_READ_SLICE;
        int n = gzread(gz, buf + *got, (unsigned)want);
        if (n < 0) {
            int zerr;
            const char *message = gzerror(gz, &zerr);
            return dp_fail(zerr == Z_ERRNO ? DP_EIO : DP_EFORMAT, "%s: read failed: %s", path,
                           message);
        }
        if (n == 0)
            return 0;
        *got += (size_t)n;
    }
    return 0;
}

static int check_magic(const char *path, const uint8_t *bytes, int expected_ndim)
{
    uint32_t magic = be32(bytes);
    uint32_t expected = (uint32_t)IDX_TYPE_UBYTE << 8 | (uint32_t)expected_ndim;
    if (magic != expected)
        return dp_fail(DP_EFORMAT,
                       "%s: wrong IDX magic 0x%08x, expected 0x%08x (idx%d-ubyte: unsigned "
                       "bytes in %d dimensions)",
                       path, magic, expected, expected_ndim, expected_ndim);
    return 0;
}

static int read_header(gzFile gz, const char *path, int expected_ndim, dp_idx *idx)
{
    uint8_t header[4 + 4 * IDX_MAX_NDIM];
    size_t header_len = 4 + 4 * (size_t)expected_ndim;
    size_t got;
    int rc = read_up_to(gz, path, header, header_len, &got);
    if (rc)
        return rc;
    /* The magic is checked first so a short file of the wrong kind says so. */
    if (got >= 4 && (rc = check_magic(path, header, expected_ndim)) != 0)
        return rc;
    if (got < header_len)
        return dp_fail(DP_EFORMAT, "%s: truncated header: expected %zu bytes, got %zu", path,
                       header_len, got);
    idx->ndim = expected_ndim;
    idx->count = 1;
    for (int i = 0; i < expected_ndim; i++) {
        idx->dims[i] = be32(header + 4 + 4 * i);
        if (idx->dims[i] != 0 && idx->count > SIZE_MAX / idx->dims[i])
            return dp_fail(DP_EFORMAT, "%s: header dimensions are too large to address", path);
        idx->count *= idx->dims[i];
    }
    return 0;
}

static int truncated(const char *path, size_t count, size_t got)
{
    return dp_fail(DP_EFORMAT, "%s: truncated: expected %zu bytes of data, got %zu", path, count,
                   got);
}

/* The announced data must fit the file before anything is allocated: exactly for a raw file,
 * within deflate's expansion for gzip. */
static int check_announced_size(gzFile gz, const char *path, off_t file_size, size_t count)
{
    if (gzdirect(gz)) {
        off_t header_end = (off_t)gztell(gz);
        size_t data_len = file_size > header_end ? (size_t)(file_size - header_end) : 0;
        return count > data_len ? truncated(path, count, data_len) : 0;
    }
    if (count / IDX_GZIP_MAX_EXPANSION > (size_t)file_size)
        return dp_fail(DP_EFORMAT,
                       "%s: truncated: expected %zu bytes of data, more than a %lld-byte gzip "
                       "file can hold",
                       path, count, (long long)file_size);
    return 0;
}

static int grow(uint8_t **data, size_t used, size_t capacity)
{
    uint8_t *bigger = dp_alloc(capacity, "IDX data");
    if (!bigger)
        return DP_ENOMEM;
    memcpy(bigger, *data, used);
    free(*data);
    *data = bigger;
    return 0;
}

/* The buffer grows with the data actually present, so a header claiming terabytes fails as
 * truncated instead of allocating them first. */
static int read_data(gzFile gz, const char *path, size_t count, uint8_t **out)
{
    size_t capacity = count < IDX_FIRST_CAPACITY ? count : IDX_FIRST_CAPACITY;
    uint8_t *data = dp_alloc(capacity, "IDX data");
    if (!data)
        return DP_ENOMEM;
    size_t total = 0;
    int rc = 0;
    while (!rc) {
        size_t got;
        rc = read_up_to(gz, path, data + total, capacity - total, &got);
        total += got;
        if (rc || total == count)
            break;
        if (total < capacity) {
            rc = truncated(path, count, total);
            break;
        }
        capacity = capacity > count / 2 ? count : capacity * 2;
        rc = grow(&data, total, capacity);
    }
    if (rc) {
        free(data);
        return rc;
    }
    *out = data;
    return 0;
}

/* Extra bytes mean the header's dimensions do not describe the file, so they are an error. */
static int reject_trailing(gzFile gz, const char *path, size_t count)
{
    uint8_t extra;
    size_t got;
    int rc = read_up_to(gz, path, &extra, 1, &got);
    if (!rc && got)
        rc = dp_fail(DP_EFORMAT, "%s: unexpected data after the %zu bytes the header announces",
                     path, count);
    return rc;
}

/* Opens path, a regular file, for gzread (gzip or raw) and sets *file_size. */
static int open_idx(const char *path, gzFile *gz, off_t *file_size)
{
    int fd = -1;
    int rc = dp_open_input_fd(path, &fd);
    if (rc)
        return rc;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = dp_fail(DP_EIO, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    *file_size = st.st_size;
    *gz = gzdopen(fd, "rb");
    if (!*gz) {
        close(fd);
        return dp_fail(DP_ENOMEM, "%s: out of memory opening the file", path);
    }
    return 0;
}

int dp_idx_read(const char *path, int expected_ndim, dp_idx *out)
{
    memset(out, 0, sizeof *out);
    if (expected_ndim < 1 || expected_ndim > IDX_MAX_NDIM)
        return dp_fail(DP_EINVAL, "%s: IDX files with %d dimensions are not supported", path,
                       expected_ndim);
    gzFile gz = NULL;
    off_t file_size = 0;
    int rc = open_idx(path, &gz, &file_size);
    if (rc)
        return rc;
    dp_idx idx = {0};
    rc = read_header(gz, path, expected_ndim, &idx);
    if (!rc)
        rc = check_announced_size(gz, path, file_size, idx.count);
    if (!rc)
        rc = read_data(gz, path, idx.count, &idx.data);
    if (!rc)
        rc = reject_trailing(gz, path, idx.count);
    /* Reading: every byte that matters was already checked, so a close error adds nothing. */
    gzclose(gz);
    if (rc) {
        dp_idx_free(&idx);
        return rc;
    }
    *out = idx;
    return 0;
}

void dp_idx_free(dp_idx *idx)
{
    free(idx->data);
    memset(idx, 0, sizeof *idx);
}

static int check_pair(const char *images_path, const dp_idx *images, const char *labels_path,
                      const dp_idx *labels)
{
    if (images->dims[0] != labels->dims[0])
        return dp_fail(DP_EFORMAT, "%s has %zu images but %s has %zu labels", images_path,
                       (size_t)images->dims[0], labels_path, (size_t)labels->dims[0]);
    if (images->dims[0] == 0)
        return dp_fail(DP_EFORMAT, "%s: no images", images_path);
    size_t pixels = (size_t)images->dims[1] * images->dims[2];
    if (pixels == 0 || pixels > INT_MAX)
        return dp_fail(DP_EFORMAT, "%s: unsupported image size %u x %u", images_path,
                       images->dims[1], images->dims[2]);
    if (images->count > SIZE_MAX / sizeof(float))
        return dp_fail(DP_EFORMAT, "%s: too many pixels to address as floats", images_path);
    return 0;
}

/* --- the IDX reader: the inflated pixels stay bytes, scaled as rows are read --- */

/* Pixels as floats, b / 255.0f: the division exactly rounded, as version 2 converted the whole
 * set once. Vectorised whatever the row width (the default cost model leaves loops of unknown
 * trip count scalar, and a division per pixel cost the CPU demo a tenth of its step). */
__attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
static void scale_pixels(const uint8_t *restrict row, float *restrict x, size_t width)
{
    for (size_t j = 0; j < width; j++)
        x[j] = (float)row[j] / 255.0f;
}

static int read_pixels(const dp_dataset *ds, const size_t *index, size_t n, float *x)
{
    const uint8_t *pixels = ds->reader_state;
    size_t width = (size_t)ds->dim;
    for (size_t r = 0; r < n; r++)
        scale_pixels(pixels + index[r] * width, x + r * width, width);
    return 0;
}

static const dp_reader idx_reader = {.name = "idx", .read_features = read_pixels, .close = free};

/* Takes the images' pixels as the reader's state. */
static int fill_dataset(dp_idx *images, const dp_idx *labels, dp_dataset *out)
{
    out->count = images->dims[0];
    out->dim = (int)((size_t)images->dims[1] * images->dims[2]);
    out->sample = (dp_dims){.ndim = 3, .dim = {1, (int64_t)images->dims[1], (int64_t)images->dims[2]}};
    out->reader = &idx_reader;
    out->reader_state = images->data;
    images->data = NULL;
    out->labels = dp_alloc(out->count * sizeof(int32_t), "IDX labels");
    if (!out->labels)
        return DP_ENOMEM;
    int max_label = 0;
    for (size_t i = 0; i < out->count; i++) {
        out->labels[i] = labels->data[i];
        if (labels->data[i] > max_label)
            max_label = labels->data[i];
    }
    out->outputs = max_label + 1;
    return 0;
}

int dp_idx_load_pair(const char *images_path, const char *labels_path, dp_dataset *out)
{
    memset(out, 0, sizeof *out);
    dp_idx images = {0}, labels = {0};
    int rc = dp_idx_read(images_path, 3, &images);
    if (!rc)
        rc = dp_idx_read(labels_path, 1, &labels);
    if (!rc)
        rc = check_pair(images_path, &images, labels_path, &labels);
    if (!rc)
        rc = fill_dataset(&images, &labels, out);
    dp_idx_free(&images);
    dp_idx_free(&labels);
    if (rc) {
        dp_dataset_free(out);
        return rc;
    }
    snprintf(out->description, sizeof out->description, "IDX %s + %s (%zu x %d)", images_path,
             labels_path, out->count, out->dim);
    snprintf(out->labels_source, sizeof out->labels_source, "%s", labels_path);
    return 0;
}
