/* Binding a node's ranks to GPUs by identity rather than by count: when the launcher gives
 * each rank its own GPU (srun --gpus-per-task=1, a CUDA_VISIBLE_DEVICES wrapper), every rank
 * sees "GPU 0" yet the GPUs differ; when every rank sees all the node's GPUs, rank r takes GPU
 * r. Both are one bipartite matching of ranks to the distinct UUIDs they can reach. */
#include "dp/backend.h"

#include "dp/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Lists at most this many ranks in the binding text. */
#define LISTED_RANKS 8

typedef struct matching {
    const int *counts;
    int ranks;
    int *gpu_of;    /* [rank * DP_MAX_VISIBLE_GPUS + i]: distinct-GPU number of that visible GPU */
    int *owner;     /* [distinct GPU]: the rank holding it, or -1 */
    int *choice;    /* [rank]: the visible index it holds */
    char *seen;     /* [distinct GPU]: visited in this augmenting search */
} matching;

/* Numbers the distinct UUIDs in the table; returns how many. */
static int number_gpus(const dp_gpu_id *visible, const int *counts, int ranks, int *gpu_of)
{
    int distinct = 0;
    for (int r = 0; r < ranks; r++)
        for (int i = 0; i < counts[r]; i++) {
            const dp_gpu_id *id = &visible[r * DP_MAX_VISIBLE_GPUS + i];
            int found = -1;
            for (int q = 0; q <= r && found < 0; q++)
                for (int j = 0; j < (q == r ? i : counts[q]) && found < 0; j++)
                    if (memcmp(visible[q * DP_MAX_VISIBLE_GPUS + j].uuid, id->uuid, sizeof id->uuid) == 0)
                        found = gpu_of[q * DP_MAX_VISIBLE_GPUS + j];
            gpu_of[r * DP_MAX_VISIBLE_GPUS + i] = found >= 0 ? found : distinct++;
        }
    return distinct;
}

/* Kuhn's augmenting path: gives rank r a GPU, moving earlier ranks when that frees one. Each
 * rank tries its visible GPUs from local rank % count on, so equal lists give rank r GPU r. */
static int augment(matching *m, int r)
{
    for (int k = 0; k < m->counts[r]; k++) {
        int i = (r + k) % m->counts[r], g = m->gpu_of[r * DP_MAX_VISIBLE_GPUS + i];
        if (m->seen[g])
            continue;
        m->seen[g] = 1;
        if (m->owner[g] < 0 || augment(m, m->owner[g])) {
            m->owner[g] = r;
            m->choice[r] = i;
            return 1;
        }
    }
    return 0;
}

static void describe(const dp_gpu_id *visible, const int *counts, int ranks, const int *choice,
                     int own, int distinct, dp_gpu_binding *out)
{
    size_t used;
    if (own)
        used = (size_t)snprintf(out->text, sizeof out->text, "this node's %d rank%s on %d distinct GPU%s (", ranks,
                                ranks == 1 ? "" : "s", ranks, ranks == 1 ? "" : "s");
    else
        used = (size_t)snprintf(out->text, sizeof out->text, "this node's %d ranks can reach only %d distinct GPU%s, "
                                "so ranks would share one (", ranks, distinct, distinct == 1 ? "" : "s");
    for (int r = 0; r < ranks && r < LISTED_RANKS && used < sizeof out->text; r++) {
        if (counts[r] == 0) {
            used += (size_t)snprintf(out->text + used, sizeof out->text - used, "%slocal rank %d: no GPU",
                                     r ? ", " : "", r);
            continue;
        }
        const unsigned char *u = visible[r * DP_MAX_VISIBLE_GPUS + choice[r]].uuid;
        used += (size_t)snprintf(out->text + used, sizeof out->text - used, "%slocal rank %d: GPU-%02x%02x%02x%02x",
                                 r ? ", " : "", r, u[0], u[1], u[2], u[3]);
    }
    if (used < sizeof out->text)
        snprintf(out->text + used, sizeof out->text - used, "%s)", ranks > LISTED_RANKS ? ", ..." : "");
}

int dp_backend_plan_binding(const dp_gpu_id *visible, const int *counts, int ranks, int me,
                            dp_gpu_binding *out)
{
    size_t slots = (size_t)ranks * DP_MAX_VISIBLE_GPUS;
    matching m = {.counts = counts, .ranks = ranks};
    m.gpu_of = dp_calloc(slots, sizeof *m.gpu_of, "the GPU binding table");
    m.owner = dp_calloc(slots, sizeof *m.owner, "the GPU binding table");
    m.choice = dp_calloc((size_t)ranks, sizeof *m.choice, "the GPU binding table");
    m.seen = dp_calloc(slots, 1, "the GPU binding table");
    if (!m.gpu_of || !m.owner || !m.choice || !m.seen) {
        free(m.gpu_of);
        free(m.owner);
        free(m.choice);
        free(m.seen);
        return DP_ENOMEM;
    }
    int distinct = number_gpus(visible, counts, ranks, m.gpu_of);
    for (int g = 0; g < distinct; g++)
        m.owner[g] = -1;
    int own = 1;
    for (int r = 0; r < ranks; r++) {
        memset(m.seen, 0, (size_t)distinct);
        own &= augment(&m, r);
    }
    /* Without a GPU for everyone, each rank takes turns on local rank % its count. */
    if (!own)
        for (int r = 0; r < ranks; r++)
            m.choice[r] = counts[r] ? r % counts[r] : 0;
    out->gpu = m.choice[me];
    out->own_gpu = own;
    out->gpus_visible = counts[me];
    describe(visible, counts, ranks, m.choice, own, distinct, out);
    free(m.gpu_of);
    free(m.owner);
    free(m.choice);
    free(m.seen);
    return 0;
}
