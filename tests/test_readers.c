/* The reader interface: every reader's rows, sample shape and rows read by an index list
 * (repeats, reverse order, runs), .npy features of 2 to 4 dims, and rows read on demand from
 * the file (a file cut short after opening fails when a missing row is read, not before). The
 * IDX reader's case is in test_data.c beside its fixtures. */
#include "dp/data.h"
#include "dp/error.h"
#include "tests/testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Values no two rows share, so a row read from the wrong place shows. */
static float *distinct_values(size_t count)
{
    float *v = malloc(count * sizeof *v);
    ck_assert_ptr_nonnull(v);
    for (size_t i = 0; i < count; i++)
        v[i] = 0.25f * (float)i - 3.0f;
    return v;
}

static char *write_array(const char *name, enum dp_npy_dtype dtype, int ndim, const size_t *shape,
                         void *data)
{
    char *path = dp_test_path(name);
    dp_npy array = {.dtype = dtype, .ndim = ndim, .data = data};
    memcpy(array.shape, shape, (size_t)ndim * sizeof *shape);
    ck_assert_msg(dp_npy_write(path, &array) == 0, "%s", dp_last_error());
    return path;
}

static char *write_labels(const char *name, size_t count)
{
    int64_t *labels = malloc(count * sizeof *labels);
    for (size_t i = 0; i < count; i++)
        labels[i] = (int64_t)(i % 3);
    size_t shape[1] = {count};
    char *path = write_array(name, DP_NPY_I64, 1, shape, labels);
    free(labels);
    return path;
}

static int open_pair(const char *features, const char *labels, dp_dataset *ds)
{
    char spec[2048];
    snprintf(spec, sizeof spec, "%s,%s", features, labels);
    return dp_dataset_open(spec, 0, 0, 0, ds);
}

/* Reads index[0..n) and checks each row against expected [count, dim] and labels i % 3. */
static void assert_rows(const dp_dataset *ds, const size_t *index, size_t n, const float *expected)
{
    size_t dim = (size_t)ds->dim;
    float *x = malloc(n * dim * sizeof *x);
    int32_t *labels = malloc(n * sizeof *labels);
    ck_assert_msg(dp_dataset_read_rows(ds, index, n, x, labels, NULL) == 0, "%s", dp_last_error());
    for (size_t r = 0; r < n; r++) {
        ck_assert_mem_eq(x + r * dim, expected + index[r] * dim, dim * sizeof *x);
        ck_assert_int_eq(labels[r], (int32_t)(index[r] % 3));
    }
    free(x);
    free(labels);
}

/* Each features shape: the sample shape it gives and its width. */
static const struct shape_case {
    int ndim;
    size_t shape[4];
    dp_dims sample;
    int dim;
} shape_cases[] = {
    {2, {5, 6}, {1, {6}}, 6},
    {3, {5, 2, 3}, {2, {2, 3}}, 6},
    {4, {5, 1, 2, 3}, {3, {1, 2, 3}}, 6},
    {4, {5, 3, 4, 2}, {3, {3, 4, 2}}, 24},
};

START_TEST(test_npy_reader_shapes_and_rows)
{
    const struct shape_case *c = &shape_cases[_i];
    size_t values = c->shape[0] * (size_t)c->dim;
    float *features = distinct_values(values);
    char *features_path = write_array("shaped.npy", DP_NPY_F32, c->ndim, c->shape, features);
    char *labels_path = write_labels("shaped-labels.npy", c->shape[0]);
    dp_dataset ds;
    ck_assert_msg(open_pair(features_path, labels_path, &ds) == 0, "%s", dp_last_error());
    ck_assert_uint_eq(ds.count, 5);
    ck_assert_int_eq(ds.dim, c->dim);
    ck_assert_int_eq(ds.sample.ndim, c->sample.ndim);
    ck_assert_mem_eq(ds.sample.dim, c->sample.dim, sizeof c->sample.dim);
    ck_assert_str_eq(ds.reader->name, "npy");
    /* Repeats, reverse order, and runs of consecutive rows (read at once). */
    static const size_t index[] = {4, 0, 1, 2, 2, 3, 0, 4, 3};
    assert_rows(&ds, index, sizeof index / sizeof index[0], features);
    dp_dataset_free(&ds);
    free(features);
    free(features_path);
    free(labels_path);
}
END_TEST

