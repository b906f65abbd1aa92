/* One option's text turned into a value, strictly: the whole text must be the value, and a
 * value out of range is an error naming the option, never clamped (src/train/option_values.c). */
#ifndef DP_TRAIN_OPTION_VALUES_H
#define DP_TRAIN_OPTION_VALUES_H

#include <stddef.h>
#include <stdint.h>

/* An integer from min to max; why says why nothing above max works. */
int dp_option_long(const char *option, const char *text, long min, long max, const char *why, long *out);
/* A finite number >= 0 (> 0 when positive, < below when below is not 0) that float32 holds as
 * given: not too large, not rounded to 0, not rounded onto below (--momentum 0.99999999 is 1 in
 * float32). */
int dp_option_float(const char *option, const char *text, int positive, double below, float *out);
/* A finite number >= 0. */
int dp_option_double(const char *option, const char *text, double *out);
/* A size in MiB, at most 1e6 and at least min_bytes (why_min says why, for the message). */
int dp_option_mib(const char *option, const char *text, size_t min_bytes, const char *why_min, double *out);
/* A whole number from 1 to 1e15, 70e9 allowed. */
int dp_option_count(const char *option, const char *text, double *out);
/* Any 64-bit unsigned integer, digits only. */
int dp_option_seed(const char *option, const char *text, uint64_t *out);
/* A non-empty text that fits dst. */
int dp_option_text(const char *option, const char *text, char *dst, size_t size);
/* The index of text among names. */
int dp_option_choice(const char *option, const char *text, const char *const *names, int count, int *out);

#endif
