/* A pair of .npy files as a dataset: float32 features [N, ...] read from their file by row, and
 * int labels [N] or float32 targets [N, K] read into memory, checked against each other (the
 * format itself: npy.c). */
#include "src/data/readers.h"

#include "dp/error.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void format_shape(const dp_npy *a, char *buf, size_t size)
{
    int used = snprintf(buf, size, "%s ", dp_npy_dtype_name(a->dtype));
    dp_npy_format_shape(a, buf + used, size - (size_t)used);
}

/* A sample's width must be an int. The product cannot overflow: npy.c checked that the whole
 * array's bytes fit a size_t, and a zero dim makes it 0 whatever came before. */
int dp_npy_features(const char *path, const dp_npy *features, dp_dims *sample)
{
    char shape[128];
    format_shape(features, shape, sizeof shape);
    if (features->dtype != DP_NPY_F32 || features->ndim < 2)
        return dp_fail(DP_EFORMAT, "%s: features must be a float32 array [N, D], [N, H, W] or [N, C, H, W], got %s",
                       path, shape);
    size_t width = 1;
    for (int i = 1; i < features->ndim; i++)
        width *= features->shape[i];
    if (features->shape[0] == 0 || width == 0 || width > INT_MAX)
        return dp_fail(DP_EFORMAT, "%s: unsupported features shape %s", path, shape);
    sample->ndim = features->ndim - 1;
    for (int i = 0; i < sample->ndim; i++)
        sample->dim[i] = (int64_t)features->shape[i + 1];
    return 0;
}

static int check_labels(const char *features_path, const dp_npy *features,
                        const char *labels_path, const dp_npy *labels)
{
    char shape[128];
    format_shape(labels, shape, sizeof shape);
    int is_targets = labels->dtype == DP_NPY_F32 && labels->ndim == 2;
    int is_classes = labels->dtype != DP_NPY_F32 && labels->ndim == 1;
    if (!is_targets && !is_classes)
        return dp_fail(DP_EFORMAT,
                       "%s: labels must be int32/int64 [N] classes or float32 [N, K] targets, "
                       "got %s",
                       labels_path, shape);
    if (labels->shape[0] != features->shape[0])
        return dp_fail(DP_EFORMAT, "%s has %zu samples but %s has %zu labels", features_path,
                       features->shape[0], labels_path, labels->shape[0]);
    if (is_targets && (labels->shape[1] == 0 || labels->shape[1] > INT_MAX))
        return dp_fail(DP_EFORMAT, "%s: unsupported targets shape %s", labels_path, shape);
    return 0;
}

/* Labels must fit int32 and leave max + 1 (the class count) representable as an int. */
static int convert_labels(const char *path, const dp_npy *labels, dp_dataset *out)
{
    out->labels = dp_alloc(labels->shape[0] * sizeof(int32_t), "labels");
    if (!out->labels)
        return DP_ENOMEM;
    int32_t max_label = 0;
    for (size_t i = 0; i < labels->shape[0]; i++) {
        int64_t label = labels->dtype == DP_NPY_I32 ? ((const int32_t *)labels->data)[i]
                                                    : ((const int64_t *)labels->data)[i];
        if (label < 0 || label >= INT32_MAX)
            return dp_fail(DP_EFORMAT,
                           "%s: label %lld at index %zu is out of range (0 to %d)", path,
                           (long long)label, i, INT32_MAX - 1);
        out->labels[i] = (int32_t)label;
        if (out->labels[i] > max_label)
            max_label = out->labels[i];
    }
    out->outputs = max_label + 1;
    return 0;
}

/* --- the file reader: rows are read from the open file on demand, nothing kept. A mapping
 * was tried first: page faults map whole page-cache folios around each touched row (here
 * about 400 KiB per 4 KiB row), so resident memory followed the kernel, not the rows read. --- */

typedef struct npy_rows {
    dp_npy_file file;
    char path[];
} npy_rows;

