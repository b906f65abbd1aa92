/* Synchronisation strategies: how the ranks' gradients (and, for ZeRO, the optimizer state and
 * the parameters) are combined. A strategy is chosen by name from a table (dp_strategy_find:
 * "ddp", "zero-1", "zero-2", "zero-3", "exact") and attaches its own hooks to the engine's step
 * (dp_strategy_attach); the engine calls them without knowing which strategy runs:
 *
 *     per micro-batch, per module i in order:      hooks.before(i, forward)
 *                      per module i reversed:      hooks.before(i, backward); backward(i);
 *                                                  hooks.grad_ready(piece) for each final piece
 *     hooks.finish()        every collective done: this rank's gradients are summed
 *     ... the optimizer over dp_strategy_update_memory ...
 *     hooks.after_update()  ZeRO: the updated parameters back to every rank
 *
 * A strategy knows the comm layer, the layout of the flat buffers (one slice per module with
 * parameters) and the backend's memory (ZeRO allocates its shards and working buffers there),
 * nothing of models: where collectives read the gradients and how they get there (GPU staging)
 * comes from the caller. Each bucket's collective goes through a bucket hook (PyTorch's DDP
 * comm hook), where compression or averaging can plug in. */
#ifndef DP_STRATEGY_H
#define DP_STRATEGY_H

#include "dp/backend.h"
#include "dp/comm.h"

#include <stddef.h>
#include <stdio.h>

/* The flat buffers as the model lays them out: one segment per module with parameters, in
 * forward order, each a contiguous slice [offset, offset + count). A segment that starts with
 * rows[s] rows of row[s] floats (a Linear's weight; its bias the tail after them) may be cut in
 * blocks of whole rows where a ZeRO budget is smaller than it; row NULL or row[s] 0: never cut. */
typedef struct dp_strategy_layout {
    int segments;
    const size_t *offset, *count;
    const size_t *row, *rows;
    size_t total;
} dp_strategy_layout;

/* Where collectives find the gradients. When they cannot run on the gradient buffer itself
 * (GPU memory and an algorithm that adds on the CPU), comm_grads is a host copy: to_comm
 * copies a slice there before its collective, from_comm copies it back after. */
typedef struct dp_strategy_buffers {
    float *comm_grads;
    void (*to_comm)(void *arg, size_t offset, size_t count);   /* NULL: comm_grads is the gradients */
    void (*from_comm)(void *arg, size_t offset, size_t count);
    void *arg;
    /* The backend's memory and the model's flat buffers where the stage keeps them whole: the
     * weights in stages 0-2, the gradients in 0-1 (dp_strategy_model_owns); NULL otherwise. With
     * staged, collectives run on host copies (comm_grads: a host buffer of layout.total floats
     * for stages 0-2, whose strategy copies through it). */
    const dp_backend *be;
    float *weights, *grads;
    int staged;
} dp_strategy_buffers;

/* The stages of ZeRO's paper (0 is DDP), as --zero numbers them and version 3's checkpoints record. */
enum { DP_ZERO_STAGES = 4 };

/* A strategy as the command line chose it: --strategy NAME[:KEY=VALUE,...] (zero-3:live-mb=64,
 * exact:rows=32, local-sgd:every=8), or version 3's options that name one (--zero, --exact,
 * --average-every and their keys' options). Each strategy declares its keys in its own table
 * (name, default, range, whether they change the bits); the choice holds their values. */
#define DP_STRATEGY_NAME_MAX 32
#define DP_STRATEGY_KEYS_MAX 4
typedef struct dp_strategy_choice {
    char name[DP_STRATEGY_NAME_MAX];    /* a strategy of the registry */
    double value[DP_STRATEGY_KEYS_MAX]; /* its keys, in its table's order: given, else their defaults */
    char label[128];                    /* how the run named it, for messages: "--strategy zero-3", "--zero 3" */
} dp_strategy_choice;

