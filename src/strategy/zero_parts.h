/* Inside strategy/: the ZeRO stages' state, shared by the step's flow (zero.c) and the moves of
 * whole tensors for checkpoints and checks (zero_state.c). */
#ifndef DP_STRATEGY_ZERO_PARTS_H
#define DP_STRATEGY_ZERO_PARTS_H

#include "dp/partition.h"
#include "src/strategy/strategy_type.h"

/* With overlap: buckets in flight at once in stages 2 and 3 (one filling while the last one
 * reduces), and modules gathered at once in stage 3 (the one computing and the next,
 * prefetched). Without (--no-overlap), one of each: the least memory. */
enum { ZERO_GRAD_SLOTS = 2, ZERO_GATHER_SLOTS = 2 };

/* Working memory for one bucket's gradients: backward writes them, its reduce-scatter runs
 * on them, this rank's part is then added into the gradient shard. */
typedef struct zero_grad_slot {
    float *base;   /* backend memory: the largest bucket's slot (dp_zero_slot_floats) */
    float *data;   /* where the bucket it holds starts: base + its offset modulo the alignment */
    float *host;   /* its host copy when collectives need host memory (staged) */
    int bucket;    /* the bucket it holds; -1: free */
} zero_grad_slot;

/* Working memory for one unit's gathered parameters (stage 3): a module's, a block of its rows,
 * or a block of its weight's columns. */
typedef struct zero_gather_slot {
    float *base;          /* backend memory: the largest unit's slot (dp_zero_slot_floats) */
    float *data, *host;   /* where the unit it holds starts (base + its offset modulo the
                           * alignment; a column block at base); host: staged copy */
    int unit;             /* whose parameters it holds or is receiving; -1: none */
    size_t part;          /* a column block gathered padded: each rank's block's floats; 0: in place */
    dp_request *request;  /* its all-gather while in flight */
    double started_at;
    char label[40];
} zero_gather_slot;

/* Stage 3 under a budget: the weights cut in rows, as backward's input gradient (a Linear's dX,
 * a Conv2d's dcol) reads them, in blocks of whole columns (zero_columns.c). Column units are
 * numbered after d->gathers' units. Each rank packs its shard's part of a block (flat order);
 * laid end to end the parts are the block's rows in order. On up to 2 ranks they are
 * all-gathered there, in place; on more, in equal blocks of `part` floats (the largest rank's
 * part), past the packed block in its slot, and then laid out. */
typedef struct zero_columns {
    int units;
    int *first;      /* segment -> its first column unit; -1: not cut */
    size_t *per;     /* segment -> columns per block; 0: a column does not fit a slot */
    int *segment;    /* column unit -> its segment */
    size_t *column;  /* column unit -> its first column */
    size_t *parts;   /* per rank: its part of the block being laid out */
} zero_columns;

struct dp_zero {
    dp_range shard;                  /* this rank's part of the flat buffers */
    size_t bucket_floats, unit_floats; /* the largest bucket and unit */
    float *param_shard;              /* stage 3: this rank's parameters */
    float *grad_shard;               /* stages 2 and 3: this rank's summed gradients */
    zero_grad_slot grads[ZERO_GRAD_SLOTS];
    int grad_slots;                  /* in use: 2 with overlap, else 1 */
    int *slot_of;                    /* bucket -> its grad slot, or -1 */
    zero_gather_slot gathers[ZERO_GATHER_SLOTS];
    int gather_slots;                /* in use: 2 with overlap (prefetch), else 1 */
    zero_columns columns;            /* stage 3 under a budget */
    int micro;                       /* micro-batches of this step already reduced into the shard */
    int backward;                    /* the pass now running: where prefetches go */
};

/* The ZeRO stages' state of d (its type's private state). */
static inline struct dp_zero *zero_of(const dp_strategy *d)
{
    return d->state;
}

/* The least --zero-live-mb, to the 6 decimals messages print it with, rounded up so that giving
 * it yields blocks of at least `floats` over `slots` working buffers. */
double dp_zero_least_mb(size_t floats, int slots);

/* Working buffers of one block each under config's budget: gradient slots, stage 3's gathers. */
int dp_zero_block_slots(const dp_strategy_type *type, const dp_strategy_config *config);
/* The most floats a unit holds under config's budget (SIZE_MAX: unlimited, or not a stage
 * that shards gradients). */