START_TEST(test_npy_reader_targets)
{
    size_t shape[2] = {4, 3}, target_shape[2] = {4, 2};
    float *features = distinct_values(12), targets[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    char *features_path = write_array("t-features.npy", DP_NPY_F32, 2, shape, features);
    char *targets_path = write_array("t-targets.npy", DP_NPY_F32, 2, target_shape, targets);
    dp_dataset ds;
    ck_assert_int_eq(open_pair(features_path, targets_path, &ds), 0);
    static const size_t index[] = {3, 1};
    float x[2 * 3], got[2 * 2];
    ck_assert_int_eq(dp_dataset_read_rows(&ds, index, 2, x, NULL, got), 0);
    ck_assert_mem_eq(x, features + 9, 3 * sizeof(float));
    ck_assert_mem_eq(x + 3, features + 3, 3 * sizeof(float));
    static const float expected[4] = {7, 8, 3, 4};
    ck_assert_mem_eq(got, expected, sizeof expected);
    dp_dataset_free(&ds);
    free(features);
    free(features_path);
    free(targets_path);
}
END_TEST

START_TEST(test_npy_reader_rejects_shapes)
{
    size_t empty[3] = {2, 0, 3}, flat[1] = {2};
    float values[6] = {0};
    int32_t ints[24] = {0};
    size_t int_images[4] = {2, 1, 3, 4};
    char *labels = write_labels("r-labels.npy", 2);
    char *paths[3] = {
        write_array("empty-sample.npy", DP_NPY_F32, 3, empty, values),
        write_array("flat.npy", DP_NPY_F32, 1, flat, values),
        write_array("int-images.npy", DP_NPY_I32, 4, int_images, ints),
    };
    const char *needles[3] = {"unsupported features shape float32 (2, 0, 3)",
                              "must be a float32 array [N, D], [N, H, W] or [N, C, H, W], got float32 (2,)",
                              "got int32 (2, 1, 3, 4)"};
    for (int i = 0; i < 3; i++) {
        dp_dataset ds;
        ck_assert_int_eq(open_pair(paths[i], labels, &ds), DP_EFORMAT);
        ck_assert_msg(strstr(dp_last_error(), needles[i]) && strstr(dp_last_error(), paths[i]), "%s",
                      dp_last_error());
        ck_assert_ptr_null(ds.reader_state);
        free(paths[i]);
    }
    free(labels);
}
END_TEST

/* Rows are read when asked for: a file cut after row 1 still opened, and rows 0 and 1 read;
 * row 3 fails, naming the file and the row. */
START_TEST(test_npy_reader_reads_rows_on_demand)
{
    size_t shape[2] = {4, 1024};
    float *features = distinct_values(4 * 1024);
    char *features_path = write_array("cut.npy", DP_NPY_F32, 2, shape, features);
    char *labels_path = write_labels("cut-labels.npy", 4);
    dp_dataset ds;
    ck_assert_int_eq(open_pair(features_path, labels_path, &ds), 0);
    FILE *f = fopen(features_path, "rb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long header = ftell(f) - (long)(4 * 1024 * sizeof(float));
    fclose(f);
    ck_assert_int_eq(truncate(features_path, header + 2 * 1024 * (long)sizeof(float)), 0);
    static const size_t first[] = {1, 0}, missing[] = {0, 3};
    assert_rows(&ds, first, 2, features);
    float x[2 * 1024];
    int32_t labels[2];
    ck_assert_int_eq(dp_dataset_read_rows(&ds, missing, 2, x, labels, NULL), DP_EIO);
    ck_assert_msg(strstr(dp_last_error(), features_path) && strstr(dp_last_error(), "ends before row 3"), "%s",
                  dp_last_error());
    dp_dataset_free(&ds);
    free(features);
    free(features_path);
    free(labels_path);
}
END_TEST

START_TEST(test_synthetic_reader_rows)
{
    dp_dataset ds;
    ck_assert_int_eq(dp_dataset_open("synthetic:12,5,3", 0, 0, 9, &ds), 0);
    ck_assert_uint_eq(ds.count, 12);
    ck_assert_int_eq(ds.sample.ndim, 1);
    ck_assert_int_eq(ds.sample.dim[0], 5);
    ck_assert_str_eq(ds.reader->name, "memory");
    static const size_t index[] = {11, 0, 11, 4};
    float x[4 * 5];
    int32_t labels[4];
    ck_assert_int_eq(dp_dataset_read_rows(&ds, index, 4, x, labels, NULL), 0);
    for (int r = 0; r < 4; r++) {
        ck_assert_mem_eq(x + r * 5, ds.features + index[r] * 5, 5 * sizeof(float));
        ck_assert_int_eq(labels[r], ds.labels[index[r]]);
    }
    dp_dataset_free(&ds);
}
END_TEST

static Suite *readers_suite(void)
{
    Suite *s = suite_create("readers");
    TCase *npy = tcase_create("npy");
    tcase_add_loop_test(npy, test_npy_reader_shapes_and_rows, 0, (int)(sizeof shape_cases / sizeof shape_cases[0]));
    tcase_add_test(npy, test_npy_reader_targets);
    tcase_add_test(npy, test_npy_reader_rejects_shapes);
    tcase_add_test(npy, test_npy_reader_reads_rows_on_demand);
    suite_add_tcase(s, npy);
    TCase *synthetic = tcase_create("synthetic");
    tcase_add_test(synthetic, test_synthetic_reader_rows);
    suite_add_tcase(s, synthetic);
    return s;
}

int main(void)
{
    return dp_test_run_suite(readers_suite()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
