/* Opening the files a run reads (data, --init, --resume, --auto-table): regular files only. A
 * FIFO without a writer would block in open() before any watchdog runs, and a device can feed
 * endless bytes, so both are refused with a message naming the file and what it is. */
#ifndef DP_INPUT_FILE_H
#define DP_INPUT_FILE_H

#include <stdio.h>
#include <sys/types.h>

/* Opens path read-only as a file descriptor (close-on-exec) when it is a regular file; the
 * check is made before opening (so a device is never opened) and again on the open file.
 * Returns 0, or DP_EIO "PATH: cannot open: REASON" / "PATH: is a FIFO (named pipe), not a
 * regular file ...". */
int dp_open_input_fd(const char *path, int *fd);

/* dp_open_input_fd as a FILE * ("rb"). */
int dp_open_input(const char *path, FILE **f);

/* What a non-regular st_mode is, for messages: "a directory", "a FIFO (named pipe)", ... */
const char *dp_file_kind(mode_t mode);

#endif
