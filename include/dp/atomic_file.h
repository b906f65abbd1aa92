/* Replacing a file so that a crash never leaves a partial file under its name. */
#ifndef DP_ATOMIC_FILE_H
#define DP_ATOMIC_FILE_H

#include <stdio.h>

/* Writes the whole contents to f; returns 0, or -1 with errno set. */
typedef int (*dp_write_contents_fn)(FILE *f, const void *context);

/* Writes "PATH.tmp.PID" with write_contents, fsyncs it and renames it over path; on failure
 * the temporary is removed. Returns 0, DP_EIO naming path and the problem, or DP_ENOMEM. */
int dp_write_file_atomically(const char *path, dp_write_contents_fn write_contents,
                             const void *context);

#endif
