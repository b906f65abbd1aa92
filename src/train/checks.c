/* Safety checks that turn silent failure into a stopped job: non-finite gradients and
 * replicas that drifted apart. */
#include "src/train/trainer.h"

#include "dp/error.h"
#include "dp/hash.h"
#include "dp/partition.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The replica's model state: the parameters where every rank holds them whole, the running
 * statistics and their counters. */
static uint64_t hash_model(trainer *t)
{
    uint64_t hash = DP_HASH_START;
    for (int i = DP_STATE_PARAMETERS; i < DP_STATE_OPTIMIZER; i++) {
        dp_state_buffer b = dp_engine_state(t->engine, i);
        if (dp_state_is_sharded(&b))
            continue;
        dp_engine_download_held(t->engine, i, b.held, t->host.state[i]);
        hash = dp_hash_bytes(hash, t->host.state[i], b.floats * sizeof(float));
        if (b.counters)
            hash = dp_hash_bytes(hash, b.counters, b.tensors->totals[DP_DTYPE_I64] * sizeof *b.counters);
    }
    return hash;
}

/* "1, 3": the ranks whose value differs from expected. */
static size_t list_ranks(const trainer *t, const uint64_t *values, uint64_t expected, char *text, size_t size)
{
    size_t used = 0;
    text[0] = '\0';
    for (int r = 0; r < t->comm->size; r++)
        if (values[r] != expected && used < size)
            used += (size_t)snprintf(text + used, size - used, "%s%d", used ? ", " : "", r);
    return used;
}

/* Stage 3 holds no replica of the parameters: what every rank must agree on is what the
 * all-gathers deliver. Each rank gathers every module as forward does and hashes each owner's
 * part; those hashes must equal each owner's hash of its own shard. */
static int check_gathered(trainer *t, char *differing, size_t size)
{
    int world = t->comm->size, status = 0;
    uint64_t *gathered = dp_calloc(2 * (size_t)world, sizeof *gathered, "the gathered parameters' hashes");
    if (!gathered)
        return DP_ENOMEM;
    uint64_t *owners = gathered + world;
    dp_engine *e = t->engine;
    const dp_backend *be = dp_engine_backend(e);
    dp_range held = dp_engine_state(e, DP_STATE_PARAMETERS).held;
    float *params = t->host.state[DP_STATE_PARAMETERS];
    dp_engine_download_held(e, DP_STATE_PARAMETERS, held, params);
    uint64_t own = dp_hash_bytes(DP_HASH_START, params, dp_range_size(held) * sizeof(float));
    for (int r = 0; r < world; r++)
        gathered[r] = DP_HASH_START;
    const dp_strategy_layout *layout = dp_strategy_gathered_units(dp_engine_strategy(e));
    for (int s = 0; !status && s < layout->segments; s++) {
        float *data;
        if ((status = dp_strategy_gathered_parameters(dp_engine_strategy(e), s, &data)))
            break;
        be->download(be, t->host.gathered, data, layout->count[s] * sizeof(float));
        for (int r = 0; r < world; r++) { /* owner r's elements of this unit */
            dp_range mine = dp_partition(layout->total, world, r);
            size_t lo = mine.begin > layout->offset[s] ? mine.begin : layout->offset[s];
            size_t hi = mine.end < layout->offset[s] + layout->count[s] ? mine.end : layout->offset[s] + layout->count[s];
            if (lo < hi)
                gathered[r] = dp_hash_bytes(gathered[r], t->host.gathered + (lo - layout->offset[s]), (hi - lo) * sizeof(float));
        }
    }
    if (!status)
        status = dp_comm_gather_hashes(t->comm, own, owners);
    /* Every rank learns which ranks saw a difference, so all stop with the same message. */
    uint64_t mismatches = 0;
    for (int r = 0; !status && r < world; r++)
        mismatches += gathered[r] != owners[r];
    if (!status)
        status = dp_comm_gather_hashes(t->comm, mismatches, t->host.rank_hashes);
    if (!status)
        list_ranks(t, t->host.rank_hashes, 0, differing, size);
    free(gathered);
    return status;
}

/* Whether this rank holds only a shard of the parameters (ZeRO-3): no replica to hash, but what
 * the all-gathers deliver. */
static int params_sharded(const trainer *t)
{
    dp_state_buffer params = dp_engine_state(t->engine, DP_STATE_PARAMETERS);
    return dp_state_is_sharded(&params);
}

int dp_trainer_check_replicas(trainer *t)
{
    uint64_t *hashes_of = t->host.rank_hashes;
    int status = dp_comm_gather_hashes(t->comm, hash_model(t), hashes_of);
    if (status)
        return status;
    char differing[512];
    if (list_ranks(t, hashes_of, hashes_of[0], differing, sizeof differing))
        return dp_fail(DP_ENUMERIC, "replica check after step %ld: the model state of rank(s) %s differs "
                       "from rank 0's (hash %016llx): the replicas have diverged",
                       dp_engine_steps_done(t->engine), differing, (unsigned long long)hashes_of[0]);
    if (!params_sharded(t) || (status = check_gathered(t, differing, sizeof differing)) || !differing[0])
        return status;
    return dp_fail(DP_ENUMERIC, "replica check after step %ld (--zero 3): the parameters rank(s) %s gathered differ "
                   "from the shards their owners hold: an all-gather delivered different bytes",
                   dp_engine_steps_done(t->engine), differing);
}

/* Flips the lowest mantissa bit of a parameter on the chosen rank: invisible to the loss,
 * visible to a hash. Under --zero 3, whose ranks hold no replica, it is rank RANK's gathered
 * copy of the first module's parameters (as a faulty transfer would leave it); gathering is
 * collective, so every rank takes part. */
int dp_trainer_inject_corruption(trainer *t)
{
    if (t->o->corrupt_rank < 0 || dp_engine_steps_done(t->engine) != t->o->corrupt_step)
        return 0;
    float *target = dp_engine_state(t->engine, DP_STATE_PARAMETERS).data;
    int status = params_sharded(t) ? dp_strategy_gathered_parameters(dp_engine_strategy(t->engine), 0, &target) : 0;
    if (status || t->comm->rank != t->o->corrupt_rank)
        return status;
    const dp_backend *be = dp_engine_backend(t->engine);
    float value;
    uint32_t bits;
    be->download(be, &value, target, sizeof value);
    memcpy(&bits, &value, sizeof bits);
    bits ^= 1u;
    memcpy(&value, &bits, sizeof value);
    be->upload(be, target, &value, sizeof value);
    return 0;
}
