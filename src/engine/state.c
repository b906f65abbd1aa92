/* The engine's state as its components hold it (their state_dict), for checkpoints, --save,
 * --init and the replica check: the model's parameters (whole, or this rank's shard where the
 * strategy holds them), its running statistics and counters (whole on every rank), and the
 * optimizer's state buffers over its range (whole, or the shard) with its update count. What a
 * rank holds as a shard is gathered and scattered by the strategy. */
#include "src/engine/parts.h"

#include "dp/error.h"

#include <string.h>

int dp_engine_state_count(const dp_engine *e)
{
    return DP_STATE_OPTIMIZER + dp_optimizer_state_count(&e->opt);
}

/* The parameters' memory: the model's whole buffer, or (ZeRO-3) the strategy's shard. */
static float *parameters(const dp_engine *e, dp_range *held)
{
    size_t total = dp_params_floats(&e->model.params);
    if (e->model.weights || !e->strategy) {
        *held = (dp_range){0, total};
        return e->model.weights;
    }
    float *shard, *grads;
    dp_strategy_shard(e->strategy, &held->begin, &held->end);
    dp_strategy_update_memory(e->strategy, &shard, &grads);
    return shard;
}

dp_state_buffer dp_engine_state(const dp_engine *e, int i)
{
    size_t params = dp_params_floats(&e->model.params);
    if (i == DP_STATE_PARAMETERS) {
        dp_state_buffer b = {.name = "parameters", .tensors = &e->model.params, .floats = params};
        b.data = parameters(e, &b.held);
        return b;
    }
    if (i == DP_STATE_STATISTICS) {
        size_t floats = dp_params_floats(&e->model.buffers);
        return (dp_state_buffer){.name = "running statistics", .tensors = &e->model.buffers, .floats = floats,
                                 .held = {0, floats}, .data = e->model.buffer_values, .counters = e->model.counters};
    }
    int k = i - DP_STATE_OPTIMIZER;
    return (dp_state_buffer){.name = dp_optimizer_state_name(&e->opt, k), .floats = params,
                             .held = {e->opt.begin, e->opt.end}, .data = e->opt.state[k]};
}

int dp_state_is_sharded(const dp_state_buffer *b)
{
    return dp_range_size(b->held) != b->floats;
}

int dp_engine_gather_state(dp_engine *e, int i, float *host, int root)
{
    dp_state_buffer b = dp_engine_state(e, i);
    if (!dp_state_is_sharded(&b)) {
        if (root < 0 || e->comm->rank == root)
            e->be->download(e->be, host, b.data, b.floats * sizeof(float));
        return 0;
    }
    return dp_strategy_gather(e->strategy, b.data, 1, host, root);
}

int dp_engine_gather_state_window(dp_engine *e, int i, dp_range window, float *host, int root)
{
    dp_state_buffer b = dp_engine_state(e, i);
    return dp_strategy_gather_window(e->strategy, b.data, window, host, root);
}

int dp_engine_scatter_state(dp_engine *e, int i, float *host, int root)
{
    dp_state_buffer b = dp_engine_state(e, i);
    if (dp_state_is_sharded(&b))
        return dp_strategy_scatter(e->strategy, host, b.data, 1, root);
    int status = root >= 0 ? dp_comm_broadcast(e->comm, host, b.floats * sizeof(float), root) : 0;
    if (!status && b.counters && root >= 0)
        status = dp_comm_broadcast(e->comm, b.counters, b.tensors->totals[DP_DTYPE_I64] * sizeof *b.counters, root);
    if (!status)
        e->be->upload(e->be, b.data, host, b.floats * sizeof(float));
    return status;
}

void dp_engine_download_held(const dp_engine *e, int i, dp_range part, float *host)
{
    dp_state_buffer b = dp_engine_state(e, i);
    e->be->download(e->be, host, b.data + (part.begin - b.held.begin), dp_range_size(part) * sizeof(float));
}

void dp_engine_upload_held(dp_engine *e, int i, const float *host)
{
    dp_state_buffer b = dp_engine_state(e, i);
    e->be->upload(e->be, b.data, host, dp_range_size(b.held) * sizeof(float));
}

int64_t *dp_engine_update_count(dp_engine *e)
{
    return dp_optimizer_counts_steps(&e->opt) ? &e->opt.steps : NULL;
}

int dp_engine_share_update_count(dp_engine *e, int root)
{
    return dp_comm_broadcast(e->comm, &e->opt.steps, sizeof e->opt.steps, root);
}

void dp_engine_resume_at(dp_engine *e, long steps_done)
{
    e->steps_done = steps_done;
}
