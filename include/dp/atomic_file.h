/* Writing output files so that nothing partial is ever left under a final name, nothing that
 * is not a regular file is ever replaced, and no temporary outlives its writer for long. */
#ifndef DP_ATOMIC_FILE_H
#define DP_ATOMIC_FILE_H

#include <stdio.h>

/* Writes the whole contents to f; returns 0, or -1 with errno set. */
typedef int (*dp_write_contents_fn)(FILE *f, const void *context);

/* Writes the temporary "PATH.tmp.HOST.PID" with write_contents, fsyncs it and renames it over
 * path; on failure the temporary is removed. A path that exists and is not a regular file (a
 * directory, symbolic link, FIFO, device, socket) is refused before anything is written.
 * While the temporary exists, SIGTERM and SIGINT, where their action is still the default
 * (ending the process), first remove it and then end the process by the same signal. Stale
 * temporaries of path left by dead processes of this host (kill -9) are removed first.
 * One write at a time per process is guarded by the signal handlers (a concurrent second
 * write is not). Returns 0, DP_EIO naming path and the problem, or DP_ENOMEM. */
int dp_write_file_atomically(const char *path, dp_write_contents_fn write_contents,
                             const void *context);

/* Start-up check that dp_write_file_atomically can write path later: path is absent or a
 * regular file, and its directory exists and accepts a new file (the temporary is created and
 * removed). Messages start with "OPTION PATH: ". Returns 0 or DP_EIO. */
int dp_check_output_file(const char *option, const char *path);

/* Start-up check for an output directory: dir exists as a directory that accepts a new file,
 * or is absent and its parent directory exists and accepts one. Returns 0 or DP_EIO. */
int dp_check_output_dir(const char *option, const char *dir);

/* Which temporaries dp_remove_stale_temporaries may remove: those of target file names
 * accepts(name, context) returns non-zero for. */
typedef int (*dp_temporary_filter_fn)(const char *name, const void *context);

/* If name is a writer's temporary "NAME.tmp.HOST.PID" (of any host), NAME's length, else 0. */
size_t dp_temporary_target_length(const char *name);

/* Removes the regular files "NAME.tmp.HOST.PID" in dir whose HOST is this host and whose PID
 * no longer runs here, for the NAMEs accepts takes. Temporaries of other hosts (a shared
 * file system) and of live processes are left alone. Returns how many were removed, or
 * DP_EIO when dir cannot be read. */
int dp_remove_stale_temporaries(const char *dir, dp_temporary_filter_fn accepts, const void *context);

#endif
