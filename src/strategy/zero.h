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
    float *data;   /* backend memory: the largest bucket */
    float *host;   /* its host copy when collectives need host memory (staged) */
    int bucket;    /* the bucket it holds; -1: free */
} zero_grad_slot;

/* Working memory for one module's gathered parameters (stage 3). */
typedef struct zero_gather_slot {
    float *data, *host;   /* the largest module's parameters; host: staged copy */
    int segment;          /* whose parameters it holds or is receiving; -1: none */
    dp_request *request;  /* its all-gather while in flight */
    double started_at;
    char label[40];
} zero_gather_slot;

struct dp_zero {
    dp_range shard;                  /* this rank's part of the flat buffers */
    size_t bucket_floats, segment_floats; /* the largest bucket and module */
    float *param_shard;              /* stage 3: this rank's parameters */
    float *grad_shard;               /* stages 2 and 3: this rank's summed gradients */
    zero_grad_slot grads[ZERO_GRAD_SLOTS];
    int grad_slots;                  /* in use: 2 with overlap, else 1 */
    int *slot_of;                    /* bucket -> its grad slot, or -1 */
    zero_gather_slot gathers[ZERO_GATHER_SLOTS];
    int gather_slots;                /* in use: 2 with overlap (prefetch), else 1 */
    int micro;                       /* micro-batches of this step already reduced into the shard */
};

/* The part of [offset, offset + count) inside range, as flat offsets (empty: begin == end). */
dp_range dp_zero_overlap(dp_range range, size_t offset, size_t count);

/* Slots in use for d's config: gradient buckets (only one bucket: one slot), gathers. */
int dp_zero_grad_slots(const dp_strategy *d);
int dp_zero_gather_slots(const dp_strategy *d);

/* Stage 3: segment's parameters whole in a gather slot (gathered now unless held or in
 * flight); returns the slot. */
int dp_zero_gathered(dp_strategy *d, int segment, zero_gather_slot **slot);

#endif
