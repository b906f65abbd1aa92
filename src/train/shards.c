/* --checkpoint-shards: training state too large to gather on one rank. Each rank writes
 * DIR/step-N.rank-R-of-W.safetensors holding its part R of dp_partition(total, W, R) of the
 * flat parameters ("parameters") and of each optimizer state (under their checkpoint names),
 * with the run's settings, the shard's range and the file's CRC; rank 0's index
 * (step-N.safetensors, state.c) follows once every shard is complete. Resuming, each rank
 * reads the parts of the shard files it needs, whatever its stage and world size. */
#include "src/train/trainer.h"

#include "dp/checkpoint.h"
#include "dp/error.h"
#include "dp/partition.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SHARD_BEGIN, SHARD_END, SHARD_TOTAL, SHARD_KEYS };
static const char *const shard_keys[SHARD_KEYS] = {"shard_begin", "shard_end", "flat_total"};

/* The engine's flat state buffers a shard file holds: the parameters, then each optimizer state
 * (the statistics go whole in the index). */
static int flat_buffers(const trainer *t, int *which)
{
    int count = 0;
    for (int i = 0; i < dp_engine_state_count(t->engine); i++)
        if (i != DP_STATE_STATISTICS)
            which[count++] = i;
    return count;
}

/* The flat tensors of a shard of n floats over data[0], data[1], ... (in flat_buffers' order),
 * named as the engine names its buffers; returns their count. */
static int shard_tensors(const trainer *t, size_t n, float *const *data, dp_tensor_ref *refs)
{
    int which[DP_STATE_OPTIMIZER + DP_OPTIMIZER_MAX_STATE], count = flat_buffers(t, which);
    for (int i = 0; i < count; i++) {
        refs[i] = (dp_tensor_ref){.ndim = 1, .shape = {(int64_t)n}, .data = data[i]};
        snprintf(refs[i].name, sizeof refs[i].name, "%s", dp_engine_state(t->engine, which[i]).name);
    }
    return count;
}

/* The host copies of the flat buffers, in flat_buffers' order. */
static int host_copies(trainer *t, float **host)
{
    int which[DP_STATE_OPTIMIZER + DP_OPTIMIZER_MAX_STATE], count = flat_buffers(t, which);
    for (int i = 0; i < count; i++)
        host[i] = t->host.state[which[i]];
    return count;
}

int dp_trainer_write_shard(trainer *t, const char *const *keys, const char *const *values, int count)
{
    dp_range part = dp_partition(t->plan.nparams, t->comm->size, t->comm->rank);
    float *host[DP_STATE_OPTIMIZER + DP_OPTIMIZER_MAX_STATE];
    int which[DP_STATE_OPTIMIZER + DP_OPTIMIZER_MAX_STATE], count_flat = flat_buffers(t, which);
    host_copies(t, host);
    for (int i = 0; i < count_flat; i++) /* each copy holds at least the rank's part */
        dp_engine_download_held(t->engine, which[i], part, host[i]);
    dp_tensor_ref refs[DP_STATE_OPTIMIZER + DP_OPTIMIZER_MAX_STATE];
    int tensors = shard_tensors(t, dp_range_size(part), host, refs);
    const char **all_keys = dp_calloc(2 * ((size_t)count + SHARD_KEYS), sizeof *all_keys, "shard metadata");
    if (!all_keys)
        return DP_ENOMEM;
    const char **all_values = all_keys + count + SHARD_KEYS;
    char numbers[SHARD_KEYS][32];
    size_t range[SHARD_KEYS] = {[SHARD_BEGIN] = part.begin, [SHARD_END] = part.end, [SHARD_TOTAL] = t->plan.nparams};
    memcpy(all_keys, keys, (size_t)count * sizeof *keys);
    memcpy(all_values, values, (size_t)count * sizeof *values);
    for (int k = 0; k < SHARD_KEYS; k++) {
        snprintf(numbers[k], sizeof numbers[k], "%zu", range[k]);
        all_keys[count + k] = shard_keys[k];
        all_values[count + k] = numbers[k];
    }
    int status = dp_checkpoint_save_shard(t->o->checkpoint_dir, dp_engine_steps_done(t->engine), t->comm->rank, t->comm->size, refs,
                                          tensors, all_keys, all_values, count + SHARD_KEYS);
    free(all_keys);
    /* Every rank learns whether all shards are complete: only then does rank 0 write the index. */
    double failed = status != 0;
    int agreed = dp_comm_sum_doubles(t->comm, &failed, 1);
    if (status || agreed)
        return status ? status : agreed;
    return failed == 0.0 ? 0 : dp_fail(DP_EIO, "checkpoint of step %ld: %.0f rank(s) could not write their shard "
                                       "(their messages say why); no index written, the previous checkpoint stays "
                                       "the newest", dp_engine_steps_done(t->engine), failed);
}

