#include "config.h"

#include "dp/train.h"

#include "dp/backend.h"
#include "dp/error.h"
#include "dp/mlp.h"
#include "dp/optim.h"
#include "dp/rng.h"
#include "dp/safetensors.h"
#include "dp/sampler.h"
#include "src/train/report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows one rank feeds forward at once when evaluating, however small the training slice. */
#define EVAL_ROWS 256

typedef struct trainer {
    const dp_options *o;
    dp_comm *comm;
    const dp_backend *be;
    const dp_dataset *train, *test;
    dp_plan plan;
    dp_mlp model;
    dp_sgd opt;
    dp_sampler sampler;
    int max_rows;
    long steps_done;               /* optimizer steps taken, for the learning-rate schedule */
    float *host_x, *host_targets;  /* staging for the rows of one forward */
    int32_t *host_labels;
    float *dev_x, *dev_targets;    /* the same rows in backend memory */
    int32_t *dev_labels;
} trainer;

dp_loss dp_train_loss_for(const dp_options *o, const dp_dataset *data)
{
    if (o->loss == DP_LOSS_AUTO)
        return data->labels ? DP_LOSS_XENT : DP_LOSS_MSE;
    return o->loss == DP_LOSS_CHOICE_XENT ? DP_LOSS_XENT : DP_LOSS_MSE;
}

static int max_label(const dp_dataset *data)
{
    int32_t top = 0;
    for (size_t i = 0; i < data->count; i++)
        if (data->labels[i] > top)
            top = data->labels[i];
    return top;
}

int dp_train_check_data(const dp_options *o, const dp_dataset *data, const char *role)
{
    int inputs = o->widths[0], outputs = o->widths[o->nwidths - 1];
    dp_loss loss = dp_train_loss_for(o, data);
    if (data->dim != inputs)
        return dp_fail(DP_EINVAL, "%s data %s has %d features per sample but --layers starts with %d inputs",
                       role, data->description, data->dim, inputs);
    if (loss == DP_LOSS_XENT && !data->labels)
        return dp_fail(DP_EINVAL, "--loss xent needs class labels but %s data %s has float targets",
                       role, data->labels_source);
    if (loss == DP_LOSS_MSE && !data->targets)
        return dp_fail(DP_EINVAL, "--loss mse needs float targets but %s data %s has class labels",
                       role, data->labels_source);
    if (data->labels && max_label(data) >= outputs)
        return dp_fail(DP_EINVAL, "%s labels in %s go up to %d but the output layer of --layers has %d units",
                       role, data->labels_source, max_label(data), outputs);
    if (data->targets && data->outputs != outputs)
        return dp_fail(DP_EINVAL, "%s targets in %s have %d columns but the output layer of --layers has %d units",
                       role, data->labels_source, data->outputs, outputs);
    return 0;
}

static int load_or_draw_params(const dp_options *o, float *host_params)
{
    if (!o->init_path[0]) {
        dp_mlp_init_uniform(o->widths, o->nwidths, o->seed, host_params);
        return 0;
    }
    dp_tensor_ref refs[2 * DP_MLP_MAX_LAYERS];
    dp_mlp_tensor_refs(o->widths, o->nwidths, host_params, refs);
    return dp_safetensors_read(o->init_path, refs, 2 * (o->nwidths - 1));
}

int dp_train_init_params(const dp_options *o, dp_comm *comm, float *host_params)
{
    size_t nparams = dp_mlp_param_count(o->widths, o->nwidths);
    if (comm->rank == 0) {
        int status = load_or_draw_params(o, host_params);
        if (status)
            return status;
    }
    return dp_comm_broadcast(comm, host_params, nparams * sizeof(float), 0);
}

