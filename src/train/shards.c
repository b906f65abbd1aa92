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

#define PARAMETERS_NAME "parameters"
enum { SHARD_BEGIN, SHARD_END, SHARD_TOTAL, SHARD_KEYS };
static const char *const shard_keys[SHARD_KEYS] = {"shard_begin", "shard_end", "flat_total"};

/* The flat tensors of a shard of n floats: the parameters, then each optimizer state, over
 * data[0], data[1], ...; returns their count. */
static int shard_tensors(const trainer *t, size_t n, float *const *data, dp_tensor_ref *refs)
{
    int count = 1 + dp_optimizer_state_count(&t->engine.opt);
    for (int i = 0; i < count; i++) {
        refs[i] = (dp_tensor_ref){.ndim = 1, .shape = {(int64_t)n}, .data = data[i]};
        snprintf(refs[i].name, sizeof refs[i].name, "%s", i ? dp_optimizer_state_name(&t->engine.opt, i - 1) : PARAMETERS_NAME);
    }
    return count;
}

/* This rank's part [begin, end) of the parameters and the optimizer state into the host
 * copies (each holds at least the rank's shard). */
static void download_part(trainer *t, dp_range part, float *const *host)
{
    float *params, *grads;
    dp_strategy_update_memory(t->engine.strategy, &params, &grads);
    size_t bytes = dp_range_size(part) * sizeof(float);
    /* Sharded memory holds exactly the part; whole memory holds it at its offset. */
    const float *source = dp_strategy_shards_params(t->engine.strategy) ? params : t->engine.model.weights + part.begin;
    t->engine.be->download(t->engine.be, host[0], source, bytes);
    for (int i = 0; i < dp_optimizer_state_count(&t->engine.opt); i++) {
        source = dp_strategy_shards_state(t->engine.strategy) ? t->engine.opt.state[i] : t->engine.opt.state[i] + part.begin;
        t->engine.be->download(t->engine.be, host[1 + i], source, bytes);
    }
}

int dp_trainer_write_shard(trainer *t, const char *const *keys, const char *const *values, int count)
{
    dp_range part = dp_partition(t->plan.nparams, t->comm->size, t->comm->rank);
    float *host[1 + DP_OPTIMIZER_MAX_STATE] = {t->host.params, t->host.optimizer[0], t->host.optimizer[1]};
    download_part(t, part, host);
    dp_tensor_ref refs[1 + DP_OPTIMIZER_MAX_STATE];
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
    int status = dp_checkpoint_save_shard(t->o->checkpoint_dir, t->engine.steps_done, t->comm->rank, t->comm->size, refs,
                                          tensors, all_keys, all_values, count + SHARD_KEYS);
    free(all_keys);
    /* Every rank learns whether all shards are complete: only then does rank 0 write the index. */
    double failed = status != 0;
    int agreed = dp_comm_sum_doubles(t->comm, &failed, 1);
    if (status || agreed)
        return status ? status : agreed;
    return failed == 0.0 ? 0 : dp_fail(DP_EIO, "checkpoint of step %ld: %.0f rank(s) could not write their shard "
                                       "(their messages say why); no index written, the previous checkpoint stays "
                                       "the newest", t->engine.steps_done, failed);
}

/* The shard file of rank r among `shards` beside index_path, named after the index
 * (step-2.safetensors: step-2.rank-R-of-W.safetensors), so files renamed together (unpadded)
 * still resume. The step is checked against each shard's metadata. */
static int shard_path(const char *index_path, int r, int shards, char *path, size_t size)
{
    static const char suffix[] = ".safetensors";
    size_t len = strlen(index_path), stem = len >= sizeof suffix - 1 ? len - (sizeof suffix - 1) : len;
    if (snprintf(path, size, "%.*s.rank-%d-of-%d%s", (int)stem, index_path, r, shards, suffix) >= (int)size)
        return dp_fail(DP_EINVAL, "--resume %s: shard path too long", index_path);
    return 0;
}

/* Reads shard file `path` (rank r's part `part` of the flat tensors) into scratch, checking it
 * belongs to the index: the same step and run, the range its name implies. */
static int read_shard(trainer *t, const char *path, long step, dp_range part, float *const *scratch)
{
    dp_tensor_ref refs[1 + DP_OPTIMIZER_MAX_STATE];
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

int dp_trainer_read_shards(trainer *t, const char *index_path, long step, int shards, float *params)
{
    size_t total = t->plan.nparams;
    dp_range mine = dp_partition(total, t->comm->size, t->comm->rank), all = {0, total};
    dp_range need_params = dp_strategy_shards_params(t->engine.strategy) ? mine : all;
    dp_range need_state = dp_strategy_shards_state(t->engine.strategy) ? mine : all;
    int tensors = 1 + dp_optimizer_state_count(&t->engine.opt);
    size_t largest = dp_range_size(dp_partition(total, shards, 0));
    float *scratch_block = dp_alloc((largest ? largest : 1) * (size_t)tensors * sizeof(float), "a shard's host copy");
    if (!scratch_block)
        return DP_ENOMEM;
    float *scratch[1 + DP_OPTIMIZER_MAX_STATE];
    for (int i = 0; i < tensors; i++)
        scratch[i] = scratch_block + (size_t)i * largest;
    int status = 0;
    for (int r = 0; !status && r < shards; r++) {
        dp_range part = dp_partition(total, shards, r);
        int wanted = (part.begin < need_params.end && need_params.begin < part.end) ||
                     (part.begin < need_state.end && need_state.begin < part.end);
        char path[DP_PATH_MAX + 128];
        if (!wanted || (status = shard_path(index_path, r, shards, path, sizeof path)) ||
            (status = read_shard(t, path, step, part, scratch)))
            continue;
        copy_overlap(part, scratch[0], need_params, t->host.params);
        for (int i = 1; i < tensors; i++)
            copy_overlap(part, scratch[i], need_state, t->host.optimizer[i - 1]);
    }
    free(scratch_block);
    if (status)
        return status;
    t->engine.be->upload(t->engine.be, params, t->host.params, dp_range_size(need_params) * sizeof(float));
    for (int i = 1; i < tensors; i++)
        t->engine.be->upload(t->engine.be, t->engine.opt.state[i - 1], t->host.optimizer[i - 1], dp_range_size(need_state) * sizeof(float));
    return 0;
}
