#include "dp/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[1024];

/* The length of the valid UTF-8 sequence at s (of a printable character), else 0. */
static size_t utf8_length(const unsigned char *s)
{
    size_t n = s[0] > 0xf4 ? 0 : s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return n == 2 && s[0] == 0xc2 && s[1] < 0xa0 ? 0 : n; /* U+0080-U+009F: the C1 controls */
}

/* A message quotes what files and command lines hold: control bytes and broken UTF-8 in it
 * become \xNN, so no input can move the terminal's cursor or forge a line of output. */
static void keep_printable(char *text, size_t size)
{
    char out[sizeof last_error];
    size_t used = 0;
    for (const unsigned char *s = (const unsigned char *)text; *s && used + 5 < sizeof out;) {
        size_t n = *s < 0x80 ? (*s >= 0x20 && *s != 0x7f) : utf8_length(s);
        if (n == 0) {
            used += (size_t)snprintf(out + used, sizeof out - used, "\\x%02x", *s);
            s++;
        } else {
            memcpy(out + used, s, n);
            used += n;
            s += n;
        }
    }
    out[used] = '\0';
    snprintf(text, size, "%s", out);
}

int dp_fail(int code, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, args);
    va_end(args);
    keep_printable(last_error, sizeof last_error);
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
    keep_printable(last_error, sizeof last_error);
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
