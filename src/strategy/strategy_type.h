/* Inside strategy/: what distinguishes the strategies. DDP is the table's plain entries; the
 * ZeRO stages add hooks where they shard (src/strategy/zero.c); --exact replaces the buckets
 * by its own sum (src/strategy/exact.c). strategy.c holds the table
 * and the bucket machinery every strategy shares. */
#ifndef DP_STRATEGY_TYPE_H
#define DP_STRATEGY_TYPE_H

#include "dp/strategy.h"

/* A contiguous slice of the gradient buffer reduced by one request: of segments
 * [first_segment, last_segment] (whole ones, or, where buckets cut segments, parts of the two
 * at its ends), filled last segment first. */
typedef struct dp_bucket {
    size_t offset, count;
    size_t pending;       /* floats backward has yet to report final this micro-batch */
    int first_segment, last_segment;
    int started, completed; /* since its last start */
    dp_request *request;
    double started_at, done_at; /* MPI_Wtime; done_at: when the rank saw it complete */
    char label[32];
    dp_request_args args;  /* its collective as last started (the bucket hook sees it) */
} dp_bucket;

/* Slices of the flat buffers, in ascending offsets: whole segments, or blocks of their rows. */
typedef struct dp_strategy_units {
    dp_strategy_layout layout; /* the units, as segments of their own */
    size_t *offset, *count;
    int *segment;              /* unit -> the segment it is part of */
    int *first;                /* segment -> its first unit */
} dp_strategy_units;

struct dp_strategy {
    const struct dp_strategy_type *type;
    dp_comm *comm;
    dp_strategy_layout layout;
    dp_strategy_buffers buffers;
    dp_strategy_config config;
    dp_bucket *buckets;
    int nbuckets;
    int polled_from, polled_to; /* buckets [from, to) may be in flight: what poll looks at */
    int *bucket_of;        /* gradient unit (grads) -> its bucket */
    /* Stages 2 and 3 under a budget: the segments, those larger than block_floats cut in row
     * blocks (zero_units.c): of block_floats for stage 3's gathers, of the gradient pieces
     * backward reports for the buckets (which merge whole units up to the block). */
    dp_strategy_units gathers, grads;
    size_t block_floats;   /* SIZE_MAX: unlimited */
    size_t piece_floats;   /* backward's gradient pieces (dp_strategy_piece_floats), as the units were cut */
    int communicate;       /* this micro-batch's backward reduces */
    /* While a CUDA graph captures the step: the cudaStream_t the buckets' collectives join on
     * the device, never polled or waited for by the host (dp_strategy_join_on). NULL: the host's. */
    void *join_stream;
    dp_bucket_hook bucket_hook;
    dp_strategy_times times;
    dp_strategy_span_fn on_span;
    void *span_arg;
    void *state;           /* its type's own: ZeRO's shards and working buffers, --exact's
                            * accumulator, local SGD's averaging (NULL for DDP) */
};

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
    /* Why its collectives add in host memory, which --allreduce auto then keeps to on GPUs
     * (NULL: they add where the gradients are). */
    const char *sums_on_host;
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
    int (*after_update)(dp_strategy *d, const dp_update_done *done, dp_update_report *report);
    /* The tensors that make a replica, for a strategy that moves them (local SGD); NULL: kept
     * by nobody. Whether the ranks hold one model after steps_done steps (NULL: always). */
    int (*set_replica)(dp_strategy *d, const dp_replica_tensor *tensors, int count);
    int (*replicas_agree)(const dp_strategy *d, long steps_done);
    /* Whether its ranks' running statistics differ after a step (NULL: where plain BatchNorms
     * normalise per rank). */
    int (*per_rank_statistics)(int batchnorms, int sync_batchnorms);
    /* A row group's gradient is final (--exact adds a shard up); finish instead of the buckets'
     * wait; the banner's line. */
    int (*group_done)(dp_strategy *d, int last);
    int (*finish)(dp_strategy *d);
    int (*describe)(const dp_strategy *d, char *text, size_t size);
    /* The units its gathers and buckets take (NULL: a segment each, no budget): sets the
     * strategy's block_floats, piece_floats, gathers and grads. */
    int (*plan_units)(dp_strategy *d, int world);
    /* Hooks of its own beside the common ones (a budget's fetch and place), NULL: none. */
    void (*attach)(dp_strategy *d, dp_step_hooks *hooks);
    /* Collectives it reports per row group beyond the buckets' (stage 3's gathers). */
    size_t (*spans_per_group)(const dp_strategy *d);
    /* The step's shape (NULL: micro-batches, micro_batches.c): this rank's row groups, group
     * k, the most rows of a group, and what it refuses of the groups' sizes. */
    size_t (*groups)(const dp_strategy *d, dp_range step);
    void (*group)(const dp_strategy *d, dp_range step, size_t k, dp_row_group *group);
    size_t (*group_rows)(const dp_strategy_choice *c, size_t micro_batch, size_t step_batch, int world);
    int (*check_groups)(const dp_strategy_choice *c, const dp_strategy_run *run);
    /* Each rank steps with the mean gradient of its own rows (local SGD). */
    int scales_locally;
    /* Its bucket hook's start (PyTorch's comm hook: compression, averaging), NULL: the plain
     * collective; dp_strategy_set_bucket_hook replaces it. */
    int (*bucket_start)(void *arg, dp_comm *comm, const dp_request_args *args, dp_request **request);
    /* After the update found non-finite gradients: what the strategy knows of why, in text ("":
     * nothing to add); collective (every rank found them). NULL: nothing. */
    int (*explain_nonfinite)(dp_strategy *d, char *text, size_t size);
    /* Where it reduces no gradients, how they go instead (the banner's gradients line). */
    int (*describe_gradients)(const dp_strategy *d, char *text, size_t size);
    /* Backend memory of its own working buffers beyond the ZeRO table's (--exact's accumulator),
     * predicted for a run of that size, as the allocation counter will count them (NULL: none). */
    double (*working_bytes)(const dp_strategy_choice *c, const dp_strategy_sizes *s);
} dp_strategy_type;

