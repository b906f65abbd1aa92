#include "config.h"

#include "dp/train.h"

#include "dp/error.h"
#include "dp/rng.h"
#include "src/train/limits.h"
#include "src/train/preempt.h"
#include "src/train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* What the strategy's row groups need of the steps' sizes (BatchNorm's two rows), checked
 * before training rather than in the middle of an epoch. The options were checked when parsed. */
static int check_row_groups(const trainer *t)
{
    const dp_options *o = t->o;
    size_t step_batch = t->plan.step_batch, n = t->train->count;
    const dp_model *model = dp_engine_model(t->engine);
    dp_strategy_run run = {.grad_dtype = DP_DTYPE_F32, .batchnorms = model->batchnorms,
                           .sync_batchnorms = model->sync_batchnorms,
                           .statistic_values = model->statistic_values, .micro_batch = (size_t)o->batch,
                           .world = t->comm->size, .step_batch = step_batch,
                           .last_step = o->drop_last || n % step_batch == 0 ? step_batch : n % step_batch,
                           .drop_last = o->drop_last, .model = o->model.text};
    return dp_strategy_check(&o->strategy, &run);
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
    if (o->warmup_steps && o->warmup_steps >= plan->total_steps)
        return dp_fail(DP_EINVAL, "--warmup-steps %ld: the run has %ld steps, so the warm-up would never end: give "
                       "fewer, or more --steps or --epochs", o->warmup_steps, plan->total_steps);
    t->lr = dp_options_lr_plan(o, plan->total_steps);
    plan->loss = dp_train_loss_for(o, t->train);
    /* Evaluation feeds the test set in chunks of the training slice: the activations training
     * holds anyway, as --memory-plan counts them. */
    t->max_rows = (int)dp_strategy_group_rows(&o->strategy, (size_t)o->batch, plan->step_batch, t->comm->size);
    return 0;
}

dp_engine_device dp_trainer_device(const dp_options *o)
{
    return (dp_engine_device){.device = o->device, .share_gpu = o->share_gpu, .precision = o->precision,
                              .cuda_aware = o->cuda_aware, .unfused = o->unfused,
                              .sums_on_host = dp_strategy_sums_on_host(&o->strategy)};
}

/* --progress-thread auto across hosts: TCP moves a message only inside MPI calls, and 1 ms
 * hid 86-119% of a 4 MiB all-reduce on a 1 Gbit/s link without slowing computation
 * (bench/PROGRESS.md); on one host, shared memory needs no thread. */
#define AUTO_PROGRESS_US 1000

static dp_engine_config engine_config(const trainer *t)
{
    const dp_options *o = t->o;
    return (dp_engine_config){
        .model = &o->model, .input = t->train->sample, .max_rows = t->max_rows, .loss = t->plan.loss,
        .optimizer = dp_options_optimizer(o),
        .strategy = &o->strategy,
        .overlap = !o->no_overlap, .bucket_mb = o->bucket_mb,
        .progress_us = o->progress_us >= 0 ? o->progress_us : t->comm->local_size < t->comm->size ? AUTO_PROGRESS_US : 0,
        .micro_batch = (size_t)o->batch, .seed = o->seed, .skip_nonfinite = o->skip_nonfinite,
        .accum = o->accum, .total_steps = t->plan.total_steps, .graph = o->cuda_graph, .traced = o->trace_path[0] != 0,
        .clip_grad_norm = o->clip_grad_norm,
    };
}

/* The engine (model, strategy, optimizer), then what the run keeps around it. */
static int allocate_buffers(trainer *t)
{
    dp_engine_config config = engine_config(t);
    int status = dp_engine_build(t->engine, &config);
    t->plan.nparams = dp_params_floats(&dp_engine_model(t->engine)->params);
    if (!status)
        status = check_row_groups(t);
    if (!status)
        status = dp_sampler_init(&t->sampler, t->train->count, dp_rng_mix(t->o->seed, 0x5a3));
    if (!status)
        status = dp_batches_open(&t->batches, dp_engine_backend(t->engine), t->train, t->test, &t->sampler, t->max_rows,
                                 dp_engine_model(t->engine)->outputs, t->o->data_on_device, dp_engine_row_slots(t->engine),
                                 (size_t)t->o->batch);
    if (!status) {
        t->eval_totals = dp_engine_new_totals(t->engine, "the evaluation totals");
        status = t->eval_totals ? 0 : DP_ENOMEM;
    }
    if (!status)
        status = dp_trainer_allocate_host_copies(t);
    if (!status)
        status = (t->interval_sums = dp_calloc(3 + (size_t)t->comm->size, sizeof(double), "the interval's sums")) ? 0
                                                                                                                : DP_ENOMEM;
    return status ? status : dp_trainer_open_timeline(t);
}

