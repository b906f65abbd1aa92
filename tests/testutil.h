/* Shared helpers for the Check suites: running a suite and writing fixture files. */
#ifndef DP_TESTUTIL_H
#define DP_TESTUTIL_H

#include <check.h>
#include <stddef.h>

/* Runs every test of suite s; returns the number of failed tests. */
int dp_test_run_suite(Suite *s);

/* Writes len bytes to NAME inside a per-process temporary directory (created on first use,
 * removed at exit) and returns the full path in a malloc'd string. gzip != 0 compresses. */
char *dp_test_write_file(const char *name, const void *bytes, size_t len, int gzip);

/* A path inside the temporary directory, for outputs (malloc'd). */
char *dp_test_path(const char *name);

#endif