static int plan_training(trainer *t)
{
    const dp_options *o = t->o;
    dp_plan *plan = &t->plan;
    plan->step_batch = (size_t)o->batch * (size_t)o->accum;
    plan->steps_per_epoch = dp_sampler_steps_per_epoch(t->train->count, plan->step_batch, o->drop_last);
    if (plan->steps_per_epoch == 0)
        return dp_fail(DP_EINVAL, "--drop-last: training data has %zu samples, fewer than one step's %zu (--batch x --accum)",
                       t->train->count, plan->step_batch);
    plan->total_steps = o->steps > 0 ? o->steps : o->epochs * plan->steps_per_epoch;
    plan->nparams = dp_mlp_param_count(o->widths, o->nwidths);
    plan->loss = dp_train_loss_for(o, t->train);
    size_t slice_rows = ((size_t)o->batch + t->comm->size - 1) / t->comm->size;
    t->max_rows = (int)(slice_rows > EVAL_ROWS ? slice_rows : EVAL_ROWS);
    return 0;
}

static int allocate_buffers(trainer *t)
{
    const dp_backend *be = t->be;
    size_t rows = (size_t)t->max_rows, dim = (size_t)t->o->widths[0];
    size_t outputs = (size_t)t->o->widths[t->o->nwidths - 1];
    int status = dp_mlp_create(&t->model, be, t->o->widths, t->o->nwidths, t->max_rows);
    if (!status)
        status = dp_sgd_init(&t->opt, be, t->plan.nparams, t->o->lr, t->o->momentum, t->o->weight_decay);
    if (!status)
        status = dp_sampler_init(&t->sampler, t->train->count, dp_rng_mix(t->o->seed, 0x5a3));
    if (status)
        return status;
    t->host_x = dp_alloc(rows * dim * sizeof(float), "the input staging buffer");
    t->host_labels = dp_alloc(rows * sizeof(int32_t), "the label staging buffer");
    t->host_targets = dp_alloc(rows * outputs * sizeof(float), "the target staging buffer");
    t->dev_x = be->alloc(rows * dim * sizeof(float), "the input batch");
    t->dev_labels = be->alloc(rows * sizeof(int32_t), "the label batch");
    t->dev_targets = be->alloc(rows * outputs * sizeof(float), "the target batch");
    int ok = t->host_x && t->host_labels && t->host_targets && t->dev_x && t->dev_labels && t->dev_targets;
    return ok ? 0 : DP_ENOMEM;
}

static void free_buffers(trainer *t)
{
    dp_mlp_free(&t->model);
    dp_sgd_free(&t->opt);
    dp_sampler_free(&t->sampler);
    free(t->host_x);
    free(t->host_labels);
    free(t->host_targets);
    if (t->be) {
        t->be->free(t->dev_x);
        t->be->free(t->dev_labels);
        t->be->free(t->dev_targets);
    }
}

/* Stages samples order[begin..end) (or begin..end itself when order is NULL) of data into
 * backend memory; returns the row count. */
static int stage_rows(trainer *t, const dp_dataset *data, const size_t *order, size_t begin, size_t end)
{
    int rows = (int)(end - begin), dim = data->dim, k = data->outputs;
    for (int r = 0; r < rows; r++) {
        size_t sample = order ? order[begin + r] : begin + r;
        memcpy(t->host_x + (size_t)r * dim, data->features + sample * dim, (size_t)dim * sizeof(float));
        if (data->labels)
            t->host_labels[r] = data->labels[sample];
        else
            memcpy(t->host_targets + (size_t)r * k, data->targets + sample * k, (size_t)k * sizeof(float));
    }
    t->be->upload(t->dev_x, t->host_x, (size_t)rows * dim * sizeof(float));
    if (data->labels)
        t->be->upload(t->dev_labels, t->host_labels, (size_t)rows * sizeof(int32_t));
    else
        t->be->upload(t->dev_targets, t->host_targets, (size_t)rows * k * sizeof(float));
    return rows;
}

