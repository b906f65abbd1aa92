/* What a run used, for its summary: the bytes its training steps sent (each rank sends its own
 * shard's blocks, so the mean over ranks) and its backend memory at the peak, the largest over
 * the ranks (the allocation counter, src/backend/memory.c). */
#include "src/train/trainer.h"

#include <string.h>

int dp_trainer_usage(trainer *t, dp_train_result *result)
{
    dp_strategy_choice_text(&t->o->strategy, 1, result->strategy, sizeof result->strategy);
    result->world = t->comm->size;
    memcpy(result->sent, t->sent, sizeof result->sent);
    int status = dp_comm_sum_doubles(t->comm, result->sent, DP_COLLECTIVE_KINDS);
    for (int kind = 0; kind < DP_COLLECTIVE_KINDS; kind++)
        result->sent[kind] /= t->comm->size;
    result->memory = dp_memory_usage_now();
    if (!status)
        status = dp_comm_gather_hashes(t->comm, (uint64_t)result->memory.peak_total, t->host.rank_hashes);
    for (int r = 0; !status && r < t->comm->size; r++)
        if ((double)t->host.rank_hashes[r] > result->memory_peak) {
            result->memory_peak = (double)t->host.rank_hashes[r];
            result->memory_peak_rank = r;
        }
    return status;
}
