#include "tests/testutil.h"

#include "dp/error.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static char temp_dir[256];

static void remove_temp_dir(void)
{
    char command[300];
    snprintf(command, sizeof command, "rm -rf '%s'", temp_dir);
    if (system(command) != 0)
        fprintf(stderr, "warning: could not remove %s\n", temp_dir);
}

static const char *test_temp_dir(void)
{
    if (temp_dir[0])
        return temp_dir;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(temp_dir, sizeof temp_dir, "%s/dptrain-test-XXXXXX", base);
    ck_assert_msg(mkdtemp(temp_dir) != NULL, "mkdtemp %s failed", temp_dir);
    atexit(remove_temp_dir);
    return temp_dir;
}

void dp_test_shared_path(const char *name, char *out, size_t size)
{
    char *path = dp_test_path(name);
    snprintf(out, size, "%s", path);
    free(path);
    MPI_Bcast(out, (int)size, MPI_CHAR, 0, MPI_COMM_WORLD);
}

void dp_test_strategy(dp_options *o, const char *format, ...)
{
    char text[256];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof text, format, args);
    va_end(args);
    ck_assert_msg(dp_strategy_choose(&o->strategy, text, "--strategy") == 0, "%s", dp_last_error());
}

size_t dp_test_param_count(const dp_options *o, int inputs)
{
    dp_model m;
    ck_assert_int_eq(dp_model_create(&m, dp_backend_cpu(), &o->model, inputs, 1), 0);
    size_t n = dp_params_floats(&m.params);
    dp_model_free(&m);
    return n;
}

int dp_test_train(const dp_options *o, const dp_dataset *data, MPI_Comm mpi_comm, dp_train_result *result)
{
    dp_comm comm;
    ck_assert_msg(dp_comm_init(&comm, mpi_comm, o->allreduce) == 0, "%s", dp_last_error());
    int status = dp_train(o, data, NULL, &comm, result, 1);
    dp_comm_free(&comm);
    return status;
}

dp_device dp_test_device(int rank)
{
    const char *device = getenv("DP_TEST_DEVICE");
    if (!device || strcmp(device, "cuda") != 0)
        return DP_DEVICE_CPU;
    if (dp_backend_gpu_count() == 0) {
        if (rank == 0)
            printf("DP_TEST_DEVICE=cuda: no CUDA GPU visible (or built without CUDA): skipped\n");
        MPI_Finalize();
        exit(77);
    }
    return DP_DEVICE_CUDA;
}

char *dp_test_path(const char *name)
{
    const char *dir = test_temp_dir();
    size_t len = strlen(dir) + strlen(name) + 2;
    char *path = malloc(len);
    ck_assert_ptr_nonnull(path);
    snprintf(path, len, "%s/%s", dir, name);
    return path;
}

char *dp_test_write_file(const char *name, const void *bytes, size_t len, int gzip)
{
    char *path = dp_test_path(name);
    if (gzip) {
        gzFile gz = gzopen(path, "wb");
        ck_assert_ptr_nonnull(gz);
        ck_assert_int_eq(gzwrite(gz, bytes, (unsigned)len), (int)len);
        ck_assert_int_eq(gzclose(gz), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(bytes, 1, len, f), len);
        ck_assert_int_eq(fclose(f), 0);
    }
    return path;
}

int dp_test_run_suite(Suite *s)
{
    SRunner *runner = srunner_create(s);
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed;
}

void dp_test_mpi_init(int *argc, char ***argv, int *rank, int *size)
{
    int thread_level;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    dp_backend_cpu_set_threads(dp_test_blas_threads(), NULL);
}

int dp_test_blas_threads(void)
{
    const char *threads = getenv("DP_TEST_THREADS");
    return threads && atoi(threads) > 0 ? atoi(threads) : 1;
}

int dp_test_run_mpi_suite(Suite *s)
{
    SRunner *runner = srunner_create(s);
    /* Forking after MPI_Init breaks MPI, whatever CK_FORK says. */
    srunner_set_fork_status(runner, CK_NOFORK);
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner), failed_anywhere = 0;
    srunner_free(runner);
    MPI_Allreduce(&failed, &failed_anywhere, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    return failed_anywhere;
}

int dp_test_same_on_every_rank(const void *bytes, size_t len)
{
    char *root_copy = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(root_copy);
    memcpy(root_copy, bytes, len);
    MPI_Bcast(root_copy, (int)len, MPI_BYTE, 0, MPI_COMM_WORLD);
    int same = memcmp(root_copy, bytes, len) == 0, all_same = 0;
    MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    free(root_copy);
    return all_same;
}

int dp_test_count_entries(const char *dir, const char *containing)
{
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s", dir);
    int count = 0;
    for (struct dirent *e; (e = readdir(d));)
        count += strstr(e->d_name, containing) != NULL;
    closedir(d);
    return count;
}

double dp_test_relative_error(const float *a, const float *ref, size_t n)
{
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        diff += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        norm += (double)ref[i] * ref[i];
    }
    return sqrt(diff / norm);
}