/* The registry's i-th strategy (registry.c); NULL past the last. */
const dp_strategy_type *dp_strategy_at(int i);


#define MIB_FLOATS ((double)(1 << 20) / sizeof(float))

/* strategy.c: host memory a strategy keeps for itself (zeroed). On a backend whose memory is
 * host memory it is backend memory like any other, so it is counted and limited as working
 * buffers; beside a GPU it is page-locked host memory, outside the counter. */
void *dp_strategy_host_buffer(const dp_strategy *d, size_t bytes, const char *what);
void dp_strategy_free_host_buffer(const dp_strategy *d, void *p);

/* strategy.c: room for n units over `segments` segments (first, offset, count, segment). */
int dp_strategy_alloc_units(dp_strategy_units *u, int n, int segments);
/* The pieces backward reports its gradients in without a budget: the first bucket's size, so a
 * large layer's first collective starts early; the same under every strategy and with or
 * without overlap, so a GEMM is cut alike whatever the strategy (a blocked product may round
 * unlike the whole one: OpenBLAS's small-matrix kernels); 0 (whole modules) on one rank. */
size_t dp_strategy_ddp_piece(const dp_strategy *d, int world);
/* The buckets' line of the banner (and the progress thread); returns the characters written. */
int dp_strategy_describe_buckets(const dp_strategy *d, char *text, size_t size);

/* micro_batches.c: the default shape, this rank's slices of the step's micro-batches. */
size_t dp_strategy_micro_groups(const dp_strategy *d, dp_range step);
void dp_strategy_micro_group(const dp_strategy *d, dp_range step, size_t k, dp_row_group *group);
size_t dp_strategy_micro_rows(const dp_strategy_choice *c, size_t micro_batch, size_t step_batch, int world);
int dp_strategy_check_micro_rows(const dp_strategy_choice *c, const dp_strategy_run *run);

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
