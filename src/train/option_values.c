/* One option's text turned into a value, strictly (option_values.h). */
#include "src/train/option_values.h"

#include "dp/error.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dp_option_long(const char *option, const char *text, long min, long max, const char *why, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || v < min)
        return dp_fail(DP_EINVAL, "--%s '%s': must be an integer >= %ld", option, text, min);
    if (errno == ERANGE || v > max)
        return dp_fail(DP_EINVAL, "--%s '%s': too large: at most %ld (%s)", option, text, max, why);
    *out = v;
    return 0;
}

/* Parsed in double, so the float32 it becomes can be checked against what was given. */
int dp_option_float(const char *option, const char *text, int positive, double below, float *out)
{
    char *end;
    double given = strtod(text, &end);
    if (end == text || *end || !isfinite(given) || given < 0.0 || (positive && given == 0.0))
        return dp_fail(DP_EINVAL, "--%s '%s': must be a finite number %s 0", option, text,
                       positive ? ">" : ">=");
    /* Too large only where float32 has no value for it: its largest as printed (3.4028235e38)
     * reads in double a little above FLT_MAX, yet rounds to it. */
    float value = (float)given;
    if (isinf(value))
        return dp_fail(DP_EINVAL, "--%s '%s': too large for float32 (at most %.9g)", option, text, (double)FLT_MAX);
    if (given != 0.0 && value == 0.0f)
        return dp_fail(DP_EINVAL, "--%s '%s': too small for float32: it would be 0", option, text);
    if (below != 0.0 && given >= below)
        return dp_fail(DP_EINVAL, "--%s '%s': must be below %g", option, text, below);
    if (below != 0.0 && value >= below)
        return dp_fail(DP_EINVAL, "--%s '%s': must be below %g, but it rounds to %g in float32 (the largest "
                       "float32 below %g is %.9g)", option, text, below, (double)value, below,
                       (double)nextafterf((float)below, 0.0f));
    *out = value;
    return 0;
}

int dp_option_double(const char *option, const char *text, double *out)
{
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !isfinite(v) || v < 0.0)
        return dp_fail(DP_EINVAL, "--%s '%s': must be a finite number >= 0", option, text);
    *out = v;
    return 0;
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
