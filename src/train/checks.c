/* Safety checks that turn silent failure into a stopped job: non-finite gradients and
 * replicas that drifted apart. */
#include "src/train/trainer.h"

#include "dp/error.h"
#include "dp/hash.h"
#include "dp/partition.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first tensor holding a NaN or an infinity in values (the summed gradient, or the
 * updated parameters), in the part this rank holds (its shard under ZeRO: the ranks then agree
 * on the lowest); NULL when none does. */
static int first_nonfinite_tensor(trainer *t, const float *values, const char **name)
{
    const dp_param_table *params = &t->model.params;
    size_t begin, end;
    dp_dist_shard(&t->dist, &begin, &end);
    uint64_t first = (uint64_t)params->count;
    for (int i = 0; i < params->count && first == (uint64_t)params->count; i++) {
        const dp_param *p = &params->entries[i];
        size_t lo = p->offset > begin ? p->offset : begin, hi = p->offset + p->count < end ? p->offset + p->count : end;
        if (lo < hi && t->be->count_nonfinite(values + (lo - begin), hi - lo))
            first = (uint64_t)i;
    }
    int status = 0;
    if (dp_dist_shards_state(&t->dist)) {
        status = dp_comm_gather_hashes(t->comm, first, t->rank_hashes);
        for (int r = 0; !status && r < t->comm->size; r++)
            first = t->rank_hashes[r] < first ? t->rank_hashes[r] : first;
    }
    *name = first < (uint64_t)params->count ? params->entries[first].name : NULL;
    return status;
}

/* Reads and clears the optimizer pass's non-finite count: summed over the ranks where each
 * holds a shard of the gradient, so every rank decides alike. */
static int take_nonfinite(trainer *t, double *bad)
{
    static const double zero = 0.0;
    *bad = 0.0;
    t->be->download(bad, t->nonfinite, sizeof *bad);
    if (*bad != 0.0)
        t->be->upload(t->nonfinite, &zero, sizeof zero);
    return dp_dist_shards_state(&t->dist) ? dp_comm_sum_doubles(t->comm, bad, 1) : 0;
}

/* The gradients were finite and the update made parameters non-finite (it overflowed float32).
 * The optimizer state moved with them, so the step cannot be skipped: the job stops. */
static int parameters_overflowed(trainer *t, const float *params, double bad)
{
    const char *first;
    int status = first_nonfinite_tensor(t, params, &first);
    return status ? status : dp_fail(DP_ENUMERIC, "step %ld: the update made %.0f parameter values non-finite, the "
                                     "first in %s, from finite gradients: it overflows float32 (--lr %g). Stopping",
                                     t->steps_done + 1, bad, first ? first : "(none found)", (double)t->o->lr);
}

int dp_trainer_update(trainer *t, float grad_scale, float lr)
{
    float *params, *grads;
    dp_dist_update_memory(&t->dist, &params, &grads);
    int skip = t->o->skip_nonfinite;
    /* --on-nan abort updates in the same pass (a bad step ends the job anyway); skip counts first.
     * The pass counts non-finite gradients and, when it updates, non-finite results. */
    dp_optimizer_step(&t->opt, params, grads, grad_scale, lr, !skip, t->nonfinite);
    double bad;
    int status = take_nonfinite(t, &bad);
    if (!status && bad == 0.0 && skip) {
        dp_optimizer_step(&t->opt, params, grads, 1.0f, lr, 1, t->nonfinite);
        status = take_nonfinite(t, &bad);
        return status || bad == 0.0 ? status : parameters_overflowed(t, params, bad);
    }
    if (status || bad == 0.0)
        return status;
    const char *first;
    if ((status = first_nonfinite_tensor(t, grads, &first)))
        return status;
    if (!first)
        return parameters_overflowed(t, params, bad);
    if (!skip)
        return dp_fail(DP_ENUMERIC, "step %ld: %.0f non-finite gradient values, the first in %s. Stopping "
                       "(--on-nan abort; --on-nan skip would drop such steps)", t->steps_done + 1, bad, first);
    t->skipped_steps++;
    if (t->comm->rank == 0)
        fprintf(stderr, "dp_worker: warning: step %ld: %.0f non-finite gradient values, the first in %s; "
                        "update skipped (--on-nan skip, %ld skipped so far)\n",
                t->steps_done + 1, bad, first, t->skipped_steps);
    return 0;
}


/* The replica's state: the parameters where every rank holds them whole, running statistics
 * and counters. */