/* DDP with no keys: what a run without a strategy option trains with. */
void dp_strategy_choice_default(dp_strategy_choice *c);
/* c from text NAME[:KEY=VALUE,...]; label names where the text came from in messages (the
 * option). An unknown name or key, or a value out of its key's range, fails naming them. */
int dp_strategy_choose(dp_strategy_choice *c, const char *text, const char *label);
/* Sets key KEY of c's strategy from text; label names the option in messages. A key c's
 * strategy does not take fails saying which strategies take it. */
int dp_strategy_set_key(dp_strategy_choice *c, const char *key, const char *text, const char *label);
/* The value of key `key` of c's strategy; NAN when it takes no such key. */
double dp_strategy_key_value(const dp_strategy_choice *c, const char *key);
/* What a checkpoint records as the world size and algorithm where c's strategy's bits depend
 * on neither ("any (--exact)"); NULL where they do. */
const char *dp_strategy_any_world(const dp_strategy_choice *c);
/* A version-3 checkpoint's fields zero, average_every and exact_shard as the strategy text a
 * checkpoint now records (dp_strategy_choice_text with the keys that change the bits). */
int dp_strategy_from_version_3(const char *zero, const char *average_every, const char *exact_shard, char *text,
                               size_t size);
/* Whether a step of c's strategy can be captured as a CUDA graph (its collectives all in the
 * buckets, joined on the device); where not, why gets the reason. */
int dp_strategy_capturable(const dp_strategy_choice *c, char *why, size_t size);
/* Why the strategy's collectives add in host memory (--exact's digits), or NULL. */
const char *dp_strategy_sums_on_host(const dp_strategy_choice *c);
/* The ZeRO stage whose memory c's strategy holds per rank (0: whole replicas, as DDP). */
int dp_strategy_memory_stage(const dp_strategy_choice *c);
/* Every key of to's strategy that from's strategy takes too gets from's value. */
void dp_strategy_take_keys(dp_strategy_choice *to, const dp_strategy_choice *from);
/* c as text, NAME:KEY=VALUE,... with every key (all != 0) or only those that change the bits
 * (a checkpoint's strategy field: exact:rows=32, local-sgd:every=4, zero-3). */
void dp_strategy_choice_text(const dp_strategy_choice *c, int all, char *text, size_t size);
/* A group of a step's rows this rank computes together (forward, loss, backward), as the
 * strategy shapes the step: DDP's micro-batches (this rank's slice of each), or --exact's fixed
 * shards. The engine runs the groups in order and asks nothing else of the strategy's kind. */
typedef struct dp_row_group {
    dp_range rows;        /* positions in the epoch's order */
    int communicates;     /* its backward reduces the gradients (DDP: the step's last micro-batch only) */
    int accumulate;       /* backward adds into the gradients already there (not the first micro-batch) */
    int alone;            /* computed alone whatever W: BatchNorm over its rows only, no SyncBatchNorm sums */
    int moves_running;    /* its BatchNorm moves the running statistics */
    int last;             /* this rank's last group of the step */
    /* Its loss total rounded before it joins the step's (--exact: onto the grid on which sums
     * are exact, so the reported loss is the same for every W); NULL: added as it is. */
    double (*round_total)(double total);
    /* The timeline's span for the strategy's work on its gradient (group_done), and its category. */
    const char *done_span, *done_category;
} dp_row_group;

/* The sizes a strategy's own working memory follows (dp_strategy_working_bytes). */
typedef struct dp_strategy_sizes {
    size_t params;        /* trainable parameters */
    size_t buffer_floats; /* the model's float32 buffers (running statistics) */
    int state_tensors;    /* the optimizer's state tensors, each one of the parameters' size */
    int world;
    int on_device;        /* backend memory is a GPU's, not host memory */
} dp_strategy_sizes;

/* Backend memory of c's own working buffers beyond the ZeRO table's (--exact's accumulator and
 * digits, local SGD's copies on a host backend), predicted per rank; 0 where it keeps none. */
double dp_strategy_working_bytes(const dp_strategy_choice *c, const dp_strategy_sizes *s);

/* What a strategy is asked to accept of a run (dp_strategy_check): the options around it, and
 * once the data is known (step_batch > 0) the steps' sizes. */
