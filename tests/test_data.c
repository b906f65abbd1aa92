/* Data loaders: IDX and .npy fixtures (good and deliberately broken), synthetic data and the
 * --data spec resolver. */
#include "dp/data.h"
#include "dp/error.h"
#include "dp/rng.h"
#include "tests/testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Checks the code and that the message names what went wrong (a path or a key phrase). */
#define assert_fails(call, code, needle)                                                      \
    do {                                                                                      \
        ck_assert_int_eq((call), (code));                                                     \
        ck_assert_msg(strstr(dp_last_error(), (needle)) != NULL,                              \
                      "error message \"%s\" does not mention \"%s\"", dp_last_error(),        \
                      (needle));                                                              \
    } while (0)

/* --- fixtures --- */

static const uint32_t image_dims[3] = {3, 2, 2};
static const uint8_t pixels[12] = {0, 255, 51, 102, 1, 2, 3, 4, 250, 128, 0, 17};
static const uint32_t label_dims[1] = {3};
static const uint8_t label_bytes[3] = {0, 2, 1};

/* An IDX file: the unsigned-byte magic for ndim, big-endian dims, then data_len bytes. */
static char *write_idx(const char *name, uint8_t type, int ndim, const uint32_t *dims,
                       const uint8_t *data, size_t data_len, int gzip)
{
    size_t len = 4 + 4 * (size_t)ndim + data_len;
    uint8_t *bytes = malloc(len);
    ck_assert_ptr_nonnull(bytes);
    bytes[0] = 0;
    bytes[1] = 0;
    bytes[2] = type;
    bytes[3] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++)
        for (int b = 0; b < 4; b++)
            bytes[4 + 4 * i + b] = (uint8_t)(dims[i] >> (24 - 8 * b));
    memcpy(bytes + 4 + 4 * ndim, data, data_len);
    char *path = dp_test_write_file(name, bytes, len, gzip);
    free(bytes);
    return path;
}

static char *write_images(const char *name, int gzip)
{
    return write_idx(name, 0x08, 3, image_dims, pixels, sizeof pixels, gzip);
}

static char *write_labels(const char *name, int gzip)
{
    return write_idx(name, 0x08, 1, label_dims, label_bytes, sizeof label_bytes, gzip);
}

/* A .npy file with the header dict padded to a 64-byte boundary as numpy does; data is
 * written in host order, which is the file's little-endian order on the hosts we test on. */
static char *write_npy(const char *name, int major, const char *dict, const void *data,
                       size_t data_len)
{
    size_t len_bytes = major == 1 ? 2 : 4;
    size_t prefix = 8 + len_bytes;
    size_t header_len = (prefix + strlen(dict) + 1 + 63) / 64 * 64 - prefix;
    size_t len = prefix + header_len + data_len;
    uint8_t *bytes = malloc(len);
    ck_assert_ptr_nonnull(bytes);
    memcpy(bytes, "\x93NUMPY", 6);
    bytes[6] = (uint8_t)major;
    bytes[7] = 0;
    for (size_t b = 0; b < len_bytes; b++)
        bytes[8 + b] = (uint8_t)(header_len >> (8 * b));
    memset(bytes + prefix, ' ', header_len);
    memcpy(bytes + prefix, dict, strlen(dict));
    bytes[prefix + header_len - 1] = '\n';
    memcpy(bytes + prefix + header_len, data, data_len);
    char *path = dp_test_write_file(name, bytes, len, 0);
    free(bytes);
    return path;
}

static const float features_3x2[6] = {0.5f, -1.0f, 2.0f, 3.25f, -0.125f, 7.0f};

static char *write_features(const char *name)
{
    return write_npy(name, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }",
                     features_3x2, sizeof features_3x2);
}

static char *write_i64_labels(const char *name, const int64_t labels[3])
{
    return write_npy(name, 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                     labels, 3 * sizeof labels[0]);
}

/* Every row's features through the dataset's reader, in order (free the result). */
static float *read_all_features(const dp_dataset *ds)
{
    size_t *index = malloc(ds->count * sizeof *index);
    float *x = malloc(ds->count * (size_t)ds->dim * sizeof *x);
    int32_t *labels = malloc(ds->count * sizeof *labels);
    float *targets = ds->targets ? malloc(ds->count * (size_t)ds->outputs * sizeof *targets) : NULL;
    ck_assert(index && x && labels && (targets || !ds->targets));
    for (size_t i = 0; i < ds->count; i++)
        index[i] = i;
    ck_assert_int_eq(dp_dataset_read_rows(ds, index, ds->count, x, labels, targets), 0);
    free(index);
    free(labels);
    free(targets);
    return x;
}

/* --- IDX --- */

