#include "config.h"

#include "dp/train.h"

#include "dp/error.h"
#include "dp/rng.h"
#include "src/train/limits.h"
#include "src/train/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows one rank feeds forward at once when evaluating, however small the training slice. */
#define EVAL_ROWS 256
/* The backend counters the trainer reads: loss sum and correct count. */
enum { TOTAL_LOSS, TOTAL_CORRECT, TOTALS };

/* The smallest micro-batch of an epoch: a full one, or the last of a short last step. */
static size_t smallest_micro_batch(const trainer *t)
{
    const dp_options *o = t->o;
    size_t step_batch = t->plan.step_batch, n = t->train->count, micro = (size_t)o->batch;
    size_t last_step = o->drop_last || n % step_batch == 0 ? step_batch : n % step_batch;
    return last_step % micro ? last_step % micro : micro;
}

/* BatchNorm's statistics need two values per feature: per rank, or per global micro-batch
 * with sync. Checked before training rather than in the middle of an epoch. */
static int check_batchnorm_rows(const trainer *t)
{
    const dp_options *o = t->o;
    size_t micro = smallest_micro_batch(t), slice = micro / (size_t)t->comm->size;
    if (t->model.batchnorms > t->model.sync_batchnorms && slice < 2)
        return dp_fail(DP_EINVAL, "--model '%s': a BatchNorm without sync needs at least 2 rows per rank in every "
                       "micro-batch, but some rank gets %zu (a micro-batch of %zu over %d ranks); use --sync-bn, "
                       "a larger --batch%s", o->model.text, slice, micro, t->comm->size,
                       o->drop_last ? "" : ", or --drop-last");
    if (t->model.batchnorms && micro < 2)
        return dp_fail(DP_EINVAL, "--model '%s': a BatchNorm needs at least 2 rows in every micro-batch, but one "
                       "has %zu%s", o->model.text, micro, o->drop_last ? "" : " (try --drop-last)");
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
    int status = dp_plan_total_steps(o, plan->steps_per_epoch, &plan->total_steps);
    if (status)
        return status;
    plan->loss = dp_train_loss_for(o, t->train);
    size_t slice_rows = ((size_t)o->batch + t->comm->size - 1) / t->comm->size;
    t->max_rows = (int)(slice_rows > EVAL_ROWS ? slice_rows : EVAL_ROWS);
    return 0;
}

int dp_trainer_sum_doubles(void *comm, double *values, int count)
{
    return dp_comm_sum_doubles(comm, values, count);
}

static int allocate_counters(trainer *t)
{
    const dp_backend *be = t->be;
    t->train_totals = be->alloc(TOTALS * sizeof(double), DP_MEM_OTHER, "the loss totals");
    t->eval_totals = be->alloc(TOTALS * sizeof(double), DP_MEM_OTHER, "the evaluation totals");
    t->nonfinite = be->alloc(sizeof(double), DP_MEM_OTHER, "the non-finite count");
    if (!t->train_totals || !t->eval_totals || !t->nonfinite)
        return DP_ENOMEM;
    static const double zeros[TOTALS];
    be->upload(t->train_totals, zeros, sizeof zeros);
    be->upload(t->eval_totals, zeros, sizeof zeros);
    be->upload(t->nonfinite, zeros, sizeof(double));
    return 0;
}

/* The model keeps the flat buffers its strategy does not shard; the strategy then holds its
 * shards and working buffers, and the optimizer's state covers its range. */
static int allocate_buffers(trainer *t)
{
    const dp_backend *be = t->be;
    size_t rows = (size_t)t->max_rows, dim = (size_t)t->train->dim;
    int status = dp_model_create_owning(&t->model, be, &t->o->model, t->train->dim, t->max_rows,
                                        dp_dist_model_owns(t->o->zero));
    if (status)
        return status;
    t->plan.nparams = dp_params_floats(&t->model.params);
    t->broadcast_buffers = t->comm->size > 1 && t->model.batchnorms > t->model.sync_batchnorms;
    dp_optimizer_config config = dp_options_optimizer(t->o);
    size_t begin = 0, end = 0;
    if (!status)
        status = check_batchnorm_rows(t);
    if (!status)
        status = dp_trainer_allocate_staging(t);
    if (!status)
        status = dp_trainer_open_dist(t);
    if (!status) {
        dp_dist_shard(&t->dist, &begin, &end);
        status = dp_optimizer_init(&t->opt, be, &config, &t->model.params, begin, end);
    }
    if (!status)
        status = dp_sampler_init(&t->sampler, t->train->count, dp_rng_mix(t->o->seed, 0x5a3));
    if (!status)
        status = dp_trainer_place_data(t);
    if (!status)
        status = allocate_counters(t);
    if (!status)
        status = dp_trainer_allocate_host_copies(t);
    if (!status)
        status = dp_trainer_open_timeline(t);
    if (status)
        return status;
    t->dev_x = be->alloc(rows * dim * sizeof(float), DP_MEM_ACTIVATIONS, "the input batch");
    t->dev_labels = be->alloc(rows * sizeof(int32_t), DP_MEM_ACTIVATIONS, "the label batch");
    t->dev_targets = be->alloc(rows * (size_t)t->model.outputs * sizeof(float), DP_MEM_ACTIVATIONS, "the target batch");
    return t->dev_x && t->dev_labels && t->dev_targets ? 0 : DP_ENOMEM;
}