typedef struct dp_strategy_run {
    dp_dtype grad_dtype;           /* --grad-dtype */
    int sync_batchnorms, batchnorms; /* the model's SyncBatchNorm and BatchNorm modules */
    int statistic_values;          /* the least values a BatchNorm feature gets per row (H x W) */
    long checkpoint_every, check_replicas; /* 0: none */
    size_t micro_batch;            /* --batch: global samples per micro-batch */
    int world;                     /* ranks */
    size_t step_batch;             /* global samples per optimizer step; 0: not known yet */
    size_t last_step;              /* the epoch's last step's samples (shorter where it is cut) */
    int drop_last;                 /* --drop-last (which the advice names) */
    const char *model;             /* the model's text, for messages */
} dp_strategy_run;
/* The run c's strategy would make, refused naming the options where the strategy cannot honour
 * it (its table's constraints: what it sums, what BatchNorm needs under it, ...). */
int dp_strategy_check(const dp_strategy_choice *c, const dp_strategy_run *run);
/* The most rows one row group of c's strategy holds on a rank, for steps of step_batch rows in
 * micro-batches of micro_batch over world ranks (the model's buffers are sized by it). */
size_t dp_strategy_group_rows(const dp_strategy_choice *c, size_t micro_batch, size_t step_batch, int world);
/* BLAS threads per rank c's strategy needs where --threads is not given (0: the cores the rank
 * has); *why gets the reason for the banner. */
int dp_strategy_default_threads(const dp_strategy_choice *c, const char **why);
/* --help's lines for the strategies and their keys, one per line. */
void dp_strategy_print_help(FILE *out);

typedef struct dp_strategy_config {
    dp_strategy_choice choice; /* which strategy, and its keys */
    int overlap;          /* start each bucket's collective during backward (0: one after it) */
    double bucket_mb;     /* bucket size, as DDP's bucket_cap_mb (default 25) */
    double first_bucket_mb; /* the first bucket, small so communication starts early (DDP: 1) */
    long progress_us;     /* > 0: a progress thread every so many microseconds (comm.h) */
    size_t micro_batch;   /* global rows of a micro-batch (--batch): the default shape's groups */
} dp_strategy_config;

/* --zero-live-mb's default: this share of a rank's sharded state (parameters, gradients and
 * AdamW's two moments, 16 bytes per parameter over the ranks), at least DP_ZERO_LIVE_MIN_MB. */
#define DP_ZERO_LIVE_SHARE 0.125
#define DP_ZERO_LIVE_MIN_MB 1.0

/* config's live-mb key (ZeRO 2-3: the most gathered parameters and gradient blocks held at once;
 * 0: unlimited, whole modules; < 0: auto, DP_ZERO_LIVE_SHARE of the sharded state), auto
 * resolved for total parameters over world ranks (MiB; 0: unlimited or no such key). */
double dp_strategy_live_mb(const dp_strategy_config *config, size_t total, int world);


/* How one bucket's gradients are combined once backward has finished them (PyTorch's DDP
 * comm hook): start begins a request over args (the strategy's collective on the bucket's
 * memory) and hands it back for the strategy to progress and wait; done, when not NULL, runs
 * on the result after it completed. The default (start NULL) starts args as given; a hook may
 * compress, average or replace the collective, as long as every rank starts the same ones. */
typedef struct dp_bucket_hook {
    int (*start)(void *arg, dp_comm *comm, const dp_request_args *args, dp_request **request);
    int (*done)(void *arg, const dp_request_args *args);
    void *arg;
} dp_bucket_hook;

/* Where a step's time went, summed since the last dp_strategy_take_times. */
typedef struct dp_strategy_times {
    double exposed;   /* in collective calls instead of computing: finish's wait, and
                       * starting and progressing collectives from backward's hooks */
    double in_backward; /* the part of exposed spent inside backward (the hooks' calls) */
    double busy;      /* the collectives' own durations, start to seen complete */
    double hidden;    /* the part of busy the rank computed through, not spent in collective
                       * calls: busy - exposed, at least 0 (dp_strategy_take_times) */
    double in_forward; /* the part of exposed spent inside forward (ZeRO-3's parameter gathers) */
    double in_update;  /* the part of exposed spent after the update (ZeRO's parameter all-gather) */
    long requests;
} dp_strategy_times;