static void assert_fixture_dataset(const dp_dataset *ds, const char *labels_path)
{
    ck_assert_uint_eq(ds->count, 3);
    ck_assert_int_eq(ds->dim, 4);
    ck_assert_int_eq(ds->outputs, 3);
    ck_assert_ptr_null(ds->targets);
    float *features = read_all_features(ds);
    for (size_t i = 0; i < sizeof pixels; i++)
        ck_assert_float_eq(features[i], pixels[i] / 255.0f);
    ck_assert_float_eq(features[0], 0.0f);
    ck_assert_float_eq(features[1], 1.0f);
    free(features);
    /* Images keep their shape, [1, rows, cols]; rows come by index list, repeats allowed. */
    ck_assert_int_eq(ds->sample.ndim, 3);
    ck_assert_int_eq(ds->sample.dim[0], 1);
    ck_assert_int_eq(ds->sample.dim[1], 2);
    ck_assert_int_eq(ds->sample.dim[2], 2);
    static const size_t index[3] = {2, 0, 2};
    float rows[3 * 4];
    int32_t labels[3];
    ck_assert_int_eq(dp_dataset_read_rows(ds, index, 3, rows, labels, NULL), 0);
    for (int r = 0; r < 3; r++) {
        for (int j = 0; j < 4; j++)
            ck_assert_float_eq(rows[r * 4 + j], pixels[index[r] * 4 + j] / 255.0f);
        ck_assert_int_eq(labels[r], label_bytes[index[r]]);
    }
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(ds->labels[i], label_bytes[i]);
    ck_assert_str_eq(ds->labels_source, labels_path);
    ck_assert_ptr_nonnull(strstr(ds->description, "(3 x 4)"));
}

START_TEST(test_idx_raw_round_trip)
{
    char *images = write_images("raw-images", 0);
    char *labels = write_labels("raw-labels", 0);
    dp_dataset ds;
    ck_assert_int_eq(dp_idx_load_pair(images, labels, &ds), 0);
    assert_fixture_dataset(&ds, labels);
    dp_dataset_free(&ds);
    free(images);
    free(labels);
}
END_TEST

START_TEST(test_idx_gzip_round_trip)
{
    /* Names without .gz: compression is detected from the content. */
    char *images = write_images("gz-images", 1);
    char *labels = write_labels("gz-labels", 1);
    dp_idx idx;
    ck_assert_int_eq(dp_idx_read(images, 3, &idx), 0);
    ck_assert_int_eq(idx.ndim, 3);
    ck_assert_uint_eq(idx.dims[0], 3);
    ck_assert_uint_eq(idx.dims[1], 2);
    ck_assert_uint_eq(idx.dims[2], 2);
    ck_assert_uint_eq(idx.count, 12);
    ck_assert_mem_eq(idx.data, pixels, sizeof pixels);
    dp_idx_free(&idx);
    ck_assert_ptr_null(idx.data);

    dp_dataset ds;
    ck_assert_int_eq(dp_idx_load_pair(images, labels, &ds), 0);
    assert_fixture_dataset(&ds, labels);
    dp_dataset_free(&ds);
    free(images);
    free(labels);
}
END_TEST

START_TEST(test_idx_wrong_magic)
{
    /* Type byte 0x0D is float data, which the loader does not read. */
    char *path = write_idx("float-images", 0x0D, 3, image_dims, pixels, sizeof pixels, 0);
    dp_idx idx;
    assert_fails(dp_idx_read(path, 3, &idx), DP_EFORMAT,
                    "wrong IDX magic 0x00000d03, expected 0x00000803");
    ck_assert_ptr_nonnull(strstr(dp_last_error(), path));
    ck_assert_ptr_null(idx.data);
    free(path);
}
END_TEST

START_TEST(test_idx_labels_given_as_images)
{
    char *labels = write_labels("swapped-labels", 1);
    dp_dataset ds;
    assert_fails(dp_idx_load_pair(labels, labels, &ds), DP_EFORMAT,
                    "wrong IDX magic 0x00000801, expected 0x00000803");
    ck_assert_ptr_nonnull(strstr(dp_last_error(), labels));
    ck_assert_ptr_null(ds.features);
    free(labels);
}
END_TEST

START_TEST(test_idx_truncated_header)
{
    static const uint8_t header[8] = {0, 0, 0x08, 3, 0, 0, 0, 3};
    char *path = dp_test_write_file("short-header", header, sizeof header, 0);
    dp_idx idx;
    assert_fails(dp_idx_read(path, 3, &idx), DP_EFORMAT,
                    "truncated header: expected 16 bytes, got 8");
    ck_assert_ptr_nonnull(strstr(dp_last_error(), path));
    free(path);
}
END_TEST