/* Reads shard file `path` (rank r's part `part` of the flat tensors) into scratch, checking it
 * belongs to the index: the same step and run, the range its name implies. */
static int read_shard(trainer *t, const char *path, long step, dp_range part, float *const *scratch)
{
    dp_tensor_ref refs[DP_STATE_OPTIMIZER + DP_OPTIMIZER_MAX_STATE];
    int count = shard_tensors(t, dp_range_size(part), scratch, refs);
    dp_meta meta[SHARD_KEYS + 2] = {{.key = "step"}, {.key = "run_id"}};
    for (int k = 0; k < SHARD_KEYS; k++)
        snprintf(meta[2 + k].key, sizeof meta[2 + k].key, "%s", shard_keys[k]);
    int status = dp_checkpoint_load(path, refs, count, meta, SHARD_KEYS + 2);
    if (status)
        return dp_fail_context(status, "--resume: a shard of the sharded checkpoint");
    char expected[SHARD_KEYS][32];
    snprintf(expected[SHARD_BEGIN], 32, "%zu", part.begin);
    snprintf(expected[SHARD_END], 32, "%zu", part.end);
    snprintf(expected[SHARD_TOTAL], 32, "%zu", t->plan.nparams);
    if (!status && (strtol(meta[0].value, NULL, 10) != step || strcmp(meta[1].value, t->run_id) != 0))
        status = dp_fail(DP_EFORMAT, "--resume: %s belongs to step %s of run %s, not to the index's step %ld of run %s",
                         path, meta[0].value, meta[1].value, step, t->run_id);
    for (int k = 0; !status && k < SHARD_KEYS; k++)
        if (strcmp(meta[2 + k].value, expected[k]) != 0)
            status = dp_fail(DP_EFORMAT, "--resume: %s has %s=%s where its name implies %s", path, shard_keys[k],
                             meta[2 + k].value, expected[k]);
    return status ? status : dp_train_check_loaded("--resume", path, refs, count);
}

/* The part of `from` (a shard in scratch) that falls in `into` (what this rank holds, in host). */
static void copy_overlap(dp_range from, const float *scratch, dp_range into, float *host)
{
    size_t lo = from.begin > into.begin ? from.begin : into.begin, hi = from.end < into.end ? from.end : into.end;
    if (lo < hi)
        memcpy(host + (lo - into.begin), scratch + (lo - from.begin), (hi - lo) * sizeof(float));
}

int dp_trainer_read_shards(trainer *t, const char *index_path, long step, int shards)
{
    size_t total = t->plan.nparams;
    int which[DP_STATE_OPTIMIZER + DP_OPTIMIZER_MAX_STATE], tensors = flat_buffers(t, which);
    dp_range need[DP_STATE_OPTIMIZER + DP_OPTIMIZER_MAX_STATE]; /* what this rank holds of each */
    float *host[DP_STATE_OPTIMIZER + DP_OPTIMIZER_MAX_STATE];
    host_copies(t, host);
    for (int i = 0; i < tensors; i++)
        need[i] = dp_engine_state(t->engine, which[i]).held;
    size_t largest = dp_range_size(dp_partition(total, shards, 0));
    float *scratch_block = dp_alloc((largest ? largest : 1) * (size_t)tensors * sizeof(float), "a shard's host copy");
    if (!scratch_block)
        return DP_ENOMEM;
    float *scratch[DP_STATE_OPTIMIZER + DP_OPTIMIZER_MAX_STATE];
    for (int i = 0; i < tensors; i++)
        scratch[i] = scratch_block + (size_t)i * largest;
    int status = 0;
    for (int r = 0; !status && r < shards; r++) {
        dp_range part = dp_partition(total, shards, r);
        int wanted = 0;
        for (int i = 0; i < tensors; i++)
            wanted |= part.begin < need[i].end && need[i].begin < part.end;
        char path[DP_PATH_MAX + 128];
        if (!wanted || (status = dp_checkpoint_shard_path(index_path, r, shards, path, sizeof path)) ||
            (status = read_shard(t, path, step, part, scratch)))
            continue;
        for (int i = 0; i < tensors; i++)
            copy_overlap(part, scratch[i], need[i], host[i]);
    }
    free(scratch_block);
    for (int i = 0; !status && i < tensors; i++)
        dp_engine_upload_held(t->engine, which[i], host[i]);
    return status;
}
