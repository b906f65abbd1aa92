/* A pair of .npy files as a dataset: float32 features [N, D] and int labels [N] or float32
 * targets [N, K], checked against each other (the format itself: npy.c). */
#include "dp/data.h"

#include "dp/error.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static void format_shape(const dp_npy *a, char *buf, size_t size)
{
    if (a->ndim == 1)
        snprintf(buf, size, "%s (%zu,)", dp_npy_dtype_name(a->dtype), a->shape[0]);
    else
        snprintf(buf, size, "%s (%zu, %zu)", dp_npy_dtype_name(a->dtype), a->shape[0],
                 a->shape[1]);
}

static int check_features(const char *path, const dp_npy *features)
{
    char shape[64];
    format_shape(features, shape, sizeof shape);
    if (features->dtype != DP_NPY_F32 || features->ndim != 2)
        return dp_fail(DP_EFORMAT, "%s: features must be a float32 [N, D] array, got %s", path,
                       shape);
    if (features->shape[0] == 0 || features->shape[1] == 0 || features->shape[1] > INT_MAX)
        return dp_fail(DP_EFORMAT, "%s: unsupported features shape %s", path, shape);
    return 0;
}

static int check_labels(const char *features_path, const dp_npy *features,
                        const char *labels_path, const dp_npy *labels)
{
    char shape[64];
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

static int fill_dataset(const char *labels_path, dp_npy *features, dp_npy *labels,
                        dp_dataset *out)
{
    out->count = features->shape[0];
    out->dim = (int)features->shape[1];
    out->features = features->data;
    features->data = NULL;
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
    dp_npy features = {0}, labels = {0};
    int rc = dp_npy_read(features_path, &features);
    if (!rc)
        rc = check_features(features_path, &features);
    if (!rc)
        rc = dp_npy_read(labels_path, &labels);
    if (!rc)
        rc = check_labels(features_path, &features, labels_path, &labels);
    if (!rc)
        rc = fill_dataset(labels_path, &features, &labels, out);
    dp_npy_free(&features);
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