static void assert_truncated_data(int gzip)
{
    char *path = write_idx("short-data", 0x08, 3, image_dims, pixels, 7, gzip);
    dp_idx idx;
    assert_fails(dp_idx_read(path, 3, &idx), DP_EFORMAT,
                    "truncated: expected 12 bytes of data, got 7");
    ck_assert_ptr_nonnull(strstr(dp_last_error(), path));
    ck_assert_ptr_null(idx.data);
    free(path);
}

START_TEST(test_idx_truncated_data_raw)
{
    assert_truncated_data(0);
}
END_TEST

START_TEST(test_idx_truncated_data_gzip)
{
    assert_truncated_data(1);
}
END_TEST

START_TEST(test_idx_truncated_gzip_stream)
{
    uint8_t big[4096];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)(i * 7919 >> 3);
    static const uint32_t dims[3] = {1, 64, 64};
    char *path = write_idx("cut.gz", 0x08, 3, dims, big, sizeof big, 1);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(truncate(path, st.st_size / 2), 0);
    dp_idx idx;
    assert_fails(dp_idx_read(path, 3, &idx), DP_EFORMAT, "truncated");
    ck_assert_ptr_nonnull(strstr(dp_last_error(), path));
    free(path);
}
END_TEST

START_TEST(test_idx_trailing_data_rejected)
{
    static const uint32_t dims[1] = {2};
    char *path = write_idx("long-labels", 0x08, 1, dims, label_bytes, sizeof label_bytes, 0);
    dp_idx idx;
    assert_fails(dp_idx_read(path, 1, &idx), DP_EFORMAT,
                    "unexpected data after the 2 bytes");
    free(path);
}
END_TEST

START_TEST(test_idx_count_mismatch)
{
    static const uint32_t dims[1] = {2};
    char *images = write_images("mismatch-images", 0);
    char *labels = write_idx("mismatch-labels", 0x08, 1, dims, label_bytes, 2, 0);
    dp_dataset ds;
    assert_fails(dp_idx_load_pair(images, labels, &ds), DP_EFORMAT, "has 3 images but");
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "has 2 labels"));
    ck_assert_ptr_nonnull(strstr(dp_last_error(), labels));
    ck_assert_ptr_null(ds.features);
    free(images);
    free(labels);
}
END_TEST

START_TEST(test_idx_missing_file)
{
    char *path = dp_test_path("no-such-images.gz");
    dp_idx idx;
    assert_fails(dp_idx_read(path, 3, &idx), DP_EIO, path);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "No such file"));
    free(path);
}
END_TEST

/* --- .npy --- */

START_TEST(test_npy_f32_features_i64_labels)
{
    static const int64_t labels[3] = {4, 0, 2};
    char *features_path = write_features("v1-features.npy");
    char *labels_path = write_i64_labels("v1-labels.npy", labels);
    dp_dataset ds;
    ck_assert_int_eq(dp_npy_load_pair(features_path, labels_path, &ds), 0);
    ck_assert_uint_eq(ds.count, 3);
    ck_assert_int_eq(ds.dim, 2);
    ck_assert_int_eq(ds.outputs, 5);
    float *features = read_all_features(&ds);
    ck_assert_mem_eq(features, features_3x2, sizeof features_3x2);
    free(features);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(ds.labels[i], labels[i]);
    ck_assert_ptr_null(ds.targets);
    ck_assert_str_eq(ds.labels_source, labels_path);
    ck_assert_ptr_nonnull(strstr(ds.description, "(3 x 2)"));
    dp_dataset_free(&ds);
    free(features_path);
    free(labels_path);
}
END_TEST

START_TEST(test_npy_i32_labels)
{
    static const int32_t labels[3] = {1, 1, 0};
    char *features_path = write_features("i32-features.npy");
    char *labels_path = write_npy("i32-labels.npy", 1,
                                  "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }",
                                  labels, sizeof labels);
    dp_dataset ds;
    ck_assert_int_eq(dp_npy_load_pair(features_path, labels_path, &ds), 0);
    ck_assert_int_eq(ds.outputs, 2);
    ck_assert_mem_eq(ds.labels, labels, sizeof labels);
    dp_dataset_free(&ds);
    free(features_path);
    free(labels_path);
}
END_TEST

