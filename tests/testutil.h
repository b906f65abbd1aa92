/* Shared helpers for the Check suites: running a suite and writing fixture files. */
#ifndef DP_TESTUTIL_H
#define DP_TESTUTIL_H

#include "dp/backend.h"
#include "dp/data.h"
#include "dp/options.h"
#include "dp/train.h"

#include <mpi.h>
#include <check.h>
#include <stddef.h>

/* Runs every test of suite s; returns the number of failed tests. */
int dp_test_run_suite(Suite *s);

/* Multi-rank: runs every test of s without forking and returns the failures summed over all
 * ranks of MPI_COMM_WORLD, so the exit status reflects a failure on any rank. */
int dp_test_run_mpi_suite(Suite *s);

/* Multi-rank: MPI_Init with thread-multiple (as dp_worker, so the watchdog can name missing
 * ranks), returning this rank and the world size; the CPU backend on dp_test_blas_threads(). */
void dp_test_mpi_init(int *argc, char ***argv, int *rank, int *size);

/* BLAS threads per rank for the tests: DP_TEST_THREADS (the BLAS-core matrix sets it,
 * scripts/check-blas-cores.sh), else 1, whatever the machine's core count. */
int dp_test_blas_threads(void);

/* Multi-rank: 1 on every rank when len bytes at `bytes` equal rank 0's on every rank. */
int dp_test_same_on_every_rank(const void *bytes, size_t len);

/* Writes len bytes to NAME inside a per-process temporary directory (created on first use,
 * removed at exit) and returns the full path in a malloc'd string. gzip != 0 compresses. */
char *dp_test_write_file(const char *name, const void *bytes, size_t len, int gzip);

/* A path inside the temporary directory, for outputs (malloc'd). */
char *dp_test_path(const char *name);

/* Multi-rank: rank 0's dp_test_path(name), the same on every rank of MPI_COMM_WORLD. */
void dp_test_shared_path(const char *name, char *out, size_t size);

/* o's strategy from a --strategy text made with printf's format (zero-%d, exact:rows=8). */
void dp_test_strategy(dp_options *o, const char *format, ...) __attribute__((format(printf, 2, 3)));

/* The trainable parameters of o's model on `inputs` features. */
size_t dp_test_param_count(const dp_options *o, int inputs);

/* Trains o on data over mpi_comm (no test set), keeping the final parameters in
 * result->params (free them) when it succeeds; returns dp_train's status. */
int dp_test_train(const dp_options *o, const dp_dataset *data, MPI_Comm mpi_comm, dp_train_result *result);

/* Multi-rank: the backend DP_TEST_DEVICE asks for (cuda, else the CPU); with cuda and no GPU
 * visible (or no CUDA build) the program says so and exits 77, automake's SKIP. */
dp_device dp_test_device(int rank);

/* The entries of dir whose names contain `containing`. */
int dp_test_count_entries(const char *dir, const char *containing);

/* ||a - ref|| / ||ref|| over n floats (L2 norms, in double). */
double dp_test_relative_error(const float *a, const float *ref, size_t n);

#endif