static void free_buffers(trainer *t)
{
    dp_trainer_close_metrics(t, NULL);
    dp_trainer_close_timeline(t);
    dp_trainer_close_dist(t);
    dp_model_free(&t->model);
    dp_optimizer_free(&t->opt);
    free(t->host_params);
    free(t->host_buffers);
    free(t->host_gathered);
    for (int i = 0; i < DP_OPTIMIZER_MAX_STATE; i++)
        free(t->host_state[i]);
    free(t->rank_hashes);
    if (t->be) {
        dp_trainer_free_data(t);
        t->be->free(t->dev_x);
        t->be->free(t->dev_labels);
        t->be->free(t->dev_targets);
        t->be->free(t->train_totals);
        t->be->free(t->eval_totals);
        t->be->free(t->nonfinite);
    }
    dp_sampler_free(&t->sampler);
}

static dp_nn_context training_context(const trainer *t, int accumulate, size_t first_sample)
{
    return (dp_nn_context){.be = t->be, .training = 1, .accumulate = accumulate, .seed = t->o->seed,
                           .step = (uint64_t)t->steps_done, .first_sample = first_sample,
                           .sum_doubles = dp_trainer_sum_doubles, .sum_arg = t->comm};
}

/* Local forward, loss and backward of this rank's slice of one micro-batch; the last of the
 * step starts the gradients' collectives from backward. *rows gets the slice's size. */
static int train_micro_batch(trainer *t, const dp_range *step, size_t micro, size_t micro_end, dp_interval *local)
{
    double started = MPI_Wtime();
    dp_range mine = dp_partition(micro_end - micro, t->comm->size, t->comm->rank);
    int rows = dp_trainer_gather(t, micro + mine.begin, micro + mine.end);
    dp_trace_add(&t->trace, "gather the batch's rows", "data", DP_LANE_COMPUTE, started, MPI_Wtime());
    /* Backward adds into the last micro-batch's gradients unless the strategy adds reduced shards. */
    int accumulate = micro != step->begin && dp_dist_backward_accumulates(&t->dist);
    dp_nn_context ctx = training_context(t, accumulate, micro - step->begin + mine.begin);
    const float *out;
    int status = dp_model_forward(&t->model, &ctx, t->dev_x, rows, &out);
    if (status)
        return status;
    dp_model_loss(&t->model, t->plan.loss, out, t->dev_labels, t->dev_targets, rows, t->model.delta[0],
                  t->train_totals);
    double forward_done = MPI_Wtime();
    /* DDP's no_sync: only the step's last micro-batch communicates. */
    dp_dist_begin_micro(&t->dist, micro_end == step->end);
    status = dp_model_backward(&t->model, &ctx, t->model.delta[0], rows);
    if (!status)
        status = t->dist_status;
    local->samples += rows;
    local->split.forward += forward_done - started;
    local->split.backward += MPI_Wtime() - forward_done;
    return status;
}

/* Plain BatchNorm's running statistics differ by rank: rank 0's go to all, as DDP's
 * broadcast_buffers does, so the replicas stay identical. */
static int share_buffers(trainer *t)
{
    size_t bytes = dp_params_floats(&t->model.buffers) * sizeof(float);
    t->be->download(t->host_buffers, t->model.buffer_values, bytes);
    int status = dp_comm_broadcast(t->comm, t->host_buffers, bytes, 0);
    if (!status)
        t->be->upload(t->model.buffer_values, t->host_buffers, bytes);
    return status;
}

/* One optimizer step: accum micro-batches of local forward/backward, the gradients reduced
 * (during the last backward, bucket by bucket), the update. */
