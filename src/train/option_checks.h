/* Inside train/: what is checked of a command line once its options are read (options.c): the
 * strategy composed from the options that name it, and the combinations of values a run cannot
 * honour. */
#ifndef DP_TRAIN_OPTION_CHECKS_H
#define DP_TRAIN_OPTION_CHECKS_H

#include "src/train/option_table.h"

/* The strategy from --strategy or the options that name one, then the keys' own options; two
 * options naming strategies are refused. */
int dp_options_choose_strategy(dp_options *o, const dp_option_line *line);

/* Once the "applies to" rules hold: the model spec built, and every combination of values the
 * run cannot honour refused naming the options. world is the number of ranks. */
int dp_options_check_combination(dp_options *o, int world, const dp_option_line *line);

#endif
