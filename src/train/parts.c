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
#include <string.h>
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
    int count = 0, last = with_state ? dp_engine_state_count(t->engine) : DP_STATE_STATISTICS;
    for (int i = 0; i < last; i++) {
        dp_state_buffer b = dp_engine_state(t->engine, i);
        if (i == DP_STATE_STATISTICS) /* whole on every rank, read by rank 0 */
            continue;
        if (b.tensors) {
            count += dp_params_parts(b.tensors, b.held, t->host.state[i], parts + count);
            continue;
        }
        dp_tensor_part *p = &parts[count++];
        *p = (dp_tensor_part){.ref = {.ndim = 1, .shape = {(int64_t)b.floats}, .data = t->host.state[i]},
                              .first = b.held.begin, .count = dp_range_size(b.held)};
        snprintf(p->ref.name, sizeof p->ref.name, "%s", b.name);
    }
    return count;
}

int dp_trainer_read_own_parts(trainer *t, const char *option, const char *path, int with_state)
{
    dp_tensor_part *parts = dp_calloc((size_t)dp_engine_model(t->engine)->params.count + DP_OPTIMIZER_MAX_STATE,
                                      sizeof *parts, "the list of tensor parts");
    int status = parts ? dp_trainer_read_parts(option, path, parts, dp_trainer_own_parts(t, with_state, parts))
                       : DP_ENOMEM;
    free(parts);
    return status;
}

void dp_trainer_upload_own_parts(trainer *t, int with_state)
{
    int last = with_state ? dp_engine_state_count(t->engine) : DP_STATE_STATISTICS;
    for (int i = 0; i < last; i++)
        if (i != DP_STATE_STATISTICS)
            dp_engine_upload_held(t->engine, i, t->host.state[i]);
}

/* ZeRO-3's --save: the parameters gathered into rank 0's writer piece by piece, at most a
 * block of the budget (unlimited: a module) at a time, so no rank holds the whole model. */
size_t dp_trainer_save_piece(const trainer *t)
{
    dp_strategy *d = dp_engine_strategy(t->engine);
    size_t block = dp_strategy_block(d);
    dp_zero_plan_input layout;
    dp_strategy_plan_input(d, &layout);
    return block ? block : (layout.unit_floats ? layout.unit_floats : 1);
}

/* Elements [first, first + count) of parameter tensor `tensor`, gathered into buf on rank 0
 * (elsewhere buf is the rank's host copy of its shard). */
int dp_trainer_gather_parameter_piece(void *arg, int tensor, size_t first, size_t count, void *buf)
{
    trainer *t = arg;
    size_t at = dp_engine_model(t->engine)->params.entries[tensor].offset + first;
    return dp_engine_gather_state_window(t->engine, DP_STATE_PARAMETERS, (dp_range){at, at + count}, buf, 0);
}

/* The other ranks' side of rank 0's streamed write: the same pieces in the same order. */
int dp_trainer_send_parameter_pieces(trainer *t)
{
    const dp_param_table *params = &dp_engine_model(t->engine)->params;
    size_t piece = dp_trainer_save_piece(t);
    int status = 0;
    for (int i = 0; !status && i < params->count; i++) {
        size_t n = params->entries[i].count, step = piece < n ? piece : n;
        for (size_t first = 0; !status && first < n; first += step)
            status = dp_trainer_gather_parameter_piece(t, i, first, n - first < step ? n - first : step,
                                                       t->host.state[DP_STATE_PARAMETERS]);
    }
    return status;
}