START_TEST(test_npy_f32_targets)
{
    static const float targets[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    char *features_path = write_features("targets-features.npy");
    char *targets_path = write_npy("targets.npy", 1,
                                   "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }",
                                   targets, sizeof targets);
    dp_dataset ds;
    ck_assert_int_eq(dp_npy_load_pair(features_path, targets_path, &ds), 0);
    ck_assert_int_eq(ds.outputs, 4);
    ck_assert_ptr_null(ds.labels);
    ck_assert_mem_eq(ds.targets, targets, sizeof targets);
    dp_dataset_free(&ds);
    free(features_path);
    free(targets_path);
}
END_TEST

START_TEST(test_npy_v2_header)
{
    /* Double quotes and no trailing comma are valid Python too. */
    char *path = write_npy("v2.npy", 2,
                           "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3)}",
                           features_3x2, sizeof features_3x2);
    dp_npy npy;
    ck_assert_int_eq(dp_npy_read(path, &npy), 0);
    ck_assert_int_eq(npy.dtype, DP_NPY_F32);
    ck_assert_int_eq(npy.ndim, 2);
    ck_assert_uint_eq(npy.shape[0], 2);
    ck_assert_uint_eq(npy.shape[1], 3);
    ck_assert_mem_eq(npy.data, features_3x2, sizeof features_3x2);
    dp_npy_free(&npy);
    ck_assert_ptr_null(npy.data);
    free(path);
}
END_TEST

static void assert_rejected_dtype(const char *descr)
{
    char dict[128];
    snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (6,), }",
             descr);
    char *path = write_npy("dtype.npy", 1, dict, features_3x2, sizeof features_3x2);
    char expected[32];
    snprintf(expected, sizeof expected, "dtype '%s' is not supported", descr);
    dp_npy npy;
    assert_fails(dp_npy_read(path, &npy), DP_EFORMAT, expected);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "'<f4' float32"));
    ck_assert_ptr_nonnull(strstr(dp_last_error(), path));
    free(path);
}

START_TEST(test_npy_unsupported_dtypes)
{
    assert_rejected_dtype("<f8");
    assert_rejected_dtype(">f4");
    assert_rejected_dtype("|u1");
}
END_TEST

START_TEST(test_npy_fortran_order)
{
    char *path = write_npy("fortran.npy", 1,
                           "{'descr': '<f4', 'fortran_order': True, 'shape': (3, 2), }",
                           features_3x2, sizeof features_3x2);
    dp_npy npy;
    assert_fails(dp_npy_read(path, &npy), DP_EFORMAT, "fortran_order True");
    free(path);
}
END_TEST

START_TEST(test_npy_unsupported_ranks)
{
    char *cube = write_npy("cube.npy", 1,
                           "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 3, 2), }",
                           features_3x2, sizeof features_3x2);
    char *scalar = write_npy("scalar.npy", 1,
                             "{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
                             features_3x2, sizeof features_3x2[0]);
    dp_npy npy;
    assert_fails(dp_npy_read(cube, &npy), DP_EFORMAT, "shape (1, 1, 1, 3, 2) has 5 dimensions");
    assert_fails(dp_npy_read(scalar, &npy), DP_EFORMAT, "shape () has 0 dimensions");
    free(cube);
    free(scalar);
}
END_TEST

START_TEST(test_npy_truncated)
{
    char *path = write_npy("short.npy", 1,
                           "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }",
                           features_3x2, 5 * sizeof(float));
    dp_npy npy;
    assert_fails(dp_npy_read(path, &npy), DP_EFORMAT,
                    "truncated: expected 24 bytes of data, got 20");
    ck_assert_ptr_nonnull(strstr(dp_last_error(), path));
    ck_assert_ptr_null(npy.data);
    free(path);
}
END_TEST

START_TEST(test_npy_trailing_data_rejected)
{
    char *path = write_npy("long.npy", 1,
                           "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }",
                           features_3x2, sizeof features_3x2);
    dp_npy npy;
    assert_fails(dp_npy_read(path, &npy), DP_EFORMAT,
                    "4 unexpected bytes after the 20 bytes of data");
    free(path);
}
END_TEST

START_TEST(test_npy_malformed_headers)
{
    static const char not_npy[] = "PK\x03\x04 this is a zip file";
    char *zip = dp_test_write_file("features.npz", not_npy, sizeof not_npy, 0);
    char *no_shape = write_npy("no-shape.npy", 1, "{'descr': '<f4', 'fortran_order': False}",
                               features_3x2, sizeof features_3x2);
    dp_npy npy;
    assert_fails(dp_npy_read(zip, &npy), DP_EFORMAT, "not a .npy file");
    assert_fails(dp_npy_read(no_shape, &npy), DP_EFORMAT, "missing key 'shape'");
    free(zip);
    free(no_shape);
}
END_TEST

START_TEST(test_npy_count_mismatch)
{
    static const int64_t labels[2] = {0, 1};
    char *features_path = write_features("n-features.npy");
    char *labels_path = write_npy("n-labels.npy", 1,
                                  "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }",
                                  labels, sizeof labels);
    dp_dataset ds;
    assert_fails(dp_npy_load_pair(features_path, labels_path, &ds), DP_EFORMAT,
                    "has 3 samples but");
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "has 2 labels"));
    ck_assert_ptr_null(ds.features);
    free(features_path);
    free(labels_path);
}
END_TEST

