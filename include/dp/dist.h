/* Synchronisation strategies: how the ranks' gradients (and, for ZeRO, the optimizer state and
 * the parameters) are combined, behind one interface the step loop calls without knowing
 * which strategy runs: DDP (stage 0) and ZeRO stages 1, 2 and 3 (src/dist/zero.c). dist knows
 * the comm layer, the layout of the flat buffers (one slice per module with parameters) and
 * the backend's memory (ZeRO allocates its shards and working buffers there), nothing of
 * models: where collectives read the gradients and how they get there (GPU staging) comes
 * from the caller.
 *
 * One step:
 *     per micro-batch: forward, dp_dist_before_module(d, segment, 0, ...) before each module
 *     dp_dist_begin_micro(d, last)     DDP and stage 1 communicate in the last only (no_sync);
 *                                      stages 2 and 3 hold gradient shards, so every micro-batch
 *     ... backward: dp_dist_before_module(d, segment, 1, ...), then dp_dist_grad_ready(d,
 *         offset, count) as each piece of a module's gradients is final
 *     dp_dist_finish(d)                every collective done: this rank's gradients are summed
 *     ... the optimizer over dp_dist_update_memory(d) ...
 *     dp_dist_after_update(d)          ZeRO: the updated parameters back to every rank */
#ifndef DP_DIST_H
#define DP_DIST_H

#include "dp/backend.h"
#include "dp/comm.h"

#include <stddef.h>

/* The flat buffers as the model lays them out: one segment per module with parameters, in
 * forward order, each a contiguous slice [offset, offset + count). */
typedef struct dp_dist_layout {
    int segments;
    const size_t *offset, *count;
    size_t total;
} dp_dist_layout;

/* Where collectives find the gradients. When they cannot run on the gradient buffer itself
 * (GPU memory and an algorithm that adds on the CPU), comm_grads is a host copy: to_comm
 * copies a slice there before its collective, from_comm copies it back after. */
typedef struct dp_dist_buffers {
    float *comm_grads;
    void (*to_comm)(void *arg, size_t offset, size_t count);   /* NULL: comm_grads is the gradients */
    void (*from_comm)(void *arg, size_t offset, size_t count);
    void *arg;
    /* The backend's memory and the model's flat buffers where the stage keeps them whole: the
     * weights in stages 0-2, the gradients in 0-1 (dp_dist_model_owns); NULL otherwise. With
     * staged, collectives run on host copies (comm_grads: a host buffer of layout.total floats
     * for stages 0-2, whose strategy copies through it). */
    const dp_backend *be;
    float *weights, *grads;
    int staged;
} dp_dist_buffers;

/* --zero: 0 is DDP (everything replicated); 1 shards the optimizer state, 2 also the gradients,
 * 3 also the parameters. */
enum { DP_ZERO_STAGES = 4 };

typedef struct dp_dist_config {
    int overlap;          /* start each bucket's collective during backward (0: one after it) */
    double bucket_mb;     /* bucket size, as DDP's bucket_cap_mb (default 25) */
    double first_bucket_mb; /* the first bucket, small so communication starts early (DDP: 1) */
    long progress_us;     /* > 0: a progress thread every so many microseconds (comm.h) */
    int zero;             /* the stage, 0 .. DP_ZERO_STAGES - 1 */
} dp_dist_config;

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
} dp_bucket;

/* Where a step's time went, summed since the last dp_dist_take_times. */
typedef struct dp_dist_times {
    double exposed;   /* in collective calls instead of computing: dp_dist_finish's wait, and
                       * starting and progressing collectives from backward's hook */
    double in_backward; /* the part of exposed spent inside backward (the hook's calls) */
    double busy;      /* the collectives' own durations, start to seen complete */
    double hidden;    /* the part of busy the rank computed through, not spent in collective
                       * calls: busy - exposed, at least 0 (dp_dist_take_times) */
    double in_forward; /* the part of exposed spent inside forward (ZeRO-3's parameter gathers) */
    double in_update;  /* the part of exposed spent after the update (ZeRO's parameter all-gather) */
    long requests;
} dp_dist_times;

/* Called with each collective's span, for the timeline (may be NULL). */
typedef void (*dp_dist_span_fn)(void *arg, const char *label, double begin, double end);

struct dp_zero;

typedef struct dp_dist {
    const struct dp_strategy_type *type;
    int stage;             /* --zero */
    dp_comm *comm;
    dp_dist_layout layout;
    dp_dist_buffers buffers;
    dp_dist_config config;
    dp_bucket *buckets;
    int nbuckets;
    int polled_from, polled_to; /* buckets [from, to) may be in flight: what poll looks at */
    int *bucket_of;        /* segment -> its bucket */
    int communicate;       /* this micro-batch's backward reduces (the step's last) */
    dp_dist_times times;
    dp_dist_span_fn on_span;
    void *span_arg;
    struct dp_zero *zero;  /* stages 1-3: shards, working buffers (src/dist/zero.c); NULL under DDP */
} dp_dist;

/* The smallest --bucket-mb, in bytes: below it each bucket's collective costs its latency for
 * almost no data (and tens of thousands of buckets make a step wait on bookkeeping). */