static void free_buffers(trainer *t)
{
    dp_trainer_close_metrics(t, NULL);
    dp_trainer_close_timeline(t);
    dp_host_state *h = &t->host;
    free(h->gathered);
    for (size_t i = 0; i < sizeof h->state / sizeof *h->state; i++)
        free(h->state[i]);
    free(h->rank_hashes);
    free(t->interval_sums);
    dp_batches_close(&t->batches);
    if (t->engine && dp_engine_backend(t->engine))
        dp_engine_backend(t->engine)->free(dp_engine_backend(t->engine), t->eval_totals);
    dp_sampler_free(&t->sampler);
}

/* --debug-straggle: the rank sleeps while reading its step's first rows, as a slow reader would. */
typedef struct straggling_rows {
    dp_row_source rows;
    long ms;
    int slept;
} straggling_rows;

static int gather_slowly(void *arg, size_t begin, size_t end, int slot, dp_rows *rows)
{
    straggling_rows *s = arg;
    if (!s->slept) {
        s->slept = 1;
        nanosleep(&(struct timespec){.tv_sec = s->ms / 1000, .tv_nsec = s->ms % 1000 * 1000000L}, NULL);
    }
    return s->rows.gather(s->rows.arg, begin, end, slot, rows);
}

/* One optimizer step of the engine (and an averaging when due), timed on the device when tracing there. */
static int train_step(trainer *t, long step_in_epoch, dp_step_stats *stats)
{
    dp_range step = dp_sampler_step_range(t->train->count, t->plan.step_batch, step_in_epoch);
    float lr = dp_lr_at(&t->lr, dp_engine_steps_done(t->engine));
    dp_row_source rows = dp_batches_source(&t->batches);
    straggling_rows slow = {.rows = rows, .ms = t->o->straggle_ms};
    if (t->o->straggle_rank == t->comm->rank)
        rows = (dp_row_source){.gather = gather_slowly, .arg = &slow};
    dp_trainer_timeline_step_begin(t);
    int status = dp_engine_step(t->engine, step, &rows, lr, stats);
    if (!status && stats->averaged)
        status = dp_trainer_metrics_average(t, dp_engine_steps_done(t->engine), stats->divergence);
    if (status)
        return status;
    dp_trainer_timeline_step_end(t);
    for (int kind = 0; kind < DP_COLLECTIVE_KINDS; kind++) /* the step's own collectives, not checks' */
        t->sent[kind] += stats->sent[kind];
    return 0;
}