START_TEST(test_npy_negative_label)
{
    static const int64_t labels[3] = {0, -1, 2};
    char *features_path = write_features("neg-features.npy");
    char *labels_path = write_i64_labels("neg-labels.npy", labels);
    dp_dataset ds;
    assert_fails(dp_npy_load_pair(features_path, labels_path, &ds), DP_EFORMAT,
                    "label -1 at index 1 is out of range");
    ck_assert_ptr_nonnull(strstr(dp_last_error(), labels_path));
    ck_assert_ptr_null(ds.features);
    ck_assert_ptr_null(ds.labels);
    free(features_path);
    free(labels_path);
}
END_TEST

START_TEST(test_npy_labels_as_features)
{
    static const int64_t labels[3] = {0, 1, 2};
    char *labels_path = write_i64_labels("swapped.npy", labels);
    dp_dataset ds;
    assert_fails(dp_npy_load_pair(labels_path, labels_path, &ds), DP_EFORMAT,
                    "features must be a float32 array [N, D], [N, H, W] or [N, C, H, W], got int64 (3,)");
    free(labels_path);
}
END_TEST

/* --- synthetic --- */

START_TEST(test_synthetic_deterministic)
{
    dp_dataset a, b;
    ck_assert_int_eq(dp_synthetic_make(50, 7, 3, 0, 11, 22, &a), 0);
    ck_assert_int_eq(dp_synthetic_make(50, 7, 3, 0, 11, 22, &b), 0);
    ck_assert_mem_eq(a.features, b.features, 50 * 7 * sizeof(float));
    ck_assert_mem_eq(a.labels, b.labels, 50 * sizeof(int32_t));
    ck_assert_str_eq(a.description, b.description);
    dp_dataset_free(&a);
    dp_dataset_free(&b);
}
END_TEST

START_TEST(test_synthetic_sample_seed_changes_inputs_not_teacher)
{
    enum { N = 40, D = 5, K = 4 };
    dp_dataset base, other, shifted;
    ck_assert_int_eq(dp_synthetic_make(N, D, K, 0, 7, 100, &base), 0);
    ck_assert_int_eq(dp_synthetic_make(N, D, K, 0, 7, 101, &other), 0);
    ck_assert_int_ne(memcmp(base.features, other.features, sizeof(float) * N * D), 0);

    /* Inputs are the sample stream's uniforms in order, so seeding with the stream's state
     * after one sample starts at base's second sample: under the same teacher it must get
     * the same label although the sample seed differs. */
    dp_rng rng;
    dp_rng_seed(&rng, 100);
    for (int d = 0; d < D; d++)
        dp_rng_uniform(&rng);
    ck_assert_int_eq(dp_synthetic_make(N - 1, D, K, 0, 7, rng.state, &shifted), 0);
    ck_assert_mem_eq(shifted.features, base.features + D, sizeof(float) * (N - 1) * D);
    ck_assert_mem_eq(shifted.labels, base.labels + 1, sizeof(int32_t) * (N - 1));
    dp_dataset_free(&base);
    dp_dataset_free(&other);
    dp_dataset_free(&shifted);
}
END_TEST

START_TEST(test_synthetic_teacher_seed_changes_labels_not_inputs)
{
    dp_dataset a, b;
    ck_assert_int_eq(dp_synthetic_make(200, 6, 5, 0, 1, 9, &a), 0);
    ck_assert_int_eq(dp_synthetic_make(200, 6, 5, 0, 2, 9, &b), 0);
    ck_assert_mem_eq(a.features, b.features, 200 * 6 * sizeof(float));
    ck_assert_int_ne(memcmp(a.labels, b.labels, 200 * sizeof(int32_t)), 0);
    dp_dataset_free(&a);
    dp_dataset_free(&b);
}
END_TEST

START_TEST(test_synthetic_classes_in_range)
{
    enum { N = 2000, D = 16, K = 4 };
    dp_dataset ds;
    ck_assert_int_eq(dp_synthetic_make(N, D, K, 0, 3, 4, &ds), 0);
    ck_assert_uint_eq(ds.count, N);
    ck_assert_int_eq(ds.dim, D);
    ck_assert_int_eq(ds.outputs, K);
    ck_assert_ptr_null(ds.targets);
    int seen[K] = {0};
    for (size_t i = 0; i < N; i++) {
        ck_assert_int_ge(ds.labels[i], 0);
        ck_assert_int_lt(ds.labels[i], K);
        seen[ds.labels[i]] = 1;
    }
    ck_assert_int_ge(seen[0] + seen[1] + seen[2] + seen[3], 2);
    for (size_t i = 0; i < (size_t)N * D; i++) {
        ck_assert_float_ge(ds.features[i], -1.0f);
        ck_assert_float_le(ds.features[i], 1.0f);
    }
    dp_dataset_free(&ds);
}
END_TEST

