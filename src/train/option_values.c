/* One option's text turned into a value, strictly (option_values.h). */
#include "src/train/option_values.h"

#include "dp/error.h"
#include "src/train/limits.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dp_option_long(const char *option, const char *text, long min, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || v < min)
        return dp_fail(DP_EINVAL, "--%s '%s': must be an integer >= %ld", option, text, min);
    int status = dp_option_limit_long(option, text, v, errno == ERANGE);
    if (status)
        return status;
    *out = v;
    return 0;
}

/* Parsed in double, so the float32 it becomes can be checked against what was given. */
int dp_option_float(const char *option, const char *text, int positive, float *out)
{
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !isfinite(v) || v < 0.0 || (positive && v == 0.0))
        return dp_fail(DP_EINVAL, "--%s '%s': must be a finite number %s 0", option, text,
                       positive ? ">" : ">=");
    return dp_option_to_float(option, text, v, out);
}

/* A positive size in MiB, kept in double (fractions of a MiB are fine). */
int dp_option_mib(const char *option, const char *text, size_t min_bytes, const char *why_min, double *out)
{
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !isfinite(v) || v <= 0.0 || v > 1e6)
        return dp_fail(DP_EINVAL, "--%s '%s': must be a number of MiB above 0 and at most 1e6", option, text);
    /* Compared in bytes, as the value is used: 1e-300 MiB is 0 bytes, not "a little". */
    if (v * 1048576.0 < (double)min_bytes)
        return dp_fail(DP_EINVAL, "--%s '%s': below %zu byte%s (%.10g MiB), %s", option, text, min_bytes,
                       min_bytes == 1 ? "" : "s", (double)min_bytes / 1048576.0, why_min);
    *out = v;
    return 0;
}

/* A count that may be written as 70e9: a whole number from 1 to 1e15. */
int dp_option_count(const char *option, const char *text, double *out)
{
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !isfinite(v) || v < 1.0 || v > 1e15 || v != floor(v))
        return dp_fail(DP_EINVAL, "--%s '%s': must be a whole number from 1 to 1e15 (70e9 is fine)", option, text);
    *out = v;
    return 0;
}

/* A seed is any 64-bit unsigned integer, digits only. */
int dp_option_seed(const char *option, const char *text, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (text[0] < '0' || text[0] > '9' || *end || errno)
        return dp_fail(DP_EINVAL, "--%s '%s': must be an integer from 0 to %llu", option, text,
                       (unsigned long long)UINT64_MAX);
    *out = (uint64_t)v;
    return 0;
}

int dp_option_text(const char *option, const char *text, char *dst, size_t size)
{
    if (!*text)
        return dp_fail(DP_EINVAL, "--%s: empty value", option);
    if (strlen(text) >= size)
        return dp_fail(DP_EINVAL, "--%s: value longer than %zu characters", option, size - 1);
    strcpy(dst, text);
    return 0;
}

/* Index of text in names, or an error listing them. */
int dp_option_choice(const char *option, const char *text, const char *const *names, int count,
                        int *out)
{
    for (int i = 0; i < count; i++)
        if (strcmp(text, names[i]) == 0) {
            *out = i;
            return 0;
        }
    char valid[128] = "";
    for (int i = 0; i < count; i++)
        snprintf(valid + strlen(valid), sizeof valid - strlen(valid), "%s%s", i ? ", " : "", names[i]);
    return dp_fail(DP_EINVAL, "--%s '%s': must be one of %s", option, text, valid);
}
