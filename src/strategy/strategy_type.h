/* Inside strategy/: what distinguishes the strategies. DDP is the table's plain entries; the
 * ZeRO stages add hooks where they shard (src/strategy/zero.c); --exact replaces the buckets
 * by its own sum (src/strategy/exact.c). strategy.c holds the table
 * and the bucket machinery every strategy shares. */
#ifndef DP_STRATEGY_TYPE_H
#define DP_STRATEGY_TYPE_H

#include "dp/strategy.h"

/* A key a strategy takes after its name (--strategy NAME:KEY=VALUE): a number in [least,
 * most] (whole when `whole`) or one of two words standing for values. */
typedef struct dp_strategy_key {
    const char *name;
    const char *metavar;
    double fallback;           /* the default */
    double least, most;
    int whole;
    const char *least_why;     /* why nothing below least works, for the message */
    const char *words[2];      /* named values ("auto", "unlimited"), NULL where none */
    double word_values[2];
    int arithmetic;            /* another value changes the bits: a checkpoint records it */
    const char *help;
} dp_strategy_key;

typedef struct dp_strategy_type {
    const char *name;
    const char *summary;               /* --help's line */
    const dp_strategy_key *keys;       /* its keys, at most DP_STRATEGY_KEYS_MAX */
    int key_count;
    /* What it refuses of a run (NULL: nothing), and BLAS threads it needs per rank (0: any). */
    int (*check)(const dp_strategy_choice *c, const dp_strategy_run *run);
    int blas_threads;
    const char *blas_threads_why;
    /* What checkpoints record as the world size and algorithm where its bits depend on
     * neither; NULL where they do. */
    const char *any_world;
    /* A step can be captured as a CUDA graph: its only collectives are the buckets'. */
    int captured;
    dp_collective gradient_collective; /* what a bucket's gradients go through */
    const char *collective_name;       /* for the banner */
    int shards_state, shards_grads, shards_params;
    /* Gradients live in the strategy's working buffers, reduced into a shard every micro-batch
     * (stages 2 and 3): a bucket's memory is bound before backward writes it. */
    int reduces_every_micro;
    /* Gradients are never reduced: each rank steps alone and the replicas are averaged now and
     * then (local-sgd). */
    int local_steps;
    /* Hooks, NULL where the strategy does as DDP does. */
    int (*open)(dp_strategy *d);  /* shards and working buffers, after the buckets are planned */
    void (*close)(dp_strategy *d);
    int (*before_module)(dp_strategy *d, int segment, int backward, float **weights, float **grads);
    /* The memory bucket b's collective runs on (staged: copied there first). */
    float *(*bucket_data)(dp_strategy *d, dp_bucket *b);
    /* Bucket b's collective has completed: its result where the optimizer reads it. */
    void (*bucket_done)(dp_strategy *d, dp_bucket *b);
    int (*after_update)(dp_strategy *d);
    /* --exact: a shard's gradient is final (add it up); finish instead of the buckets' wait;
     * the banner's line. */
    int (*add_shard)(dp_strategy *d, int last);
    int (*finish)(dp_strategy *d);
    int (*describe)(const dp_strategy *d, char *text, size_t size);
} dp_strategy_type;

/* The registry's i-th strategy (registry.c); NULL past the last. */
const dp_strategy_type *dp_strategy_at(int i);

extern const dp_strategy_type dp_strategy_ddp, dp_strategy_zero1, dp_strategy_zero2, dp_strategy_zero3,
    dp_strategy_local_sgd, dp_strategy_exact;

#define MIB_FLOATS ((double)(1 << 20) / sizeof(float))

/* buckets.c: the plan and the life of each bucket, for strategy.c and the ZeRO stages. */
/* How buckets take segments: whole (a bucket closes once it reaches its cap, as DDP's), cut at
 * the caps, or whole and never over the cap (a ZeRO budget's slots hold a bucket each). */
enum { DP_BUCKETS_WHOLE, DP_BUCKETS_SPLIT, DP_BUCKETS_BOUNDED };

/* The buckets of layout under config, segments taken as split says (NULL buckets: only
 * counted; bucket_of, when not NULL, gets each segment's bucket); returns how many. */
int dp_bucket_plan(const dp_strategy_layout *l, const dp_strategy_config *config, int split, dp_bucket *buckets,
                   int *bucket_of);
/* How type's buckets take segments under config (DP_BUCKETS_SPLIT or _WHOLE). */
int dp_strategy_splits_segments(const dp_strategy_type *type, const dp_strategy_config *config);
/* Starts bucket b's collective on the memory it runs on, through the bucket hook. */
int dp_strategy_start_bucket(dp_strategy *d, dp_bucket *b);
/* Advances every collective in flight, completing the buckets that finished. */
int dp_strategy_poll(dp_strategy *d);
/* Waits for bucket b's collective (if in flight) and completes it. */
int dp_strategy_wait_bucket(dp_strategy *d, dp_bucket *b);
/* Counts the spans of buckets[0..n) that started into the times and marks them accounted. */
void dp_strategy_account(dp_strategy *d, dp_bucket *buckets, int n);
/* Counts every started bucket's span. */
void dp_strategy_account_buckets(dp_strategy *d);
/* The largest bucket and unit (floats). */
size_t dp_strategy_largest_bucket(const dp_strategy *d);
size_t dp_strategy_largest_unit(const dp_strategy *d);
/* --no-overlap: the whole gradient in one collective after backward. */
int dp_strategy_reduce_whole(dp_strategy *d);

#endif