/* Called with each collective's span, for the timeline (may be NULL). */
typedef void (*dp_strategy_span_fn)(void *arg, const char *label, double begin, double end);

/* The pass a module is about to run, as the engine tells the strategy's before hook. */
typedef struct dp_pass {
    int module;           /* the module's index in the model */
    int segment;          /* its slice of the flat buffers in the layout; -1: no parameters */
    int backward;         /* 0: forward, 1: backward */
    int first;            /* the pass's first module (forward: module 0; backward: the last) */
    int communicates;     /* this micro-batch's gradients are reduced (DDP: the step's last) */
} dp_pass;

/* The update just taken, as after_update is told: optimizer steps taken (this one included)
 * and in the run, and this rank's rows in the step. */
typedef struct dp_update_done {
    long steps_done, total_steps;
    double rows;
} dp_update_done;

/* What after_update did beyond its usual work: an averaging of the replicas (local SGD), and
 * their divergence before it, the largest over ranks r of ||p_r - mean|| / ||mean||. */
typedef struct dp_update_report {
    int averaged;
    double divergence;
} dp_update_report;

/* What the engine calls during a step; each returns 0 or a negative code after dp_fail. A
 * strategy fills them (dp_strategy_attach); an observer may wrap them. */
typedef struct dp_step_hooks {
    /* Before a module's pass: ZeRO-3 gathers its parameters, ZeRO-2 and 3 give backward its
     * gradient memory, DDP advances the collectives in flight. *weights and *grads get where
     * the module must read and write (its slice), or NULL where it keeps the model's own. */
    int (*before)(void *arg, const dp_pass *pass, float **weights, float **grads);
    /* [offset, offset + count) of the flat gradient is final: a bucket may start. */
    int (*grad_ready)(void *arg, size_t offset, size_t count);
    /* After the last micro-batch's backward: every collective done. */
    int (*finish)(void *arg);
    /* After the optimizer: ZeRO's parameters whole again (stages 1, 2) or forgotten (3), local
     * SGD's averaging when due. */
    int (*after_update)(void *arg, const dp_update_done *done, dp_update_report *report);
    /* After each row group's backward: its gradient is final (--exact adds a group's, written
     * alone, into its sum); last: the rank's last group of the step. */
    int (*group_done)(void *arg, int last);
    /* Under a ZeRO budget (NULL otherwise): where a module larger than the budget's block reads
     * the parameter piece [offset, offset + count) or a block of a weight's columns (stage 3),
     * and where backward writes a gradient piece (stages 2 and 3): the nn layer's
     * dp_param_pieces and dp_grad_pieces. */
    int (*fetch)(void *arg, size_t offset, size_t count, const float **data);
    int (*fetch_columns)(void *arg, size_t offset, size_t first, size_t *end, const float **data);
    int (*place)(void *arg, size_t offset, size_t count, float **data);
    void *arg;
} dp_step_hooks;

/* A strategy at work (strategy_type.h has its fields): its buckets, its type's private state. */
typedef struct dp_strategy dp_strategy;


/* The smallest --bucket-mb, in bytes: below it each bucket's collective costs its latency for
 * almost no data (and tens of thousands of buckets make a step wait on bookkeeping). */
#define DP_STRATEGY_MIN_BUCKET_BYTES 1024

/* The strategy called name ("ddp", "zero-1", "zero-2", "zero-3", "local-sgd", "exact"); NULL when there is none. */
const struct dp_strategy_type *dp_strategy_find(const char *name);
/* The names, for messages and --help: "ddp, zero-1, zero-2, zero-3, exact". */
const char *dp_strategy_names(void);
/* The name of --zero's stage: "ddp" for 0, "zero-N" else. */
const char *dp_strategy_name_for_zero(int stage);

