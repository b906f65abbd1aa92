/* Inside dist: the ZeRO stages' state, shared by the step's flow (zero.c) and the moves of
 * whole tensors for checkpoints and checks (zero_state.c). */
#ifndef DP_STRATEGY_ZERO_H
#define DP_STRATEGY_ZERO_H

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

/* Working memory for one unit's gathered parameters (stage 3): a module's, or a block of its rows. */
typedef struct zero_gather_slot {
    float *base;          /* backend memory: the largest unit's slot (dp_zero_slot_floats) */
    float *data, *host;   /* where the unit it holds starts (base + its offset modulo the
                           * alignment); host: staged copy */
    int unit;             /* whose parameters it holds or is receiving; -1: none */
    dp_request *request;  /* its all-gather while in flight */
    double started_at;
    char label[40];
} zero_gather_slot;

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
    int micro;                       /* micro-batches of this step already reduced into the shard */
    int backward;                    /* the pass now running: where prefetches go */
};

/* The most floats a unit holds under config's budget (SIZE_MAX: unlimited, or not a stage
 * that shards gradients). */
size_t dp_strategy_block_floats(const dp_strategy_type *type, const dp_strategy_config *config, size_t total,
                                int world);
/* The units of l (u's arrays NULL: only counted): segments larger than `block` floats cut in
 * blocks of piece / row rows from their end, their tail a unit of its own; returns how many. A
 * segment that cannot be cut so fails naming it and the budget it needs. */
int dp_strategy_plan_units(const dp_strategy_layout *l, const dp_strategy_type *type, const dp_strategy_config *config,
                           size_t block, size_t piece, dp_strategy_units *u);

/* The part of [offset, offset + count) inside range, as flat offsets (empty: begin == end). */
dp_range dp_zero_overlap(dp_range range, size_t offset, size_t count);

/* Slots in use for d's config: gradient buckets (only one bucket: one slot), gathers. */
int dp_zero_grad_slots(const dp_strategy *d);
int dp_zero_gather_slots(const dp_strategy *d);

/* Under a budget (dp_step_hooks' fetch and place, arg the strategy): a cut module's parameter
 * unit gathered (the next prefetched), and where a gradient piece is written. */
int dp_zero_fetch(void *arg, size_t offset, size_t count, const float **data);
int dp_zero_place(void *arg, size_t offset, size_t count, float **data);

/* Stage 3: unit's parameters whole in a gather slot (gathered now unless held or in flight);
 * returns the slot. */
int dp_zero_gathered(dp_strategy *d, int unit, zero_gather_slot **slot);

#endif