static int train_step(trainer *t, long step_in_epoch, dp_interval *local)
{
    const dp_options *o = t->o;
    double started = MPI_Wtime();
    dp_comm_traffic before = t->comm->traffic;
    dp_range step = dp_sampler_step_range(t->train->count, t->plan.step_batch, step_in_epoch);
    int status = 0;
    dp_trainer_timeline_step_begin(t);
    for (size_t micro = step.begin; !status && micro < step.end; micro += (size_t)o->batch) {
        size_t micro_end = micro + (size_t)o->batch < step.end ? micro + (size_t)o->batch : step.end;
        status = train_micro_batch(t, &step, micro, micro_end, local);
    }
    /* Waiting for the device makes backward's time include its work. */
    if (!status && t->comm->size > 1)
        t->be->synchronize();
    if (status || (status = dp_dist_finish(&t->dist)))
        return status;
    double reduce_done = MPI_Wtime();
    /* Sum then divide by the global count: exact for uneven slices and short batches. */
    float lr = dp_lr_at(o->lr_schedule, o->lr, t->steps_done, t->plan.total_steps);
    if ((status = dp_trainer_update(t, 1.0f / (float)(step.end - step.begin), lr)) ||
        (status = dp_dist_after_update(&t->dist)))
        return status;
    if (t->broadcast_buffers && (status = share_buffers(t)))
        return status;
    t->steps_done++;
    double done = MPI_Wtime();
    dp_trace_add(&t->trace, "optimizer", "optimizer", DP_LANE_COMPUTE, reduce_done, done);
    dp_trainer_timeline_step_end(t);
    for (int kind = 0; kind < DP_COLLECTIVE_KINDS; kind++) /* the step's own collectives, not checks' */
        t->sent[kind] += (double)(t->comm->traffic.bytes[kind] - before.bytes[kind]);
    dp_dist_times comm = dp_dist_take_times(&t->dist);
    /* The hooks' collective calls ran inside forward, backward and after the update, but are
     * communication, not computation. */
    local->split.forward -= comm.in_forward;
    local->split.backward -= comm.in_backward;
    local->split.exposed += comm.exposed;
    local->split.optimizer += done - reduce_done - comm.in_update;
    local->split.comm += comm.busy;
    local->split.hidden += comm.hidden;
    local->seconds += done - started;
    local->steps++;
    return 0;
}

/* The loss and correct count accumulated in totals since the last read, then zeroed. */
static void take_totals(trainer *t, double *totals, double *loss_sum, double *correct)
{
    double host[TOTALS];
    static const double zeros[TOTALS];
    t->be->download(host, totals, sizeof host);
    t->be->upload(totals, zeros, sizeof zeros);
    *loss_sum += host[TOTAL_LOSS];
    *correct += host[TOTAL_CORRECT];
}

/* Every rank evaluates its slice of the test set; sums over ranks give loss and accuracy. */
static int evaluate(trainer *t, dp_train_result *result)
{
    const dp_dataset *data = t->test;
    dp_range mine = dp_partition(data->count, t->comm->size, t->comm->rank);
    double sums[3] = {0.0, 0.0, (double)(mine.end - mine.begin)};
    dp_nn_context ctx = {.be = t->be, .training = 0};
    int status = 0;
    double started = MPI_Wtime();
    /* One span for the whole evaluation, not one per module and chunk. */
    dp_module_event_fn on_module = t->model.on_module;
    t->model.on_module = NULL;
    for (size_t begin = mine.begin; !status && begin < mine.end; begin += (size_t)t->max_rows) {
        size_t end = begin + (size_t)t->max_rows < mine.end ? begin + (size_t)t->max_rows : mine.end;
        const float *x, *targets, *out;
        const int32_t *labels;
        dp_trainer_test_rows(t, begin, &x, &labels, &targets);
        status = dp_model_forward(&t->model, &ctx, x, (int)(end - begin), &out);
        if (!status)
            dp_model_loss(&t->model, t->plan.loss, out, labels, targets, (int)(end - begin), NULL, t->eval_totals);
    }
    take_totals(t, t->eval_totals, &sums[0], &sums[1]);
    t->model.on_module = on_module;
    dp_dist_take_times(&t->dist); /* ZeRO-3's gathers here are not a training step's */
    dp_trace_add(&t->trace, "evaluate", "evaluate", DP_LANE_COMPUTE, started, MPI_Wtime());
    if (status || (status = dp_comm_sum_doubles(t->comm, sums, 3)))
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
    total->split.forward += part->split.forward;
    total->split.backward += part->split.backward;
    total->split.exposed += part->split.exposed;
    total->split.optimizer += part->split.optimizer;
    total->split.comm += part->split.comm;
    total->split.hidden += part->split.hidden;
    total->steps += part->steps;
}