START_TEST(test_synthetic_regression_targets)
{
    enum { N = 100, D = 8, K = 3 };
    dp_dataset ds;
    ck_assert_int_eq(dp_synthetic_make(N, D, K, 1, 5, 6, &ds), 0);
    ck_assert_ptr_null(ds.labels);
    ck_assert_ptr_nonnull(ds.targets);
    ck_assert_int_eq(ds.outputs, K);
    ck_assert_ptr_nonnull(strstr(ds.description, "regression"));
    float lowest = ds.targets[0], highest = ds.targets[0];
    for (size_t i = 0; i < (size_t)N * K; i++) {
        ck_assert(isfinite(ds.targets[i]));
        lowest = fminf(lowest, ds.targets[i]);
        highest = fmaxf(highest, ds.targets[i]);
    }
    ck_assert_float_gt(highest - lowest, 0.1f);
    dp_dataset_free(&ds);
}
END_TEST

START_TEST(test_synthetic_invalid_arguments)
{
    dp_dataset ds;
    assert_fails(dp_synthetic_make(0, 5, 3, 0, 1, 2, &ds), DP_EINVAL, "at least one sample");
    assert_fails(dp_synthetic_make(10, 0, 3, 0, 1, 2, &ds), DP_EINVAL, "input dimension");
    assert_fails(dp_synthetic_make(10, 5, 1, 0, 1, 2, &ds), DP_EINVAL, "at least 2 classes");
    assert_fails(dp_synthetic_make(10, 5, 0, 1, 1, 2, &ds), DP_EINVAL, "at least 1 output");
    ck_assert_ptr_null(ds.features);
}
END_TEST

/* --- dp_dataset_open --- */

START_TEST(test_dataset_synthetic_spec)
{
    dp_dataset train, test, expected;
    ck_assert_int_eq(dp_dataset_open("synthetic:100,6,3", 0, 0, 42, &train), 0);
    ck_assert_int_eq(dp_dataset_open("synthetic:100,6,3", 1, 0, 42, &test), 0);
    ck_assert_uint_eq(train.count, 100);
    ck_assert_uint_eq(test.count, 20);
    ck_assert_int_eq(test.dim, 6);
    ck_assert_int_eq(test.outputs, 3);
    ck_assert_str_eq(test.labels_source, "synthetic:100,6,3");

    ck_assert_int_eq(dp_synthetic_make(20, 6, 3, 0, dp_rng_mix(42, 0), dp_rng_mix(42, 2),
                                       &expected),
                     0);
    ck_assert_mem_eq(test.features, expected.features, 20 * 6 * sizeof(float));
    ck_assert_mem_eq(test.labels, expected.labels, 20 * sizeof(int32_t));
    dp_dataset_free(&expected);
    ck_assert_int_eq(dp_synthetic_make(100, 6, 3, 0, dp_rng_mix(42, 0), dp_rng_mix(42, 1),
                                       &expected),
                     0);
    ck_assert_mem_eq(train.labels, expected.labels, 100 * sizeof(int32_t));
    dp_dataset_free(&expected);
    dp_dataset_free(&train);
    dp_dataset_free(&test);

    ck_assert_int_eq(dp_dataset_open("synthetic:3,2,2", 1, 1, 42, &test), 0);
    ck_assert_uint_eq(test.count, 1);
    ck_assert_ptr_nonnull(test.targets);
    dp_dataset_free(&test);
}
END_TEST

START_TEST(test_dataset_malformed_synthetic_specs)
{
    static const char *const specs[] = {
        "synthetic:10,5",  "synthetic:0,5,3", "synthetic:10,5,3x", "synthetic:",
        "synthetic:10,-5,3", "synthetic:10, 5,3", "synthetic:10,5,99999999999",
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        dp_dataset ds;
        assert_fails(dp_dataset_open(specs[i], 0, 0, 1, &ds), DP_EINVAL, specs[i]);
        ck_assert_ptr_nonnull(strstr(dp_last_error(), "malformed synthetic spec"));
    }
}
END_TEST

START_TEST(test_dataset_npy_pair_spec)
{
    static const int64_t labels[3] = {2, 1, 0};
    char *features_path = write_features("spec-features.npy");
    char *labels_path = write_i64_labels("spec-labels.npy", labels);
    char spec[1024];
    snprintf(spec, sizeof spec, "%s,%s", features_path, labels_path);
    dp_dataset ds;
    ck_assert_int_eq(dp_dataset_open(spec, 1, 1, 0, &ds), 0);
    ck_assert_uint_eq(ds.count, 3);
    ck_assert_int_eq(ds.labels[0], 2);
    dp_dataset_free(&ds);
    assert_fails(dp_dataset_open(",labels.npy", 0, 0, 0, &ds), DP_EINVAL, ",labels.npy");
    free(features_path);
    free(labels_path);
}
END_TEST