static int read_exactly_at(const npy_rows *f, void *buf, size_t len, off_t offset, size_t row)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = pread(f->file.fd, (uint8_t *)buf + done, len - done, offset + (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return dp_fail(DP_EIO, "%s: read failed: %s", f->path, strerror(errno));
        if (n == 0)
            return dp_fail(DP_EIO, "%s: the file ends before row %zu, which its header announced "
                           "(was it changed while in use?)", f->path, row);
        done += (size_t)n;
    }
    return 0;
}

/* Consecutive indices (evaluation's chunks, any run in a shuffled order) are read at once. */
static int read_rows_from_file(const dp_dataset *ds, const size_t *index, size_t n, float *x)
{
    const npy_rows *f = ds->reader_state;
    size_t row_bytes = (size_t)ds->dim * sizeof(float);
    for (size_t r = 0, run; r < n; r += run) {
        for (run = 1; r + run < n && index[r + run] == index[r] + run; run++)
            ;
        off_t offset = (off_t)(f->file.data_offset + index[r] * row_bytes);
        int status = read_exactly_at(f, (uint8_t *)x + r * row_bytes, run * row_bytes, offset, index[r]);
        if (status)
            return status;
    }
    dp_npy_from_little_endian(x, n * row_bytes, DP_NPY_F32);
    return 0;
}

static void close_rows(void *state)
{
    npy_rows *f = state;
    if (f)
        dp_npy_close(&f->file);
    free(f);
}

static const dp_reader file_reader = {.name = "npy", .read_features = read_rows_from_file, .close = close_rows};

static int fill_dataset(const char *labels_path, const dp_npy *array, dp_npy *labels,
                        dp_dataset *out)
{
    out->count = array->shape[0];
    out->dim = (int)dp_dims_numel(&out->sample);
    if (labels->dtype != DP_NPY_F32)
        return convert_labels(labels_path, labels, out);
    out->outputs = (int)labels->shape[1];
    out->targets = labels->data;
    labels->data = NULL;
    return 0;
}

int dp_npy_load_pair(const char *features_path, const char *labels_path, dp_dataset *out)
{
    memset(out, 0, sizeof *out);
    size_t path_len = strlen(features_path) + 1;
    npy_rows *features = dp_alloc(sizeof *features + path_len, "the features file's reader");
    if (!features)
        return DP_ENOMEM;
    memcpy(features->path, features_path, path_len);
    out->reader = &file_reader;
    out->reader_state = features;
    dp_npy labels = {0};
    const dp_npy *array = &features->file.array;
    int rc = dp_npy_open(features_path, &features->file);
    if (!rc)
        rc = dp_npy_features(features_path, array, &out->sample);
    if (!rc)
        rc = dp_npy_read(labels_path, &labels);
    if (!rc)
        rc = check_labels(features_path, array, labels_path, &labels);
    if (!rc)
        rc = fill_dataset(labels_path, array, &labels, out);
    dp_npy_free(&labels);
    if (rc) {
        dp_dataset_free(out);
        return rc;
    }
    snprintf(out->description, sizeof out->description, "NPY %s + %s (%zu x %d)",
             features_path, labels_path, out->count, out->dim);
    snprintf(out->labels_source, sizeof out->labels_source, "%s", labels_path);
    return 0;
}

/* FEATURES.npy,LABELS.npy, split at the first comma. */
int dp_open_npy_pair_spec(const dp_open_request *r, dp_dataset *out)
{
    const char *spec = r->spec;
    size_t features_len = (size_t)(strchr(spec, ',') - spec);
    const char *labels_path = spec + features_len + 1;
    if (features_len == 0 || *labels_path == '\0')
        return dp_fail(DP_EINVAL, "'%s': expected FEATURES.npy,LABELS.npy", spec);
    char *features_path = dp_alloc(features_len + 1, "features path");
    if (!features_path)
        return DP_ENOMEM;
    memcpy(features_path, spec, features_len);
    features_path[features_len] = '\0';
    int rc = dp_npy_load_pair(features_path, labels_path, out);
    free(features_path);
    return rc;
}