/* One optimizer step: accum micro-batches of local forward/backward, one all-reduce, update. */
static int train_step(trainer *t, long step_in_epoch, dp_interval *local)
{
    const dp_options *o = t->o;
    double started = MPI_Wtime();
    dp_range step = dp_sampler_step_range(t->train->count, t->plan.step_batch, step_in_epoch);
    t->be->zero(t->model.grads, t->plan.nparams);
    for (size_t micro = step.begin; micro < step.end; micro += (size_t)o->batch) {
        size_t micro_end = micro + (size_t)o->batch < step.end ? micro + (size_t)o->batch : step.end;
        dp_range mine = dp_partition(micro_end - micro, t->comm->size, t->comm->rank);
        int rows = stage_rows(t, t->train, t->sampler.order, micro + mine.begin, micro + mine.end);
        long correct = 0;
        dp_mlp_forward_backward(&t->model, t->dev_x, t->dev_labels, t->dev_targets, rows,
                                t->plan.loss, &local->loss_sum, &correct);
        local->correct += (double)correct;
        local->samples += rows;
    }
    double reduce_started = MPI_Wtime();
    int status = dp_comm_allreduce_sum(t->comm, t->model.grads, t->plan.nparams);
    if (status)
        return status;
    double reduce_done = MPI_Wtime();
    /* Sum then divide by the global count: exact for uneven slices and short batches. */
    t->be->scale(t->model.grads, t->plan.nparams, 1.0f / (float)(step.end - step.begin));
    t->opt.lr = dp_lr_at(o->lr_schedule, o->lr, t->steps_done, t->plan.total_steps);
    dp_sgd_step(&t->opt, t->model.params, t->model.grads);
    t->steps_done++;
    double done = MPI_Wtime();
    local->comm_seconds += reduce_done - reduce_started;
    local->compute_seconds += (reduce_started - started) + (done - reduce_done);
    local->seconds += done - started;
    local->steps++;
    return 0;
}

/* Every rank evaluates its slice of data; sums over ranks give loss and accuracy. */
static int evaluate(trainer *t, const dp_dataset *data, dp_train_result *result)
{
    dp_range mine = dp_partition(data->count, t->comm->size, t->comm->rank);
    double sums[3] = {0.0, 0.0, (double)(mine.end - mine.begin)};
    for (size_t begin = mine.begin; begin < mine.end; begin += (size_t)t->max_rows) {
        size_t end = begin + (size_t)t->max_rows < mine.end ? begin + (size_t)t->max_rows : mine.end;
        int rows = stage_rows(t, data, NULL, begin, end);
        long correct = 0;
        dp_mlp_evaluate(&t->model, t->dev_x, t->dev_labels, t->dev_targets, rows, t->plan.loss,
                        &sums[0], &correct);
        sums[1] += (double)correct;
    }
    int status = dp_comm_sum_doubles(t->comm, sums, 3);
    if (status)
        return status;
    result->has_test = 1;
    result->test_loss = sums[0] / sums[2];
    result->test_accuracy = sums[1] / sums[2];
    return 0;
}

/* Sums an interval's loss, sample and correct counts over ranks (rank 0's timings stay). */
static int reduce_interval(trainer *t, dp_interval *iv)
{
    double sums[3] = {iv->loss_sum, iv->samples, iv->correct};
    int status = dp_comm_sum_doubles(t->comm, sums, 3);
    iv->loss_sum = sums[0];
    iv->samples = sums[1];
    iv->correct = sums[2];
    return status;
}

static void add_interval(dp_interval *total, const dp_interval *part)
{
    total->loss_sum += part->loss_sum;
    total->samples += part->samples;
    total->correct += part->correct;
    total->seconds += part->seconds;
    total->compute_seconds += part->compute_seconds;
    total->comm_seconds += part->comm_seconds;
    total->steps += part->steps;
}

static int finish_epoch(trainer *t, long epoch, dp_interval *epoch_iv, dp_train_result *result)
{
    int status = reduce_interval(t, epoch_iv);
    if (status)
        return status;
    result->train_loss = epoch_iv->loss_sum / epoch_iv->samples;
    if (t->test && (status = evaluate(t, t->test, result)))
        return status;
    if (t->comm->rank == 0 && !t->o->quiet)
        dp_report_epoch(&t->plan, epoch, t->o->steps > 0 ? 0 : t->o->epochs, epoch_iv, result);
    memset(epoch_iv, 0, sizeof *epoch_iv);
    return 0;
}

static int log_progress(trainer *t, long step, long epoch, dp_interval *log_iv)
{
    int status = reduce_interval(t, log_iv);
    if (!status && t->comm->rank == 0)
        dp_report_step(&t->plan, step, epoch, log_iv);
    memset(log_iv, 0, sizeof *log_iv);
    return status;
}