START_TEST(test_dataset_mnist_directory)
{
    char *dir = dp_test_path("mnist");
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    char *files[4] = {
        write_images("mnist/train-images-idx3-ubyte.gz", 1),
        write_labels("mnist/train-labels-idx1-ubyte.gz", 1),
        write_images("mnist/t10k-images.idx3-ubyte", 0),
        write_labels("mnist/t10k-labels-idx1-ubyte", 0),
    };
    dp_dataset train, test;
    ck_assert_int_eq(dp_dataset_open(dir, 0, 0, 0, &train), 0);
    assert_fixture_dataset(&train, files[1]);
    ck_assert_int_eq(dp_dataset_open(dir, 1, 0, 0, &test), 0);
    assert_fixture_dataset(&test, files[3]);
    dp_dataset_free(&train);
    dp_dataset_free(&test);
    for (int i = 0; i < 4; i++)
        free(files[i]);
    free(dir);
}
END_TEST

START_TEST(test_dataset_directory_without_idx_files)
{
    char *dir = dp_test_path("empty-dir");
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    dp_dataset ds;
    assert_fails(dp_dataset_open(dir, 1, 0, 0, &ds), DP_EIO, dir);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "t10k-images-idx3-ubyte.gz"));
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "t10k-images.idx3-ubyte"));
    free(dir);
}
END_TEST

START_TEST(test_dataset_unknown_spec)
{
    char *dir = dp_test_path("no-such-dir");
    dp_dataset ds;
    assert_fails(dp_dataset_open(dir, 0, 0, 0, &ds), DP_EIO, "no such data directory");
    ck_assert_ptr_nonnull(strstr(dp_last_error(), dir));
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "synthetic:N,D,K"));
    ck_assert_ptr_null(ds.features);
    free(dir);
}
END_TEST

START_TEST(test_dataset_free_is_idempotent)
{
    dp_dataset ds = {0};
    dp_dataset_free(&ds);
    ck_assert_int_eq(dp_dataset_open("synthetic:4,3,2", 0, 0, 0, &ds), 0);
    dp_dataset_free(&ds);
    ck_assert_ptr_null(ds.features);
    ck_assert_uint_eq(ds.count, 0);
    dp_dataset_free(&ds);
}
END_TEST

START_TEST(test_dataset_fashion_mnist)
{
    struct stat st;
    if (stat(DP_FASHION_MNIST_DIR, &st) != 0)
        return;
    dp_dataset train, test;
    ck_assert_int_eq(dp_dataset_open("fashion-mnist", 0, 0, 0, &train), 0);
    ck_assert_uint_eq(train.count, 60000);
    ck_assert_int_eq(train.dim, 784);
    ck_assert_int_eq(train.outputs, 10);
    ck_assert_int_eq(dp_dataset_open("fashion-mnist", 1, 0, 0, &test), 0);
    ck_assert_uint_eq(test.count, 10000);
    ck_assert_int_eq(test.outputs, 10);
    dp_dataset_free(&train);
    dp_dataset_free(&test);
}
END_TEST

/* A directory is decided by what it is, not by its name: ".npy" or a comma in it changes
 * nothing, and it keeps its test split. */
START_TEST(test_dataset_directory_named_like_npy)
{
    const char *names[] = {"set.npy", "a.npy,b.npy"};
    for (int n = 0; n < 2; n++) {
        char *dir = dp_test_path(names[n]);
        ck_assert_int_eq(mkdir(dir, 0700), 0);
        char name[128];
        const char *files[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
        for (int i = 0; i < 4; i++) {
            snprintf(name, sizeof name, "%s/%s", names[n], files[i]);
            free(i % 2 ? write_labels(name, 0) : write_images(name, 0));
        }
        ck_assert_int_eq(dp_dataset_has_test_split(dir), 1);
        dp_dataset test;
        ck_assert_msg(dp_dataset_open(dir, 1, 0, 0, &test) == 0, "%s", dp_last_error());
        ck_assert_ptr_nonnull(strstr(test.labels_source, "t10k-labels-idx1-ubyte"));
        dp_dataset_free(&test);
        free(dir);
    }
    ck_assert_int_eq(dp_dataset_has_test_split("features.npy,labels.npy"), 0);
    ck_assert_int_eq(dp_dataset_has_test_split("synthetic:10,2,2"), 1);
    ck_assert_int_eq(dp_dataset_has_test_split("fashion-mnist"), 1);
}
END_TEST

/* A FIFO where a data file belongs is refused at once (with no writer, opening it to read
 * would block forever, before any watchdog runs); Check's timeout catches a hang. */
START_TEST(test_dataset_fifo_data_files_are_refused)
{
    char *dir = dp_test_path("fifo-data");
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    char *labels = write_labels("fifo-data/train-labels-idx1-ubyte", 0);
    char *images = dp_test_path("fifo-data/train-images-idx3-ubyte");
    ck_assert_int_eq(mkfifo(images, 0600), 0);
    dp_dataset ds;
    assert_fails(dp_dataset_open(dir, 0, 0, 0, &ds), DP_EIO, images);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "is a FIFO (named pipe), not a regular file"));
    char *features = write_features("fifo-features.npy");
    char *fifo_labels = dp_test_path("fifo-labels.npy");
    ck_assert_int_eq(mkfifo(fifo_labels, 0600), 0);
    char spec[2048];
    snprintf(spec, sizeof spec, "%s,%s", features, fifo_labels);
    assert_fails(dp_dataset_open(spec, 0, 0, 0, &ds), DP_EIO, "is a FIFO");
    dp_idx idx;
    assert_fails(dp_idx_read(images, 3, &idx), DP_EIO, "is a FIFO");
    free(dir);
    free(labels);
    free(images);
    free(features);
    free(fifo_labels);
}
END_TEST

