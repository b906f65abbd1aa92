/* ZeRO-3's whole files without a whole model on any rank. Ranged reads (--init, --resume of a
 * whole checkpoint): each rank reads only its shard's part of every parameter tensor and
 * optimizer state; rank 0 reads first and its read checks the whole header, the others read
 * theirs once it has succeeded, so a bad file is named once. The streamed --save: rank 0's
 * writer asks the parameters piece by piece, gathered from the ranks' shards as it writes. */
#include "src/train/trainer.h"

#include "dp/error.h"
#include "dp/safetensors.h"
#include "dp/zero_plan.h"

#include <stdio.h>
#include <stdlib.h>

int dp_trainer_check_parts(const char *option, const char *path, const dp_tensor_part *parts, int count)
{
    dp_tensor_ref *read = dp_calloc((size_t)(count ? count : 1), sizeof *read, "the list of tensors read");
    if (!read)
        return DP_ENOMEM;
    /* What was read, as flat tensors of their own names. */
    for (int i = 0; i < count; i++) {
        read[i] = parts[i].ref;
        read[i].ndim = 1;
        read[i].shape[0] = (int64_t)parts[i].count;
    }
    int status = dp_train_check_loaded(option, path, read, count);
    free(read);
    return status;
}

int dp_trainer_read_parts(const char *option, const char *path, dp_tensor_part *parts, int count)
{
    int status = dp_safetensors_read_parts(path, parts, count, NULL, 0);
    return status ? status : dp_trainer_check_parts(option, path, parts, count);
}

int dp_trainer_own_parts(const trainer *t, int with_state, dp_tensor_part *parts)
{
    size_t begin, end;
    dp_strategy_shard(t->engine.strategy, &begin, &end);
    dp_range mine = {begin, end};
    int count = dp_params_parts(&t->engine.model.params, mine, t->host.params, parts);
    for (int i = 0; with_state && i < dp_optimizer_state_count(&t->engine.opt); i++) {
        dp_tensor_part *p = &parts[count++];
        *p = (dp_tensor_part){.ref = {.ndim = 1, .shape = {(int64_t)t->plan.nparams}, .data = t->host.optimizer[i]},
                              .first = begin, .count = end - begin};
        snprintf(p->ref.name, sizeof p->ref.name, "%s", dp_optimizer_state_name(&t->engine.opt, i));
    }
    return count;
}

int dp_trainer_read_own_parts(trainer *t, const char *option, const char *path, int with_state)
{
    dp_tensor_part *parts = dp_calloc((size_t)t->engine.model.params.count + DP_OPTIMIZER_MAX_STATE, sizeof *parts,
                                      "the list of tensor parts");
    int status = parts ? dp_trainer_read_parts(option, path, parts, dp_trainer_own_parts(t, with_state, parts))
                       : DP_ENOMEM;
    free(parts);
    return status;
}

void dp_trainer_upload_own_parts(trainer *t, int with_state)
{
    size_t begin, end;
    dp_strategy_shard(t->engine.strategy, &begin, &end);
    size_t bytes = (end - begin) * sizeof(float);
    float *params, *grads;
    dp_strategy_update_memory(t->engine.strategy, &params, &grads);
    t->engine.be->upload(t->engine.be, params, t->host.params, bytes);
    for (int i = 0; with_state && i < dp_optimizer_state_count(&t->engine.opt); i++)
        t->engine.be->upload(t->engine.be, t->engine.opt.state[i], t->host.optimizer[i], bytes);
}

/* ZeRO-3's --save: the parameters gathered into rank 0's writer piece by piece, at most a
 * block of the budget (unlimited: a module) at a time, so no rank holds the whole model. */
size_t dp_trainer_save_piece(const trainer *t)
{
    size_t block = dp_strategy_block(t->engine.strategy);
    dp_zero_plan_input layout;
    dp_strategy_plan_input(t->engine.strategy, &layout);
    return block ? block : (layout.unit_floats ? layout.unit_floats : 1);
}

/* Elements [first, first + count) of parameter tensor `tensor`, gathered into buf on rank 0
 * (elsewhere buf is the rank's host copy of its shard). */
int dp_trainer_gather_parameter_piece(void *arg, int tensor, size_t first, size_t count, void *buf)
{
    trainer *t = arg;
    size_t at = t->engine.model.params.entries[tensor].offset + first;
    float *shard, *grads;
    dp_strategy_update_memory(t->engine.strategy, &shard, &grads);
    return dp_strategy_gather_window(t->engine.strategy, shard, (dp_range){at, at + count}, buf, 0);
}

/* The other ranks' side of rank 0's streamed write: the same pieces in the same order. */
int dp_trainer_send_parameter_pieces(trainer *t)
{
    size_t piece = dp_trainer_save_piece(t);
    int status = 0;
    for (int i = 0; !status && i < t->engine.model.params.count; i++) {
        size_t n = t->engine.model.params.entries[i].count, step = piece < n ? piece : n;
        for (size_t first = 0; !status && first < n; first += step)
            status = dp_trainer_gather_parameter_piece(t, i, first, n - first < step ? n - first : step, t->host.params);
    }
    return status;
}
