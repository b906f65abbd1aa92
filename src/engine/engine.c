/* Building the engine: the model on the backend (only the flat buffers its strategy does not
 * shard), the strategy over the model's layout (one segment per module with parameters) with
 * its hooks attached, the optimizer over the strategy's range, and the step's device buffers,
 * all allocated before the first step. */
#include "src/engine/parts.h"

#include "dp/error.h"

#include <stdlib.h>
#include <string.h>

/* Segments: runs of parameter-table entries owned by one module, in table (forward) order. */
static int plan_segments(dp_engine *e, dp_strategy_layout *layout)
{
    const dp_param_table *params = &e->model.params;
    int modules = e->model.count;
    e->segment_of = malloc((size_t)(modules ? modules : 1) * sizeof *e->segment_of);
    e->segment_offset = malloc((size_t)(params->count ? params->count : 1) * sizeof *e->segment_offset);
    e->segment_count = malloc((size_t)(params->count ? params->count : 1) * sizeof *e->segment_count);
    e->segment_row = malloc((size_t)(params->count ? params->count : 1) * sizeof *e->segment_row);
    e->segment_rows = malloc((size_t)(params->count ? params->count : 1) * sizeof *e->segment_rows);
    if (!e->segment_of || !e->segment_offset || !e->segment_count || !e->segment_row || !e->segment_rows)
        return dp_fail(DP_ENOMEM, "out of memory for the gradient segments");
    for (int m = 0; m < modules; m++)
        e->segment_of[m] = -1;
    int segments = 0;
    for (int i = 0; i < params->count; i++) {
        const dp_param *p = &params->entries[i];
        if (e->segment_of[p->module] < 0) {
            e->segment_of[p->module] = segments;
            e->segment_offset[segments] = p->offset;
            dp_model_module_rows(&e->model, p->module, &e->segment_row[segments], &e->segment_rows[segments]);
            e->segment_count[segments++] = 0;
        }
        e->segment_count[e->segment_of[p->module]] += p->count;
    }
    *layout = (dp_strategy_layout){.segments = segments, .offset = e->segment_offset, .count = e->segment_count,
                                   .row = e->segment_row, .rows = e->segment_rows, .total = dp_params_floats(params)};
    return 0;
}

/* Stages that keep the whole flat buffer stage the gradients (and ZeRO's updated parameters)
 * through one host buffer; stage 3 stages its working buffers itself. */
static int allocate_staging(dp_engine *e, const dp_strategy_choice *strategy)
{
    if (!e->stage_gradients || dp_strategy_model_owns(strategy) == 0)
        return 0;
    e->host_grads = e->be->alloc_host(e->be, dp_params_floats(&e->model.params) * sizeof(float), "the gradient staging buffer");
    return e->host_grads ? 0 : DP_ENOMEM;
}

static int open_strategy(dp_engine *e, const dp_engine_config *c)
{
    dp_strategy_layout layout;
    int status = plan_segments(e, &layout);
    if (!status)
        status = allocate_staging(e, c->strategy);
    if (status)
        return status;
    dp_strategy_buffers buffers = dp_engine_gradient_buffers(e);
    dp_strategy_config config = dp_strategy_default_config(c->strategy, c->overlap, c->bucket_mb, layout.total);
    config.progress_us = c->progress_us;
    config.micro_batch = c->micro_batch;
    if ((status = dp_strategy_open(&e->strategy, e->comm, &layout, &buffers, &config)))
        return status;
    dp_strategy_attach(e->strategy, &e->hooks);
    e->piece_floats = dp_strategy_piece_floats(e->strategy);
    if (e->hooks.fetch) /* modules larger than the budget read their parameters in pieces */
        dp_model_set_param_pieces(&e->model, &(dp_param_pieces){.max_floats = dp_strategy_block(e->strategy),
                                                                .fetch = e->hooks.fetch,
                                                                .fetch_columns = e->hooks.fetch_columns,
                                                                .arg = e->hooks.arg});
    return 0;
}

double *dp_engine_new_totals(const dp_engine *e, const char *what)
{
    static const double zeros[DP_TOTALS];
    double *totals = e->be->alloc(e->be, sizeof zeros, DP_MEM_OTHER, what);
    if (totals)
        e->be->upload(e->be, totals, zeros, sizeof zeros);
    return totals;
}