/* Every rank evaluates its slice of the test set; sums over ranks give loss and accuracy. */
static int evaluate(trainer *t, dp_train_result *result)
{
    const dp_dataset *data = t->test;
    dp_engine *e = t->engine;
    dp_range mine = dp_partition(data->count, t->comm->size, t->comm->rank);
    double sums[3] = {0.0, 0.0, (double)(mine.end - mine.begin)};
    int status = 0;
    double started = MPI_Wtime();
    for (size_t begin = mine.begin; !status && begin < mine.end; begin += (size_t)t->max_rows) {
        size_t end = begin + (size_t)t->max_rows < mine.end ? begin + (size_t)t->max_rows : mine.end;
        dp_rows rows;
        status = dp_batches_read_test(&t->batches, begin, end, &rows);
        if (!status)
            status = dp_engine_evaluate(e, &rows, t->plan.loss, t->eval_totals);
    }
    dp_engine_take_totals(e, t->eval_totals, &sums[0], &sums[1]);
    dp_strategy_take_times(dp_engine_strategy(e)); /* ZeRO-3's gathers here are not a training step's */
    dp_trace_add(&t->timeline.trace, "evaluate", "evaluate", DP_LANE_COMPUTE, started, MPI_Wtime());
    if (status || (status = dp_comm_sum_doubles(t->comm, sums, 3)))
        return status;
    result->has_test = 1;
    result->test_loss = sums[0] / sums[2];
    result->test_accuracy = sums[1] / sums[2];
    return 0;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The ranks' compute per step over the interval, from every rank's busy time (sums[3 + r]). */
static void compare_ranks(trainer *t, dp_interval *iv)
{
    int world = t->comm->size;
    double *times = t->interval_sums + 3;
    iv->slowest_rank = 0;
    for (int r = 1; r < world; r++)
        if (times[r] > times[iv->slowest_rank])
            iv->slowest_rank = r;
    double steps = iv->steps ? (double)iv->steps : 1.0;
    iv->rank_ms_max = 1e3 * times[iv->slowest_rank] / steps;
    qsort(times, (size_t)world, sizeof *times, by_value); /* the slowest is known: the order may go */
    iv->rank_ms_min = 1e3 * times[0] / steps;
    iv->rank_ms_median = 1e3 * (world % 2 ? times[world / 2] : 0.5 * (times[world / 2 - 1] + times[world / 2])) / steps;
    iv->ranks = world;
}

/* Sums an interval's loss, sample and correct counts over ranks (rank 0's timings stay); with
 * ranks, every rank's busy time too, each at its own index of the same one all-reduce. */
static int reduce_interval(trainer *t, dp_interval *iv, int ranks)
{
    int world = ranks && t->comm->size > 1 ? t->comm->size : 0;
    double *sums = t->interval_sums;
    sums[0] = iv->loss_sum;
    sums[1] = iv->samples;
    sums[2] = iv->correct;
    for (int r = 0; r < world; r++) /* zeros elsewhere: the sum is every rank's time, exactly */
        sums[3 + r] = r == t->comm->rank ? iv->busy : 0.0;
    int status = dp_comm_sum_doubles(t->comm, sums, 3 + world);
    iv->loss_sum = sums[0];
    iv->samples = sums[1];
    iv->correct = sums[2];
    if (!status && world)
        compare_ranks(t, iv);
    return status;
}

/* A step's statistics into an interval. */
static void add_step(dp_interval *iv, const dp_step_stats *s)
{
    iv->samples += s->samples;
    iv->seconds += s->seconds;
    iv->busy += s->split.forward + s->split.backward + s->split.optimizer;
    iv->split.forward += s->split.forward;
    iv->split.backward += s->split.backward;
    iv->split.exposed += s->split.exposed;
    iv->split.optimizer += s->split.optimizer;
    iv->split.comm += s->split.comm;
    iv->split.hidden += s->split.hidden;
    iv->split.device_forward += s->split.device_forward;
    iv->split.device_backward += s->split.device_backward;
    iv->split.device_wait += s->split.device_wait;
    iv->split.device_optimizer += s->split.device_optimizer;
    iv->split.device_steps += s->split.device_steps;
    iv->steps++;
    iv->lr = s->lr;
    if (s->has_norm) {
        iv->has_norm = 1;
        iv->grad_norm = s->grad_norm;
        iv->clipped += s->clipped;
    }
    if (s->averaged && (!iv->averagings++ || s->divergence > iv->divergence))
        iv->divergence = s->divergence;
}

/* The training losses stay on the backend until a line reports them: both open intervals get them. */
static void collect_losses(trainer *t, dp_interval *log_iv, dp_interval *epoch_iv)
{
    double loss = 0.0, correct = 0.0;
    dp_engine_take_loss(t->engine, &loss, &correct);
    log_iv->loss_sum += loss;
    log_iv->correct += correct;
    epoch_iv->loss_sum += loss;
    epoch_iv->correct += correct;
}

/* After an evaluation at steps_done: the metrics, then --keep-best's and --early-stop's judgement;
 * *keep: a checkpoint of this step must be written (it enters the best). */
static int judge_evaluation(trainer *t, long epoch, const dp_train_result *eval, int *keep)
{
    long steps_done = dp_engine_steps_done(t->engine);
    int status = dp_trainer_metrics_eval(t, steps_done, epoch, eval);
    /* Local SGD's replicas are one model only at an averaging: only there is a checkpoint whole. */
    int can_keep = t->o->checkpoint_dir[0] && dp_strategy_replicas_agree(dp_engine_strategy(t->engine), steps_done);
    *keep = dp_best_judge(&t->best, t->o, steps_done, eval->test_loss, eval->test_accuracy, can_keep);
    return status;
}

static int finish_epoch(trainer *t, long epoch, dp_interval *epoch_iv, dp_train_result *result, int *keep)
{
    int status = reduce_interval(t, epoch_iv, 0);
    if (status)
        return status;
    result->train_loss = epoch_iv->loss_sum / epoch_iv->samples;
    if (t->test && (status = evaluate(t, result)))
        return status;
    if (t->comm->rank == 0 && !t->o->quiet)
        dp_report_epoch(&t->plan, epoch, t->o->steps > 0 ? 0 : t->o->epochs, epoch_iv, result);
    if (t->test)
        status = judge_evaluation(t, epoch, result, keep);
    memset(epoch_iv, 0, sizeof *epoch_iv);
    return status;
}

/* --eval-every between epochs' ends. */
static int evaluate_between(trainer *t, long epoch, dp_train_result *result, int *keep)
{
    int status = evaluate(t, result);
    if (!status && t->comm->rank == 0 && !t->o->quiet)
        dp_report_eval(&t->plan, dp_engine_steps_done(t->engine), epoch, result);
    return status ? status : judge_evaluation(t, epoch, result, keep);
}

static int log_progress(trainer *t, long step, long epoch, dp_interval *log_iv)
{
    int status = reduce_interval(t, log_iv, 1);
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

/* After an update: the testing corruption, the replica check, the agreement on preemption. */
static int after_step(trainer *t, int *preempted)
{
    const dp_options *o = t->o;
    long steps_done = dp_engine_steps_done(t->engine);
    int status = dp_trainer_inject_corruption(t);
    if (!status && due(steps_done, o->check_replicas))
        status = dp_trainer_check_replicas(t);
    int last = steps_done == t->plan.total_steps;
    if (!status)
        status = dp_preempt_poll(&t->preempt, preempted);
    /* A finished run needs no requeue; local SGD stops at its next averaging, with one model. */
    *preempted = *preempted && !last && dp_strategy_replicas_agree(dp_engine_strategy(t->engine), steps_done);
    return status;
}

/* The checkpoint, once the step's evaluation is judged (at the end, every --checkpoint-every
 * steps, when preempted or stopping early, and where an evaluation enters --keep-best's). */
static int checkpoint_if_due(trainer *t, int stopping, int keep)
{
    long steps_done = dp_engine_steps_done(t->engine);
    int status = 0;
    if (t->o->checkpoint_dir[0] &&
        (steps_done == t->plan.total_steps || stopping || keep || due(steps_done, t->o->checkpoint_every)))
        status = dp_trainer_checkpoint(t);
    dp_strategy_take_times(dp_engine_strategy(t->engine)); /* the checks' and checkpoints' gathers are not a step's */
    return status;
}

static int run_steps(trainer *t, dp_train_result *result)
{
    dp_interval log_iv = {0}, epoch_iv = {0}, total = {0};
    /* --quiet silences the step lines, not --metrics (every rank sees both options alike). */
    long log_every = t->o->quiet && !t->o->metrics_path[0] && !t->o->csv_path[0] && !t->o->tensorboard_dir[0]
                         ? 0
                         : t->o->log_every;
    for (long step = t->start_step; step < t->plan.total_steps; step++) {
        long epoch = step / t->plan.steps_per_epoch, in_epoch = step % t->plan.steps_per_epoch;
        if (t->sampler.epoch != epoch)
            dp_sampler_set_epoch(&t->sampler, epoch);
        dp_watchdog_set_step(&t->watchdog, step + 1);
        dp_step_stats stats;
        int preempted = 0, keep = 0;
        int status = train_step(t, in_epoch, &stats);
        if (!status)
            status = after_step(t, &preempted);
        add_step(&log_iv, &stats);
        add_step(&epoch_iv, &stats);
        add_step(&total, &stats);
        int log_due = log_every && (step + 1) % log_every == 0;
        int epoch_ends = in_epoch + 1 == t->plan.steps_per_epoch || step + 1 == t->plan.total_steps;
        if (!status && (log_due || epoch_ends))
            collect_losses(t, &log_iv, &epoch_iv);
        if (!status && log_due)
            status = log_progress(t, step + 1, epoch, &log_iv);
        if (!status && epoch_ends)
            status = finish_epoch(t, epoch, &epoch_iv, result, &keep);
        else if (!status && t->test && due(step + 1, t->o->eval_every))
            status = evaluate_between(t, epoch, result, &keep);
        /* Local SGD stops early only where its replicas are one model again, as when preempted. */
        int stopping = !status && step + 1 < t->plan.total_steps && dp_best_stops(&t->best, t->o) &&
                       dp_strategy_replicas_agree(dp_engine_strategy(t->engine), step + 1);
        if (!status)
            status = checkpoint_if_due(t, preempted || stopping, keep);
        if (status)
            return status;
        if (preempted) {
            result->preempted_signal = t->preempt.agreed;
            result->preempted_step = dp_engine_steps_done(t->engine);
            break;
        }
        if (stopping) {
            result->stopped_early = step + 1;
            break;
        }
    }
    int status = dp_preempt_complete(&t->preempt);
    if (status)
        return status;
    result->steps = dp_engine_steps_done(t->engine) - t->start_step;
    result->skipped_steps = dp_engine_skipped_steps(t->engine);
    result->clipped_steps = total.clipped;
    result->wall_seconds = total.seconds;
    result->split = total.split;
    status = dp_comm_sum_doubles(t->comm, &total.samples, 1);
    result->samples = (long)total.samples;
    return status;
}

/* The signals that preempt a run: only where a checkpoint can keep its work. */
static unsigned preempt_signals(const dp_options *o)
{
    return o->checkpoint_dir[0] ? o->preempt_signals : 0;
}

int dp_train_catch_preemption(const dp_options *o)
{
    return dp_preempt_catch(preempt_signals(o));
}

int dp_train(const dp_options *o, const dp_dataset *train, const dp_dataset *test,
             dp_comm *comm, dp_train_result *result, int keep_params)
{
    trainer t = {.o = o, .comm = comm, .train = train, .test = test};
    memset(result, 0, sizeof *result);
    /* Early, so a signal while the data loads still ends the run with a checkpoint. */
    int status = dp_preempt_start(&t.preempt, preempt_signals(o), comm);
    /* --max-memory-mb: the allocation counter refuses what would pass it; peaks start here. */
    dp_memory_set_limit_mb(o->max_memory_mb);
    int inputs = dp_train_model_inputs(o, train);
    if (!status)
        status = dp_train_check_data(o, train, "training", inputs, &train->sample);
    if (!status && test)
        status = dp_train_check_test_targets(o, train, test);
    if (!status && test)
        status = dp_train_check_data(o, test, "test", inputs, &train->sample);
    if (!status && test)
        status = dp_train_check_image_shapes(o, train, test);
    if (!status && !test && (o->eval_every || o->keep_best || o->early_stop))
        status = dp_fail(DP_EINVAL, "--%s needs a test set to evaluate: --test-data, or a --data with a test split",
                         o->eval_every ? "eval-every" : o->keep_best ? "keep-best" : "early-stop");
    if (!status)
        status = dp_trainer_check_outputs(&t);
    dp_best_start(&t.best, o);
    if (!status)
        status = plan_training(&t);
    if (!status) {
        dp_engine_device device = dp_trainer_device(o);
        status = dp_engine_open_device(&t.engine, comm, &device);
    }
    if (!status && (status = allocate_buffers(&t))) /* nparams is known once the model is built */
        status = dp_explain_memory_failure(status, o, comm->size, t.max_rows, t.plan.nparams, &train->sample);
    if (!status && !(status = dp_watchdog_start(&t.watchdog, comm, o->timeout)))
        comm->watchdog = &t.watchdog;
    if (!status && comm->rank == 0 && !o->quiet)
        dp_report_banner(o, comm, &t.plan, t.engine, train, test);
    if (!status && comm->rank == 0 && !o->quiet && !dp_engine_backend(t.engine)->host_memory)
        printf("cuda graph: %s\ndata on device: %s\n", dp_engine_graph_describe(t.engine), t.batches.placement);
    if (!status)
        status = dp_trainer_start_state(&t);
    if (!status)
        status = dp_trainer_open_outputs(&t);
    if (!status)
        status = run_steps(&t, result);
    if (!status)
        status = dp_trainer_write_timeline(&t);
    if (!status && !result->preempted_signal) /* --save is the finished model's */
        status = dp_trainer_export(&t, keep_params ? &result->params : NULL);
    if (!status)
        status = dp_trainer_usage(&t, result);
    result->nparams = t.plan.nparams;
    if (!status && comm->rank == 0)
        dp_report_summary(&t.plan, result);
    if (!status && comm->rank == 0 && result->preempted_signal)
        dp_report_preempted(o, &t.plan, result, dp_preempt_signal_name(result->preempted_signal));
    if (!status && comm->rank == 0 && result->stopped_early)
        printf("early stop: %ld evaluations without a better %s than %.6g (step %ld); stopped after step %ld of %ld%s%s\n",
               t.best.since, dp_best_metric_name(t.best.metric), t.best.value, t.best.step, result->stopped_early,
               t.plan.total_steps, o->checkpoint_dir[0] ? ", checkpointed in " : "", o->checkpoint_dir);
    if (!status)
        status = dp_trainer_close_metrics(&t, result);
    if (status)
        dp_trainer_drop_empty_checkpoint_dir(&t);
    dp_preempt_restore(&t.preempt);
    comm->watchdog = NULL;
    dp_watchdog_stop(&t.watchdog);
    free_buffers(&t);
    dp_engine_close(t.engine);
    dp_memory_set_limit_mb(0.0);
    return status;
}