static Suite *data_suite(void)
{
    Suite *s = suite_create("data");
    TCase *idx = tcase_create("idx");
    tcase_add_test(idx, test_idx_raw_round_trip);
    tcase_add_test(idx, test_idx_gzip_round_trip);
    tcase_add_test(idx, test_idx_wrong_magic);
    tcase_add_test(idx, test_idx_labels_given_as_images);
    tcase_add_test(idx, test_idx_truncated_header);
    tcase_add_test(idx, test_idx_truncated_data_raw);
    tcase_add_test(idx, test_idx_truncated_data_gzip);
    tcase_add_test(idx, test_idx_truncated_gzip_stream);
    tcase_add_test(idx, test_idx_trailing_data_rejected);
    tcase_add_test(idx, test_idx_count_mismatch);
    tcase_add_test(idx, test_idx_missing_file);
    suite_add_tcase(s, idx);

    TCase *npy = tcase_create("npy");
    tcase_add_test(npy, test_npy_f32_features_i64_labels);
    tcase_add_test(npy, test_npy_i32_labels);
    tcase_add_test(npy, test_npy_f32_targets);
    tcase_add_test(npy, test_npy_v2_header);
    tcase_add_test(npy, test_npy_unsupported_dtypes);
    tcase_add_test(npy, test_npy_fortran_order);
    tcase_add_test(npy, test_npy_unsupported_ranks);
    tcase_add_test(npy, test_npy_truncated);
    tcase_add_test(npy, test_npy_trailing_data_rejected);
    tcase_add_test(npy, test_npy_malformed_headers);
    tcase_add_test(npy, test_npy_count_mismatch);
    tcase_add_test(npy, test_npy_negative_label);
    tcase_add_test(npy, test_npy_labels_as_features);
    suite_add_tcase(s, npy);

    TCase *synthetic = tcase_create("synthetic");
    tcase_add_test(synthetic, test_synthetic_deterministic);
    tcase_add_test(synthetic, test_synthetic_sample_seed_changes_inputs_not_teacher);
    tcase_add_test(synthetic, test_synthetic_teacher_seed_changes_labels_not_inputs);
    tcase_add_test(synthetic, test_synthetic_classes_in_range);
    tcase_add_test(synthetic, test_synthetic_regression_targets);
    tcase_add_test(synthetic, test_synthetic_invalid_arguments);
    suite_add_tcase(s, synthetic);

    TCase *dataset = tcase_create("dataset");
    /* Loading the real Fashion-MNIST takes a moment on a slow machine. */
    tcase_set_timeout(dataset, 60);
    tcase_add_test(dataset, test_dataset_synthetic_spec);
    tcase_add_test(dataset, test_dataset_malformed_synthetic_specs);
    tcase_add_test(dataset, test_dataset_npy_pair_spec);
    tcase_add_test(dataset, test_dataset_mnist_directory);
    tcase_add_test(dataset, test_dataset_directory_without_idx_files);
    tcase_add_test(dataset, test_dataset_unknown_spec);
    tcase_add_test(dataset, test_dataset_directory_named_like_npy);
    tcase_add_test(dataset, test_dataset_fifo_data_files_are_refused);
    tcase_add_test(dataset, test_dataset_free_is_idempotent);
    tcase_add_test(dataset, test_dataset_fashion_mnist);
    suite_add_tcase(s, dataset);
    return s;
}

int main(void)
{
    return dp_test_run_suite(data_suite()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
