/* Range checks of the products and sums of the options that size a buffer or a loop (each
 * option's own range is its row's, option_rows.c): every one is refused with a message naming
 * the options, never clamped or left to wrap around. */
#ifndef DP_TRAIN_LIMITS_H
#define DP_TRAIN_LIMITS_H

#include "dp/options.h"

#include <stddef.h>

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
