#include "config.h"

#include "dp/train.h"

#include "dp/error.h"
#include "dp/rng.h"
#include "src/train/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows one rank feeds forward at once when evaluating, however small the training slice. */
#define EVAL_ROWS 256


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
    if (!status)
        status = dp_trainer_place_data(t);
    if (status)
        return status;
    t->dev_x = be->alloc(rows * dim * sizeof(float), "the input batch");
    t->dev_labels = be->alloc(rows * sizeof(int32_t), "the label batch");
    t->dev_targets = be->alloc(rows * outputs * sizeof(float), "the target batch");
    size_t param_bytes = t->plan.nparams * sizeof(float);
    t->host_params = dp_alloc(param_bytes, "the host copy of the parameters");
    t->host_velocity = dp_alloc(param_bytes, "the host copy of the momentum buffer");
    t->rank_hashes = dp_calloc((size_t)t->comm->size, sizeof *t->rank_hashes, "replica hashes");
    int ok = t->dev_x && t->dev_labels && t->dev_targets && t->host_params && t->host_velocity &&
             t->rank_hashes;
    return ok ? 0 : DP_ENOMEM;
}

static void free_buffers(trainer *t)
{
    dp_mlp_free(&t->model);
    dp_sgd_free(&t->opt);
    free(t->host_params);
    free(t->host_velocity);
    free(t->rank_hashes);
    if (t->be) {
        dp_trainer_free_data(t);
        t->be->free(t->dev_x);
        t->be->free(t->dev_labels);
        t->be->free(t->dev_targets);
    }
    dp_sampler_free(&t->sampler);
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
        int rows = dp_trainer_gather(t, micro + mine.begin, micro + mine.end);
        long correct = 0;
        dp_mlp_forward_backward(&t->model, t->dev_x, t->dev_labels, t->dev_targets, rows,
                                t->plan.loss, &local->loss_sum, &correct);
        local->correct += (double)correct;
        local->samples += rows;
    }
    /* Waiting for the device makes the compute time include its work; one rank has no all-reduce to time. */
    if (t->comm->size > 1)
        t->be->synchronize();
    double reduce_started = MPI_Wtime();
    int status = dp_trainer_sync_gradients(t);
    if (status)
        return status;
    double reduce_done = MPI_Wtime();
    /* Sum then divide by the global count: exact for uneven slices and short batches. */
    t->be->scale(t->model.grads, t->plan.nparams, 1.0f / (float)(step.end - step.begin));
    int finite = 1;
    if ((status = dp_trainer_check_gradient(t, local->loss_sum, &finite)))
        return status;
    t->opt.lr = dp_lr_at(o->lr_schedule, o->lr, t->steps_done, t->plan.total_steps);
    if (finite)
        dp_sgd_step(&t->opt, t->model.params, t->model.grads);
    t->steps_done++;
    double done = MPI_Wtime();
    local->comm_seconds += reduce_done - reduce_started;
    local->compute_seconds += (reduce_started - started) + (done - reduce_done);
    local->seconds += done - started;
    local->steps++;
    return 0;
}

/* Every rank evaluates its slice of the test set; sums over ranks give loss and accuracy. */
static int evaluate(trainer *t, dp_train_result *result)
{
    const dp_dataset *data = t->test;
    dp_range mine = dp_partition(data->count, t->comm->size, t->comm->rank);
    double sums[3] = {0.0, 0.0, (double)(mine.end - mine.begin)};
    for (size_t begin = mine.begin; begin < mine.end; begin += (size_t)t->max_rows) {
        size_t end = begin + (size_t)t->max_rows < mine.end ? begin + (size_t)t->max_rows : mine.end;
        const float *x, *targets;
        const int32_t *labels;
        dp_trainer_test_rows(t, begin, &x, &labels, &targets);
        long correct = 0;
        dp_mlp_evaluate(&t->model, x, labels, targets, (int)(end - begin), t->plan.loss, &sums[0], &correct);
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
    if (t->test && (status = evaluate(t, result)))
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

static int due(long steps_done, long every)
{
    return every > 0 && steps_done % every == 0;
}

/* After an update: the testing corruption, the replica check, the checkpoint. */
static int after_step(trainer *t)
{
    const dp_options *o = t->o;
    int status = 0;
    dp_trainer_inject_corruption(t);
    if (due(t->steps_done, o->check_replicas))
        status = dp_trainer_check_replicas(t);
    int last = t->steps_done == t->plan.total_steps;
    if (!status && o->checkpoint_dir[0] && (last || due(t->steps_done, o->checkpoint_every)))
        status = dp_trainer_checkpoint(t);
    return status;
}

static int run_steps(trainer *t, dp_train_result *result)
{
    dp_interval log_iv = {0}, epoch_iv = {0}, total = {0};
    long log_every = t->o->quiet ? 0 : t->o->log_every;
    for (long step = t->start_step; step < t->plan.total_steps; step++) {
        long epoch = step / t->plan.steps_per_epoch, in_epoch = step % t->plan.steps_per_epoch;
        if (t->sampler.epoch != epoch)
            dp_trainer_set_epoch(t, epoch);
        dp_watchdog_set_step(&t->watchdog, step + 1);
        dp_interval local = {0};
        int status = train_step(t, in_epoch, &local);
        if (!status)
            status = after_step(t);
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
    result->steps = t->plan.total_steps - t->start_step;
    result->skipped_steps = t->skipped_steps;
    result->wall_seconds = total.seconds;
    result->compute_seconds = total.compute_seconds;
    result->comm_seconds = total.comm_seconds;
    int status = dp_comm_sum_doubles(t->comm, &total.samples, 1);
    result->samples = (long)total.samples;
    return status;
}

int dp_train(const dp_options *o, const dp_dataset *train, const dp_dataset *test,
             dp_comm *comm, float *host_params_out, dp_train_result *result)
{
    trainer t = {.o = o, .comm = comm, .train = train, .test = test};
    memset(result, 0, sizeof *result);
    int status = dp_train_check_data(o, train, "training");
    if (!status && test)
        status = dp_train_check_data(o, test, "test");
    if (!status)
        status = plan_training(&t);
    if (!status)
        status = dp_trainer_open_device(&t);
    if (!status)
        status = allocate_buffers(&t);
    if (!status && !(status = dp_watchdog_start(&t.watchdog, comm, o->timeout)))
        comm->watchdog = &t.watchdog;
    if (!status && comm->rank == 0 && !o->quiet)
        dp_report_banner(o, comm, &t.plan, t.be->describe(), dp_trainer_gradient_path(&t), train, test);
    if (!status)
        status = dp_trainer_start_state(&t);
    if (!status)
        status = run_steps(&t, result);
    if (!status)
        status = dp_trainer_export(&t, host_params_out);
    if (!status && comm->rank == 0)
        dp_report_summary(&t.plan, result);
    comm->watchdog = NULL;
    dp_watchdog_stop(&t.watchdog);
    free_buffers(&t);
    dp_trainer_close_device(&t);
    return status;
}