/* Which of the model's flat buffers stay whole under the named strategy: bit 0 the weights,
 * bit 1 the gradients, as nn's DP_MODEL_OWNS_WEIGHTS and DP_MODEL_OWNS_GRADS (a known name). */
unsigned dp_strategy_model_owns(const dp_strategy_choice *choice);

/* The configuration for the chosen strategy: overlap (0: --no-overlap), buckets of at most
 * bucket_mb after a first one of at most 1 MiB (DDP's); no progress thread. bucket_mb 0 is
 * auto: 25 (DDP's default), or an eighth of the gradients' total_floats when that is smaller,
 * at least 1: with DDP's 25 a model of a few MB makes one or two buckets and the last starts
 * only when backward ends (measured in bench/RESULTS.md, "Overlap"). */
dp_strategy_config dp_strategy_default_config(const dp_strategy_choice *choice, int overlap, double bucket_mb,
                                              size_t total_floats);

/* The bucket plan dp_strategy_init would make of layout under config over `world` ranks,
 * without a run: how many buckets, the largest (floats), and the largest unit a ZeRO stage
 * gathers, for predictions (--memory-plan). */
int dp_strategy_plan_sizes(const dp_strategy_layout *layout, const dp_strategy_config *config, int world,
                           int *buckets, size_t *largest_bucket, size_t *largest_unit);

/* *out: the chosen strategy over layout, its buckets planned and the comm layer's requests
 * reserved for them, its own state opened (ZeRO's shards and working buffers, --exact's
 * accumulator); collective: every rank calls it with the same arguments. On failure *out may
 * hold what was opened: close it. */
int dp_strategy_open(dp_strategy **out, dp_comm *comm, const dp_strategy_layout *layout,
                     const dp_strategy_buffers *buffers, const dp_strategy_config *config);
/* Frees d (NULL: nothing). */
void dp_strategy_close(dp_strategy *d);

/* The step `step` (positions in the epoch's order) as this rank's row groups: how many, and
 * group k. */
size_t dp_strategy_groups(const dp_strategy *d, dp_range step);
void dp_strategy_group(const dp_strategy *d, dp_range step, size_t k, dp_row_group *group);
/* What the update multiplies the summed gradient by: 1 / the step's rows, or (local SGD) 1 /
 * this rank's rows of it. */
float dp_strategy_grad_scale(const dp_strategy *d, dp_range step);

/* The strategy's hooks for the engine's step. */
void dp_strategy_attach(dp_strategy *d, dp_step_hooks *hooks);

/* The most collectives d reports (on_span) in a step of `groups` row groups: the
 * timeline's room for them. */
size_t dp_strategy_spans_per_step(const dp_strategy *d, size_t groups);

/* on_span gets every collective's span from now on (the timeline); NULL: none. */
void dp_strategy_observe_spans(dp_strategy *d, dp_strategy_span_fn on_span, void *arg);

/* Replaces the default bucket hook (see dp_bucket_hook); before the first step. */
void dp_strategy_set_bucket_hook(dp_strategy *d, const dp_bucket_hook *hook);

/* stream (a cudaStream_t): the steps that follow start their buckets' collectives to be joined
 * to it on the device (dp_request_join: the comm's algorithm must join, nccl), and the host
 * neither polls nor waits for them, as a CUDA graph's capture needs. NULL: the host's again. */
void dp_strategy_join_on(dp_strategy *d, void *stream);

/* The largest piece backward should report final at a time: the first bucket's size, so where
 * buckets cut segments the first collective starts early in a large layer's backward; the
 * same in every stage and without overlap, so that the gradients' arithmetic does not depend
 * on them; 0 (whole modules) on one rank. */
size_t dp_strategy_piece_floats(const dp_strategy *d);

/* Under a ZeRO budget, the most floats a gathered unit or gradient bucket holds: modules larger
 * are gathered in blocks of rows of at most this many floats; 0: no budget (whole modules). */
size_t dp_strategy_block(const dp_strategy *d);

