/* Safety checks that turn silent failure into a stopped job: non-finite gradients and
 * replicas that drifted apart. */
#include "src/train/trainer.h"

#include "dp/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int first_nonfinite_layer(const trainer *t)
{
    for (int i = 0; i < t->model.nlayers; i++) {
        size_t end = i + 1 < t->model.nlayers ? t->model.offsets[i + 1] : t->plan.nparams;
        if (t->be->count_nonfinite(t->model.grads + t->model.offsets[i], end - t->model.offsets[i]))
            return i;
    }
    return -1;
}

int dp_trainer_check_gradient(trainer *t, double local_loss, int *finite)
{
    size_t bad = t->be->count_nonfinite(t->model.grads, t->plan.nparams);
    *finite = bad == 0;
    if (*finite)
        return 0;
    int layer = first_nonfinite_layer(t);
    if (!t->o->skip_nonfinite)
        return dp_fail(DP_ENUMERIC, "step %ld: %zu non-finite gradient values, the first in layer %d "
                       "(layers.%d); loss on this rank's samples %g. Stopping (--on-nan abort; "
                       "--on-nan skip would drop such steps)",
                       t->steps_done + 1, bad, layer, layer, local_loss);
    t->skipped_steps++;
    if (t->comm->rank == 0)
        fprintf(stderr, "dp_worker: warning: step %ld: %zu non-finite gradient values, the first in "
                        "layer %d; update skipped (--on-nan skip, %ld skipped so far)\n",
                t->steps_done + 1, bad, layer, t->skipped_steps);
    return 0;
}

/* FNV-1a over the parameter bytes: any flipped bit changes it. */
static uint64_t hash_bytes(const void *data, size_t bytes)
{
    const unsigned char *p = data;
    uint64_t hash = 1469598103934665603ULL;
    for (size_t i = 0; i < bytes; i++)
        hash = (hash ^ p[i]) * 1099511628211ULL;
    return hash;
}

int dp_trainer_check_replicas(trainer *t)
{
    size_t bytes = t->plan.nparams * sizeof(float);
    t->be->download(t->host_params, t->model.params, bytes);
    uint64_t *hashes_of = t->rank_hashes;
    int status = dp_comm_gather_hashes(t->comm, hash_bytes(t->host_params, bytes), hashes_of);
    if (status)
        return status;
    char differing[512] = "";
    size_t used = 0;
    for (int r = 1; r < t->comm->size; r++)
        if (hashes_of[r] != hashes_of[0] && used < sizeof differing)
            used += (size_t)snprintf(differing + used, sizeof differing - used, "%s%d", used ? ", " : "", r);
    if (!used)
        return 0;
    return dp_fail(DP_ENUMERIC, "replica check after step %ld: the parameters of rank(s) %s differ "
                   "from rank 0's (hash %016llx): the replicas have diverged",
                   t->steps_done, differing, (unsigned long long)hashes_of[0]);
}

void dp_trainer_inject_corruption(trainer *t)
{
    if (t->comm->rank != t->o->corrupt_rank || t->steps_done != t->o->corrupt_step)
        return;
    float value;
    uint32_t bits;
    t->be->download(&value, t->model.params, sizeof value);
    memcpy(&bits, &value, sizeof bits);
    bits ^= 1u; /* the lowest mantissa bit: invisible to the loss, visible to a hash */
    memcpy(&value, &bits, sizeof value);
    t->be->upload(t->model.params, &value, sizeof value);
}
