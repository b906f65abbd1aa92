/* Inside strategy/: what distinguishes the strategies. DDP is the table's plain entries; the
 * ZeRO stages add hooks where they shard (src/strategy/zero.c). strategy.c holds the table
 * and the bucket machinery every strategy shares. */
#ifndef DP_STRATEGY_TYPE_H
#define DP_STRATEGY_TYPE_H

#include "dp/strategy.h"

typedef struct dp_strategy_type {
    const char *name;
    dp_collective gradient_collective; /* what a bucket's gradients go through */
    const char *collective_name;       /* for the banner */
    int shards_state, shards_grads, shards_params;
    /* Gradients live in the strategy's working buffers, reduced into a shard every micro-batch
     * (stages 2 and 3): a bucket's memory is bound before backward writes it. */
    int reduces_every_micro;
    /* Hooks, NULL where the strategy does as DDP does. */
    int (*open)(dp_strategy *d);  /* shards and working buffers, after the buckets are planned */
    void (*close)(dp_strategy *d);
    int (*before_module)(dp_strategy *d, int segment, int backward, float **weights, float **grads);
    /* The memory bucket b's collective runs on (staged: copied there first). */
    float *(*bucket_data)(dp_strategy *d, dp_bucket *b);
    /* Bucket b's collective has completed: its result where the optimizer reads it. */
    void (*bucket_done)(dp_strategy *d, dp_bucket *b);
    int (*after_update)(dp_strategy *d);
} dp_strategy_type;

extern const dp_strategy_type dp_strategy_ddp, dp_strategy_zero1, dp_strategy_zero2, dp_strategy_zero3;

/* strategy.c's machinery the ZeRO stages call. */
/* Waits for bucket b's collective (if in flight) and completes it. */
int dp_strategy_wait_bucket(dp_strategy *d, dp_bucket *b);
/* Counts the spans of every started bucket into the times and marks them accounted. */
void dp_strategy_account_buckets(dp_strategy *d);

#endif