/* The range of the flat buffers this rank's optimizer updates (all of it under DDP). */
void dp_strategy_shard(const dp_strategy *d, size_t *begin, size_t *end);
/* Where that range lives: element 0 of each is flat offset begin. */
void dp_strategy_update_memory(const dp_strategy *d, float **params, float **grads);

/* The whole tensor into host memory on rank root (every rank when root < 0); other ranks'
 * host holds their part as staging (the whole when not sharded). Collective. */
int dp_strategy_gather(dp_strategy *d, const float *data, int sharded, float *host, int root);
/* The window [window.begin, window.end) of a sharded flat tensor (shard: this rank's part in
 * backend memory) into host on rank root, which holds the window alone; elsewhere host is a
 * host copy of the rank's shard, its staging. Collective: a streamed --save gathers piece by
 * piece. */
int dp_strategy_gather_window(dp_strategy *d, const float *shard, dp_range window, float *host, int root);
/* The reverse: root's whole tensor in host (root < 0: every rank's) to every rank's data;
 * other ranks' host must hold the whole when not sharded (it is broadcast there). */
int dp_strategy_scatter(dp_strategy *d, float *host, float *data, int sharded, int root);
/* Stage 3: unit's parameters (d->gathers: a module's, or a block of its rows under a budget)
 * whole in working memory, as its forward would gather them (collective: every rank asks for
 * the same units in the same order); *data points there until the next pass or gather. The
 * replica check hashes them against their owners'. */
int dp_strategy_gathered_parameters(dp_strategy *d, int unit, float **data);

/* What dp_zero_predict needs of this run's layout (this rank, its buckets and modules). */
struct dp_zero_plan_input;
void dp_strategy_plan_input(const dp_strategy *d, struct dp_zero_plan_input *in);

/* A flat tensor of backend memory that makes a replica. */
typedef struct dp_replica_tensor {
    float *data;
    size_t count;
} dp_replica_tensor;

/* The tensors that make a replica, the parameters first, then the optimizer state and the
 * running statistics: for a strategy that moves them itself (local SGD averages them in its
 * after_update, reserving room for it here); others keep nothing. Before the first step;
 * collective (every rank names tensors of the same sizes). */
int dp_strategy_set_replica(dp_strategy *d, const dp_replica_tensor *tensors, int count);

/* Whether the ranks' BatchNorm running statistics differ after a step, so rank 0's must be
 * given to all (DDP's broadcast_buffers): where plain BatchNorms normalise per rank, or (--exact)
 * every BatchNorm moves them from the step's first row group alone; never under local SGD, which
 * averages them. */
int dp_strategy_per_rank_statistics(const dp_strategy *d, int batchnorms, int sync_batchnorms);

/* Whether every rank holds the same model after steps_done steps: always, but between local
 * SGD's averagings (checkpoints and replica checks wait for one). */
int dp_strategy_replicas_agree(const dp_strategy *d, long steps_done);

/* Returns the times since the last call and zeroes them. */
dp_strategy_times dp_strategy_take_times(dp_strategy *d);

/* After the update found non-finite gradients on every rank: what the strategy knows of why
 * (--exact: finite values beyond its sums' range), text "" where nothing. Collective. */
int dp_strategy_explain_nonfinite(dp_strategy *d, char *text, size_t size);
/* How many buckets the gradients are reduced in. */
int dp_strategy_bucket_count(const dp_strategy *d);
/* The collective a bucket's gradients go through, for the banner ("all-reduce", "reduce-scatter"). */
const char *dp_strategy_collective(const dp_strategy *d);
/* Where a strategy that reduces no gradients says so in text (1); 0: it reduces them. */
int dp_strategy_describe_gradients(const dp_strategy *d, char *text, size_t size);
/* Stage 3's units of gathered parameters (for the replica check); NULL for other strategies. */
const dp_strategy_layout *dp_strategy_gathered_units(const dp_strategy *d);

/* A line for the banner: the strategy, its buckets and how communication overlaps. */
void dp_strategy_describe(const dp_strategy *d, char *text, size_t size);

#endif