static int run_steps(trainer *t, dp_train_result *result)
{
    dp_interval log_iv = {0}, epoch_iv = {0}, total = {0};
    long log_every = t->o->quiet ? 0 : t->o->log_every;
    for (long step = 0; step < t->plan.total_steps; step++) {
        long epoch = step / t->plan.steps_per_epoch, in_epoch = step % t->plan.steps_per_epoch;
        if (t->sampler.epoch != epoch)
            dp_sampler_set_epoch(&t->sampler, epoch);
        dp_interval local = {0};
        int status = train_step(t, in_epoch, &local);
        add_interval(&log_iv, &local);
        add_interval(&epoch_iv, &local);
        add_interval(&total, &local);
        if (!status && log_every && (step + 1) % log_every == 0)
            status = log_progress(t, step + 1, epoch, &log_iv);
        int epoch_ends = in_epoch + 1 == t->plan.steps_per_epoch || step + 1 == t->plan.total_steps;
        if (!status && epoch_ends)
            status = finish_epoch(t, epoch, &epoch_iv, result);
        if (status)
            return status;
    }
    result->steps = t->plan.total_steps;
    result->wall_seconds = total.seconds;
    result->compute_seconds = total.compute_seconds;
    result->comm_seconds = total.comm_seconds;
    int status = dp_comm_sum_doubles(t->comm, &total.samples, 1);
    result->samples = (long)total.samples;
    return status;
}

static int save_params(const trainer *t, const float *host_params)
{
    char steps[32], seed[32];
    snprintf(steps, sizeof steps, "%ld", t->plan.total_steps);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)t->o->seed);
    const char *keys[] = {"format", "dptrain_version", "layers", "steps", "seed"};
    const char *values[] = {"pt", PACKAGE_VERSION, t->o->layers_spec, steps, seed};
    dp_tensor_ref refs[2 * DP_MLP_MAX_LAYERS];
    dp_mlp_tensor_refs(t->o->widths, t->o->nwidths, (float *)host_params, refs);
    return dp_safetensors_write(t->o->save_path, refs, 2 * (t->o->nwidths - 1), keys, values, 5);
}

/* Copies the final parameters to the host, saves them on rank 0 if asked, returns them. */
static int export_params(trainer *t, float *host_params_out)
{
    float *host = host_params_out;
    if (!host && !(host = dp_alloc(t->plan.nparams * sizeof(float), "the parameters to save")))
        return DP_ENOMEM;
    t->be->download(host, t->model.params, t->plan.nparams * sizeof(float));
    int status = t->comm->rank == 0 && t->o->save_path[0] ? save_params(t, host) : 0;
    if (host != host_params_out)
        free(host);
    return status;
}

static int start_from_broadcast_params(trainer *t)
{
    float *host = dp_alloc(t->plan.nparams * sizeof(float), "the initial parameters");
    if (!host)
        return DP_ENOMEM;
    int status = dp_train_init_params(t->o, t->comm, host);
    if (!status)
        t->be->upload(t->model.params, host, t->plan.nparams * sizeof(float));
    free(host);
    return status;
}

int dp_train(const dp_options *o, const dp_dataset *train, const dp_dataset *test,
             dp_comm *comm, float *host_params_out, dp_train_result *result)
{
    trainer t = {.o = o, .comm = comm, .be = dp_backend_cpu(), .train = train, .test = test};
    memset(result, 0, sizeof *result);
    int status = dp_train_check_data(o, train, "training");
    if (!status && test)
        status = dp_train_check_data(o, test, "test");
    if (!status)
        status = plan_training(&t);
    if (!status)
        status = allocate_buffers(&t);
    if (!status)
        status = start_from_broadcast_params(&t);
    if (!status && comm->rank == 0 && !o->quiet)
        dp_report_banner(o, comm, &t.plan, train, test);
    if (!status)
        status = run_steps(&t, result);
    if (!status)
        status = export_params(&t, host_params_out);
    if (!status && comm->rank == 0)
        dp_report_summary(&t.plan, result);
    free_buffers(&t);
    return status;
}
