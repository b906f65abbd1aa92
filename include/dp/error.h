/* Error reporting: library functions return 0 or a negative DP_E* code and leave a message. */
#ifndef DP_ERROR_H
#define DP_ERROR_H

#include <stddef.h>

enum dp_error_code {
    DP_OK = 0,
    DP_EIO = -1,      /* a file could not be opened, read or written */
    DP_EFORMAT = -2,  /* a file's contents are malformed or truncated */
    DP_EINVAL = -3,   /* an argument or option value is invalid */
    DP_ENOMEM = -4,   /* an allocation failed */
    DP_EMPI = -5,     /* an MPI call failed */
    DP_ENUMERIC = -6, /* training produced NaN or Inf, or replicas diverged */
    DP_EDEVICE = -7,  /* no usable GPU, or a CUDA, cuBLAS or NCCL call failed */
    DP_ESHAPE = -8    /* a file's tensor has another shape than the one asked for */
};

/* Records a printf-style message for dp_last_error() and returns code, so callers can
 * write `return dp_fail(DP_EINVAL, "...")`. */
int dp_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Puts a printf-style context before the last message ("--data DIR: " + message), for a
 * caller that knows which option or file the failure belongs to; returns code. */
int dp_fail_context(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The message of the most recent dp_fail() in this thread ("" if none). */
const char *dp_last_error(void);

/* Allocates or records DP_ENOMEM naming what was being allocated. */
void *dp_alloc(size_t bytes, const char *what);
void *dp_calloc(size_t count, size_t size, const char *what);

#endif
