/* Range checks of the options that size a buffer or a loop, alone and in the products and
 * sums that do: every one is refused with a message naming the options, never clamped or
 * left to wrap around. */
#ifndef DP_TRAIN_LIMITS_H
#define DP_TRAIN_LIMITS_H

#include "dp/options.h"

#include <stddef.h>

/* Per option: the largest value an integer option takes (checked as it is parsed). */
/* overflowed: the text was beyond LONG_MAX (strtol said ERANGE). */
int dp_option_limit_long(const char *option, const char *text, long value, int overflowed);

/* Per option: *stored = the float32 of given (the value as parsed), refused where the float32
 * loses the meaning: too large, rounded to 0, or rounded onto a bound (--momentum 0.99999999
 * is 1 in float32). */
int dp_option_to_float(const char *option, const char *text, double given, float *stored);

/* Once every option is read: the per-rank slice of --batch fits one forward pass (an int),
 * --batch x --accum fits a step, and the batch-sized buffers and the --layers parameters fit
 * the address space. */
int dp_options_check_limits(const dp_options *o, int world);

/* The run's optimizer steps (--steps, or --epochs x steps per epoch) without overflow, at
 * most what a checkpoint name holds. */
int dp_plan_total_steps(const dp_options *o, long steps_per_epoch, long *total_steps);

/* After an allocation failure while sizing the run: the same code, its message followed by
 * the options that size those buffers and what they come to (nparams 0: the model was not
 * built, its size comes from the spec on one sample of shape *input). */
int dp_explain_memory_failure(int status, const dp_options *o, int world, int max_rows,
                              size_t nparams, const dp_dims *input);

#endif