size_t dp_strategy_block_floats(const dp_strategy_type *type, const dp_strategy_config *config, size_t total,
                                int world);
/* The units of l (u's arrays NULL: only counted): segments larger than `block` floats cut in
 * blocks of piece / row rows from their end, their tail a unit of its own; returns how many. A
 * segment that cannot be cut so fails naming it and the budget it needs. */
int dp_strategy_plan_units(const dp_strategy_layout *l, const dp_strategy_type *type, const dp_strategy_config *config,
                           size_t block, size_t piece, dp_strategy_units *u);

/* The type's plan_units: the budget's block, backward's pieces, and the units of stage 3's
 * gathers (blocks of the budget) and of the gradients (backward's pieces, which the buckets
 * merge); segments larger than the block cut in blocks of rows. */
int dp_zero_plan_units(dp_strategy *d, int world);

/* Whether segment's parameters exceed a block of the budget (cut in units). */
int dp_zero_segment_is_cut(const dp_strategy *d, int segment);

/* The part of [offset, offset + count) inside range, as flat offsets (empty: begin == end). */
dp_range dp_zero_overlap(dp_range range, size_t offset, size_t count);

/* Slots in use for d's config: gradient buckets (only one bucket: one slot), gathers. */
int dp_zero_grad_slots(const dp_strategy *d);
int dp_zero_gather_slots(const dp_strategy *d);

/* Under a budget (dp_step_hooks' fetch and place, arg the strategy): a cut module's parameter
 * unit gathered (the next prefetched), and where a gradient piece is written. */
int dp_zero_fetch(void *arg, size_t offset, size_t count, const float **data);
int dp_zero_place(void *arg, size_t offset, size_t count, float **data);
/* Stage 3 under a budget (dp_step_hooks' fetch_columns): a cut weight's block of columns from
 * `first` gathered packed (the next block prefetched), *end its last column + 1. */
int dp_zero_fetch_columns(void *arg, size_t offset, size_t first, size_t *end, const float **data);

/* Column units (zero_columns.c): planned for d's cut segments for slots of slot_floats, and freed. */
int dp_zero_plan_columns(const dp_strategy *d, size_t slot_floats, zero_columns *c);
void dp_zero_free_columns(zero_columns *c);
/* The slot floats one column of segment s's weight needs: its rows, and where parts travel
 * padded, every rank's (at most the most rows a rank's shard touches). */
size_t dp_zero_column_need(const dp_strategy *d, int s);
/* Column unit k's floats (all rows). */
size_t dp_zero_column_floats(const dp_strategy *d, int k);
/* How column unit k's all-gather lays out the parts: args' count (and parent on 2 ranks) set,
 * *mine where this rank's part goes; returns 0 (in place: the buffer is the packed block) or
 * the floats of each rank's padded block (the parts then laid out by dp_zero_lay_out_columns). */
size_t dp_zero_column_layout(const dp_strategy *d, int k, dp_request_args *args, size_t *mine);
/* This rank's part of column unit k copied from its parameter shard to `into` (host memory
 * where host, else backend memory). */
void dp_zero_pack_columns(const dp_strategy *d, int k, float *into, int host);
/* The parts received at `from` (rank r's at r * part; host memory where host) laid end to end
 * at `into`: the block's rows in order. */
void dp_zero_lay_out_columns(const dp_strategy *d, int k, const float *from, size_t part, float *into, int host);

/* Stage 3: unit's parameters whole in a gather slot (gathered now unless held or in flight);
 * returns the slot. */
int dp_zero_gathered(dp_strategy *d, int unit, zero_gather_slot **slot);

/* The unit of u holding flat offset `offset` (units lie in ascending offsets; zero_units.c). */
int dp_zero_unit_at(const dp_strategy_units *u, size_t offset);
/* A wait for a gather or a slot inside a module's pass counted as communication, as in the
 * before hook (zero_gather.c). */
void dp_zero_count_wait(dp_strategy *d, double entered);

/* Stage 3 (zero_gather.c): unit's parameters whole in a slot, and the next unit the pass reads
 * prefetched into the other (forward goes up, backward down); after the update, the gathered
 * parameters forgotten (stale) and the next forward's first module fetched. */
int dp_zero_gather_with_prefetch(dp_strategy *d, int unit, int backward, zero_gather_slot **slot);
int dp_zero_forget_gathered(dp_strategy *d);

#endif
