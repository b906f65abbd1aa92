#include "dp/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[1024];

int dp_fail(int code, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, args);
    va_end(args);
    return code;
}

/* Appends text to last_error from *used on, cutting it where the buffer ends. */
static void append(size_t *used, const char *text)
{
    size_t n = strnlen(text, sizeof last_error - 1 - *used);
    memmove(last_error + *used, text, n);
    *used += n;
    last_error[*used] = '\0';
}

int dp_fail_context(int code, const char *fmt, ...)
{
    char message[sizeof last_error], context[sizeof last_error];
    memcpy(message, last_error, sizeof message);
    va_list args;
    va_start(args, fmt);
    vsnprintf(context, sizeof context, fmt, args);
    va_end(args);
    size_t used = 0;
    append(&used, context);
    append(&used, ": ");
    append(&used, message);
    return code;
}

const char *dp_last_error(void)
{
    return last_error;
}

void *dp_alloc(size_t bytes, const char *what)
{
    /* malloc(0) may return NULL; ask for one byte so NULL always means failure. */
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        dp_fail(DP_ENOMEM, "out of memory allocating %zu bytes for %s", bytes, what);
    return p;
}

void *dp_calloc(size_t count, size_t size, const char *what)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        dp_fail(DP_ENOMEM, "out of memory allocating %zu x %zu bytes for %s", count, size, what);
    return p;
}