static uint64_t hash_model(trainer *t)
{
    const dp_model *m = &t->model;
    size_t param_bytes = t->plan.nparams * sizeof(float), buffer_bytes = dp_params_floats(&m->buffers) * sizeof(float);
    uint64_t hash = DP_HASH_START;
    if (!dp_dist_shards_params(&t->dist)) {
        t->be->download(t->host_params, m->weights, param_bytes);
        hash = dp_hash_bytes(hash, t->host_params, param_bytes);
    }
    t->be->download(t->host_buffers, m->buffer_values, buffer_bytes);
    hash = dp_hash_bytes(hash, t->host_buffers, buffer_bytes);
    return dp_hash_bytes(hash, m->counters, m->buffers.totals[DP_DTYPE_I64] * sizeof *m->counters);
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
    size_t begin, end;
    float *shard, *grads;
    dp_dist_shard(&t->dist, &begin, &end);
    dp_dist_update_memory(&t->dist, &shard, &grads);
    t->be->download(t->host_params, shard, (end - begin) * sizeof(float));
    uint64_t own = dp_hash_bytes(DP_HASH_START, t->host_params, (end - begin) * sizeof(float));
    for (int r = 0; r < world; r++)
        gathered[r] = DP_HASH_START;
    const dp_dist_layout *layout = &t->dist.layout;
    for (int s = 0; !status && s < layout->segments; s++) {
        float *data;
        if ((status = dp_dist_gathered_parameters(&t->dist, s, &data)))
            break;
        t->be->download(t->host_gathered, data, layout->count[s] * sizeof(float));
        for (int r = 0; r < world; r++) { /* owner r's elements of this module */
            dp_range mine = dp_partition(layout->total, world, r);
            size_t lo = mine.begin > layout->offset[s] ? mine.begin : layout->offset[s];
            size_t hi = mine.end < layout->offset[s] + layout->count[s] ? mine.end : layout->offset[s] + layout->count[s];
            if (lo < hi)
                gathered[r] = dp_hash_bytes(gathered[r], t->host_gathered + (lo - layout->offset[s]), (hi - lo) * sizeof(float));
        }
    }
    if (!status)
        status = dp_comm_gather_hashes(t->comm, own, owners);
    /* Every rank learns which ranks saw a difference, so all stop with the same message. */
    uint64_t mismatches = 0;
    for (int r = 0; !status && r < world; r++)
        mismatches += gathered[r] != owners[r];
    if (!status)
        status = dp_comm_gather_hashes(t->comm, mismatches, t->rank_hashes);
    if (!status)
        list_ranks(t, t->rank_hashes, 0, differing, size);
    free(gathered);
    return status;
}

int dp_trainer_check_replicas(trainer *t)
{
    uint64_t *hashes_of = t->rank_hashes;
    int status = dp_comm_gather_hashes(t->comm, hash_model(t), hashes_of);
    if (status)
        return status;
    char differing[512];
    if (list_ranks(t, hashes_of, hashes_of[0], differing, sizeof differing))
        return dp_fail(DP_ENUMERIC, "replica check after step %ld: the model state of rank(s) %s differs "
                       "from rank 0's (hash %016llx): the replicas have diverged",
                       t->steps_done, differing, (unsigned long long)hashes_of[0]);
    if (!dp_dist_shards_params(&t->dist) || (status = check_gathered(t, differing, sizeof differing)) || !differing[0])
        return status;
    return dp_fail(DP_ENUMERIC, "replica check after step %ld (--zero 3): the parameters rank(s) %s gathered differ "
                   "from the shards their owners hold: an all-gather delivered different bytes",
                   t->steps_done, differing);
}

/* Flips the lowest mantissa bit of a parameter on the chosen rank: invisible to the loss,
 * visible to a hash. Under --zero 3, whose ranks hold no replica, it is rank RANK's gathered
 * copy of the first module's parameters (as a faulty transfer would leave it); gathering is
 * collective, so every rank takes part. */
int dp_trainer_inject_corruption(trainer *t)
{
    if (t->o->corrupt_rank < 0 || t->steps_done != t->o->corrupt_step)
        return 0;
    float *target = t->model.weights;
    int status = dp_dist_shards_params(&t->dist) ? dp_dist_gathered_parameters(&t->dist, 0, &target) : 0;
    if (status || t->comm->rank != t->o->corrupt_rank)
        return status;
    float value;
    uint32_t bits;
    t->be->download(&value, target, sizeof value);
    memcpy(&bits, &value, sizeof bits);
    bits ^= 1u;
    memcpy(&value, &bits, sizeof value);
    t->be->upload(target, &value, sizeof value);
    return 0;
}