static int allocate_counters(dp_engine *e)
{
    const dp_backend *be = e->be;
    static const double zero = 0.0;
    e->train_totals = dp_engine_new_totals(e, "the loss totals");
    e->group_totals = dp_engine_new_totals(e, "a row group's loss totals");
    e->nonfinite = be->alloc(be, sizeof(double), DP_MEM_OTHER, "the non-finite count");
    e->step_number = be->alloc(be, sizeof *e->step_number, DP_MEM_OTHER, "the step number");
    e->host_step_number = e->step_number ? be->alloc_host(be, sizeof *e->host_step_number, "its staging") : NULL;
    e->rank_values = dp_calloc((size_t)e->comm->size, sizeof *e->rank_values, "the ranks' first non-finite tensors");
    size_t buffers = dp_params_floats(&e->model.buffers);
    e->host_buffers = dp_alloc((buffers + 1) * sizeof(float), "the host copy of the running statistics");
    /* --clip-grad-norm's sum of squares; a run without it allocates nothing more. */
    e->squares = e->clip_grad_norm > 0.0f ? be->alloc(be, sizeof(double), DP_MEM_OTHER, "the gradient's sum of squares")
                                          : NULL;
    if (!e->train_totals || !e->group_totals || !e->nonfinite || !e->host_step_number || !e->rank_values ||
        !e->host_buffers || (e->clip_grad_norm > 0.0f && !e->squares))
        return DP_ENOMEM;
    be->upload(be, e->nonfinite, &zero, sizeof zero);
    if (e->squares)
        be->upload(be, e->squares, &zero, sizeof zero);
    return 0;
}

/* All that makes a replica, for a strategy that moves it: parameters, optimizer state, running
 * statistics (local SGD averages them). */
static int set_replica(dp_engine *e)
{
    dp_replica_tensor tensors[2 + DP_OPTIMIZER_MAX_STATE];
    size_t params = dp_params_floats(&e->model.params);
    int count = 0;
    tensors[count++] = (dp_replica_tensor){e->model.weights, params};
    for (int i = 0; i < dp_optimizer_state_count(&e->opt); i++)
        tensors[count++] = (dp_replica_tensor){e->opt.state[i], params};
    tensors[count++] = (dp_replica_tensor){e->model.buffer_values, dp_params_floats(&e->model.buffers)};
    return dp_strategy_set_replica(e->strategy, tensors, count);
}

int dp_engine_build(dp_engine *e, const dp_engine_config *c)
{
    e->loss = c->loss;
    e->micro_batch = c->micro_batch;
    e->accum = c->accum > 1 ? c->accum : 1; /* engines built without one take single micro-batches */
    e->total_steps = c->total_steps;
    e->seed = c->seed;
    e->skip_nonfinite = c->skip_nonfinite;
    e->clip_grad_norm = c->clip_grad_norm;
    int status = dp_model_create_owning(&e->model, e->be, c->model, &c->input, c->max_rows,
                                        dp_strategy_model_owns(c->strategy));
    if (status)
        return status;
    if (!(status = open_strategy(e, c))) {
        size_t begin, end;
        dp_strategy_shard(e->strategy, &begin, &end);
        status = dp_optimizer_init(&e->opt, e->be, &c->optimizer, &e->model.params, begin, end);
    }
    e->broadcast_buffers = !status && e->comm->size > 1 &&
                           dp_strategy_per_rank_statistics(e->strategy, e->model.batchnorms, e->model.sync_batchnorms);
    if (!status)
        status = set_replica(e);
    if (!status)
        status = dp_engine_plan_graph(e, c);
    return status ? status : allocate_counters(e);
}

int dp_engine_build_forward(dp_engine *e, const dp_model_spec *spec, const dp_dims *input, int max_rows)
{
    return dp_model_create_owning(&e->model, e->be, spec, input, max_rows, DP_MODEL_OWNS_ALL);
}

void dp_engine_close(dp_engine *e)
{
    if (!e)
        return;
    if (e->be)
        dp_engine_graph_free(e);
    dp_strategy_close(e->strategy);
    dp_model_free(&e->model);
    dp_optimizer_free(&e->opt);
    free(e->segment_of);
    free(e->segment_offset);
    free(e->segment_count);
    free(e->segment_row);
    free(e->segment_rows);
    free(e->rank_values);
    free(e->host_buffers);
    if (e->be) {
        e->be->free(e->be, e->train_totals);
        e->be->free(e->be, e->group_totals);
        e->be->free(e->be, e->nonfinite);
        if (e->squares)
            e->be->free(e->be, e->squares);
        e->be->free(e->be, e->step_number);
        if (e->host_step_number)
            e->be->free_host(e->be, e->host_step_number);
        if (e->host_grads)
            e->be->free_host(e->be, e->host_grads);
        if (e->comm && e->comm->device_stream == e->be->stream)
            e->comm->device_stream = NULL;
        dp_backend_close(e->be);
    }
    free(e);
}

const dp_backend *dp_engine_backend(const dp_engine *e)
{
    return e->be;
}

const dp_model *dp_engine_model(const dp_engine *e)
{
    return &e->model;
}

const dp_optimizer *dp_engine_optimizer(const dp_engine *e)
{
    return &e->opt;
}

dp_strategy *dp_engine_strategy(const dp_engine *e)
{
    return e->strategy;
}

long dp_engine_steps_done(const dp_engine *e)
{
    return e->steps_done;
}

long dp_engine_skipped_steps(const dp_engine *e)
{
    return e->skipped_steps;
}

void dp_engine_set_observer(dp_engine *e, const dp_engine_observer *observer)
{
    e->observer = *observer;
}