/* The training losses stay on the backend until a line reports them: both open intervals get them. */
static void collect_losses(trainer *t, dp_interval *log_iv, dp_interval *epoch_iv)
{
    double loss = 0.0, correct = 0.0;
    take_totals(t, t->train_totals, &loss, &correct);
    log_iv->loss_sum += loss;
    log_iv->correct += correct;
    epoch_iv->loss_sum += loss;
    epoch_iv->correct += correct;
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
    if (!status && t->comm->rank == 0 && !t->o->quiet)
        dp_report_step(&t->plan, step, epoch, log_iv);
    if (!status)
        status = dp_trainer_metrics_line(t, step, epoch, log_iv);
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
    int status = dp_trainer_inject_corruption(t);
    if (!status && due(t->steps_done, o->check_replicas))
        status = dp_trainer_check_replicas(t);
    int last = t->steps_done == t->plan.total_steps;
    if (!status && o->checkpoint_dir[0] && (last || due(t->steps_done, o->checkpoint_every)))
        status = dp_trainer_checkpoint(t);
    dp_dist_take_times(&t->dist); /* the checks' and checkpoints' gathers are not a step's */
    return status;
}

static int run_steps(trainer *t, dp_train_result *result)
{
    dp_interval log_iv = {0}, epoch_iv = {0}, total = {0};
    /* --quiet silences the step lines, not --metrics (every rank sees both options alike). */
    long log_every = t->o->quiet && !t->o->metrics_path[0] ? 0 : t->o->log_every;
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
        int log_due = log_every && (step + 1) % log_every == 0;
        int epoch_ends = in_epoch + 1 == t->plan.steps_per_epoch || step + 1 == t->plan.total_steps;
        if (!status && (log_due || epoch_ends))
            collect_losses(t, &log_iv, &epoch_iv);
        if (!status && log_due)
            status = log_progress(t, step + 1, epoch, &log_iv);
        if (!status && epoch_ends)
            status = finish_epoch(t, epoch, &epoch_iv, result);
        if (status)
            return status;
    }
    result->steps = t->plan.total_steps - t->start_step;
    result->skipped_steps = t->skipped_steps;
    result->wall_seconds = total.seconds;
    result->split = total.split;
    int status = dp_comm_sum_doubles(t->comm, &total.samples, 1);
    result->samples = (long)total.samples;
    return status;
}

int dp_train(const dp_options *o, const dp_dataset *train, const dp_dataset *test,
             dp_comm *comm, dp_train_result *result, int keep_params)
{
    trainer t = {.o = o, .comm = comm, .train = train, .test = test};
    memset(result, 0, sizeof *result);
    /* --max-memory-mb: the allocation counter refuses what would pass it; peaks start here. */
    dp_memory_set_limit((size_t)(o->max_memory_mb * (double)(1 << 20)));
    int inputs = dp_train_model_inputs(o, train);
    int status = dp_train_check_data(o, train, "training", inputs);
    if (!status && test)
        status = dp_train_check_test_targets(o, train, test);
    if (!status && test)
        status = dp_train_check_data(o, test, "test", inputs);
    if (!status)
        status = dp_trainer_check_outputs(&t);
    if (!status)
        status = plan_training(&t);
    if (!status)
        status = dp_trainer_open_device(&t);
    if (!status && (status = allocate_buffers(&t))) /* nparams is known once the model is built */
        status = dp_explain_memory_failure(status, o, comm->size, t.max_rows, t.plan.nparams, inputs);
    if (!status && !(status = dp_watchdog_start(&t.watchdog, comm, o->timeout)))
        comm->watchdog = &t.watchdog;
    if (!status && comm->rank == 0 && !o->quiet)
        dp_report_banner(o, comm, &t.plan, &t.model, &t.opt, &t.dist, t.be->describe(), dp_trainer_gradient_path(&t),
                         train, test);
    if (!status)
        status = dp_trainer_start_state(&t);
    if (!status)
        status = run_steps(&t, result);
    if (!status)
        status = dp_trainer_write_timeline(&t);
    if (!status)
        status = dp_trainer_export(&t, keep_params ? &result->params : NULL);
    if (!status)
        status = dp_trainer_usage(&t, result);
    result->nparams = t.plan.nparams;
    if (!status && comm->rank == 0)
        dp_report_summary(&t.plan, result);
    if (!status)
        status = dp_trainer_close_metrics(&t, result);
    if (status)
        dp_trainer_drop_empty_checkpoint_dir(&t);
    comm->watchdog = NULL;
    dp_watchdog_stop(&t.watchdog);
    free_buffers(&t);
    dp_trainer_close_device(&t);
    dp_memory_set_limit(0);
    return status;
}