#define DP_DIST_MIN_BUCKET_BYTES 1024

/* Which of the model's flat buffers stay whole under `stage`: bit 0 the weights (stages 0-2),
 * bit 1 the gradients (0-1), as nn's DP_MODEL_OWNS_WEIGHTS and DP_MODEL_OWNS_GRADS. */
unsigned dp_dist_model_owns(int stage);

/* The configuration for overlap (0: --no-overlap), buckets of at most bucket_mb after a first
 * one of at most 1 MiB (DDP's), ZeRO stage zero; no progress thread. bucket_mb 0 is auto: 25
 * (DDP's default), or an eighth of the gradients' total_floats when that is smaller, at least
 * 1: with DDP's 25 a model of a few MB makes one or two buckets and the last starts only when
 * backward ends (measured in bench/RESULTS.md, "Overlap"). */
dp_dist_config dp_dist_default_config(int overlap, double bucket_mb, int zero, size_t total_floats);

/* The bucket plan dp_dist_init would make of layout under config, without a run: how many
 * buckets and the largest (floats), for predictions (--memory-plan). */
int dp_dist_plan_sizes(const dp_dist_layout *layout, const dp_dist_config *config, int *buckets,
                       size_t *largest_bucket);

/* Plans buckets over layout and reserves the comm layer's requests for them; ZeRO stages
 * allocate their shards and working buffers (collective: every rank calls it with the same
 * arguments). */
int dp_dist_init(dp_dist *d, dp_comm *comm, const dp_dist_layout *layout, const dp_dist_buffers *buffers,
                 const dp_dist_config *config);
void dp_dist_free(dp_dist *d);

void dp_dist_begin_micro(dp_dist *d, int communicate);
/* Whether backward adds each micro-batch's gradients to the last one's (DDP, stage 1); stages
 * 2 and 3 add the reduced shards instead, so backward overwrites its working buffer. */
int dp_dist_backward_accumulates(const dp_dist *d);
/* Before segment's forward (backward 0) or backward (1): ZeRO-3 gathers its parameters
 * (prefetching the next segment's), ZeRO-2 and 3 give its gradients working memory. *weights
 * and *grads get where the module must read and write them (segment's slice), or NULL where
 * it keeps using the model's own buffers. */
int dp_dist_before_module(dp_dist *d, int segment, int backward, float **weights, float **grads);
/* Advances the collectives in flight (between modules of backward). */
int dp_dist_progress(dp_dist *d);
/* The largest piece backward should report final at a time (the model's grad_piece_floats):
 * the first bucket's size, so where buckets cut segments the first collective starts early in
 * a large layer's backward; the same in every stage and without overlap, so that the
 * gradients' arithmetic does not depend on them; 0 (whole modules) on one rank. */
size_t dp_dist_piece_floats(const dp_dist *d);
/* Backward reports [offset, offset + count) of the gradients final; a bucket starts once all
 * of it has been. */
int dp_dist_grad_ready(dp_dist *d, size_t offset, size_t count);
int dp_dist_finish(dp_dist *d);

/* The range of the flat buffers this rank's optimizer updates (all of it under DDP). */
void dp_dist_shard(const dp_dist *d, size_t *begin, size_t *end);
/* Where that range lives: element 0 of each is flat offset begin. */
void dp_dist_update_memory(const dp_dist *d, float **params, float **grads);
/* After the optimizer: stages 1 and 2 all-gather the updated shards so every replica is whole
 * again; stage 3 forgets its gathered parameters and prefetches the first module's. */
int dp_dist_after_update(dp_dist *d);

/* Flat tensors the strategy shards or replicates: the parameters (sharded in stage 3) and
 * the optimizer state (sharded in stages 1-3). data holds this rank's shard when sharded,
 * else the whole. */
int dp_dist_shards_params(const dp_dist *d);
int dp_dist_shards_state(const dp_dist *d);
/* The whole tensor into host memory on rank root (every rank when root < 0); other ranks'
 * host holds their part as staging (the whole when not sharded). Collective. */
int dp_dist_gather(dp_dist *d, const float *data, int sharded, float *host, int root);
/* The reverse: root's whole tensor in host (root < 0: every rank's) to every rank's data;
 * other ranks' host must hold the whole when not sharded (it is broadcast there). */
int dp_dist_scatter(dp_dist *d, float *host, float *data, int sharded, int root);
/* Stage 3: segment's parameters whole in working memory, as its forward would gather them
 * (collective: every rank asks for the same segments in the same order); *data points there
 * until the next pass or gather. The replica check hashes them against their owners'. */
int dp_dist_gathered_parameters(dp_dist *d, int segment, float **data);

/* What dp_zero_predict needs of this run's layout (this rank, its buckets and modules). */
struct dp_zero_plan_input;
void dp_dist_plan_input(const dp_dist *d, struct dp_zero_plan_input *in);

/* Returns the times since the last call and zeroes them. */
dp_dist_times dp_dist_take_times(dp_dist *d);

/* A line for the banner: the strategy, its buckets and how communication overlaps. */
void dp_dist_describe(const dp_dist *d, char *text, size_t size);

#endif
