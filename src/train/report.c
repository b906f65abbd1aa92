#include "config.h"

#include "src/train/report.h"

#include "src/train/preempt.h"

#include "dp/memory.h"
#include "dp/zero_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double per_step_ms(double seconds, long steps)
{
    return steps ? 1e3 * seconds / (double)steps : 0.0;
}

/* The shortest %g form that reads back as the same float32: 0.05 stays "0.05", and a
 * momentum of 0.99999988 is not shown as "1". */
const char *dp_float_text(float value, char text[24])
{
    for (int digits = 6; digits < 9; digits++) {
        snprintf(text, 24, "%.*g", digits, (double)value);
        if (strtof(text, NULL) == value)
            return text;
    }
    snprintf(text, 24, "%.9g", (double)value);
    return text;
}

/* Batch scripts export the rendezvous address; MPI does not need it, but the log should name
 * the job's first node and port as the launcher saw them. */
static void report_master_address(void)
{
    const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
    if (addr || port)
        printf("launch: MASTER_ADDR=%s MASTER_PORT=%s\n", addr ? addr : "(unset)",
               port ? port : "(unset)");
}

/* "SGD lr 0.05 (constant) momentum 0.9 weight decay 0" or AdamW's settings. */
static void describe_optimizer(const dp_options *o, const dp_optimizer *opt, char *text, size_t size)
{
    char lr[24], momentum[24], decay[24], beta1[24], beta2[24], eps[24];
    char schedule[160], warmup[96] = "", lr_min[24], factor[24];
    dp_float_text(o->lr_min, lr_min);
    if (o->lr_schedule == DP_LR_COSINE || o->lr_schedule == DP_LR_LINEAR)
        snprintf(schedule, sizeof schedule, "%s to %s", o->lr_schedule == DP_LR_COSINE ? "cosine" : "linear", lr_min);
    else if (o->lr_schedule == DP_LR_STEP)
        snprintf(schedule, sizeof schedule, "x %s every %ld steps", dp_float_text(o->lr_step_gamma, factor),
                 o->lr_step_every);
    else
        snprintf(schedule, sizeof schedule, "constant");
    if (o->warmup_steps)
        snprintf(warmup, sizeof warmup, "warm-up over %ld steps from %s x, then ", o->warmup_steps,
                 dp_float_text(o->warmup_start_factor, factor));
    int used = snprintf(text, size, "%s lr %s (%s%s)", dp_optimizer_title(opt), dp_float_text(o->lr, lr), warmup,
                        schedule);
    dp_float_text(o->weight_decay, decay);
    if (o->optimizer == DP_OPTIMIZER_SGD)
        snprintf(text + used, size - (size_t)used, " momentum %s weight decay %s",
                 dp_float_text(o->momentum, momentum), decay);
    else
        snprintf(text + used, size - (size_t)used, " betas (%s, %s) eps %s weight decay %s (%s)",
                 dp_float_text(o->beta1, beta1), dp_float_text(o->beta2, beta2), dp_float_text(o->eps, eps), decay,
                 o->decay_all ? "every parameter" : "weights only, not biases or norms");
}

static double mib(double bytes)
{
    return bytes / (1 << 20);
}

/* What this rank holds, from the allocation counter, and what each --zero stage would hold
 * (predicted for this model, optimizer, buckets and world): the documents' table, measured; this
 * run's row also predicts the strategy's own working buffers (--exact's accumulator). */
static void report_memory(const dp_options *o, const dp_model *model, const dp_optimizer *opt, const dp_strategy *dist,
                          int on_device)
{
    dp_memory_usage now = dp_memory_usage_now();
    printf("memory: rank 0 holds %.2f MiB of backend memory (allocation counter):", mib((double)now.total));
    for (int kind = 0; kind < DP_MEM_KINDS; kind++)
        if (now.bytes[kind])
            printf(" %s %.2f%s", dp_memory_kind_name((dp_memory_kind)kind), mib((double)now.bytes[kind]),
                   kind + 1 < DP_MEM_KINDS ? "," : "");
    if (o->max_memory_mb > 0)
        printf(" (limit %g MiB)", o->max_memory_mb);
    printf("\n");
    dp_zero_plan_input in;
    dp_strategy_plan_input(dist, &in);
    in.state_bytes = (double)dp_optimizer_state_count(opt) * sizeof(float);
    double measured = (double)(now.bytes[DP_MEM_PARAMETERS] + now.bytes[DP_MEM_GRADIENTS] + now.bytes[DP_MEM_OPTIMIZER]);
    printf("memory by stage, rank 0, MiB: parameters + gradients + optimizer state = total (+ working buffers)\n");
    int mine = dp_strategy_memory_stage(&o->strategy);
    dp_strategy_sizes sizes = {.params = in.params, .buffer_floats = dp_params_floats(&model->buffers),
                               .state_tensors = dp_optimizer_state_count(opt), .world = in.world, .on_device = on_device};
    double own = dp_strategy_working_bytes(&o->strategy, &sizes);
    for (int stage = 0; stage < DP_ZERO_STAGES; stage++) {
        dp_zero_plan p = dp_zero_predict(&in, stage);
        p.working += stage == mine ? own : 0.0;
        printf("  --zero %d: %9.2f + %9.2f + %9.2f = %9.2f (+ %.2f)", stage, mib(p.params), mib(p.grads),
               mib(p.optimizer), mib(dp_zero_plan_model_bytes(&p)), mib(p.working));
        if (stage == mine)
            printf("   this run, measured: %.2f (+ %.2f)", mib(measured), mib((double)now.bytes[DP_MEM_WORKING]));
        if (stage == mine && in.live_bytes > 0.0)
            printf(" under --zero-live-mb %.2f", mib(in.live_bytes));
        printf("\n");
    }
}

void dp_report_banner(const dp_options *o, const dp_comm *comm, const dp_plan *plan, dp_engine *engine,
                      const dp_dataset *train, const dp_dataset *test)
{
    const dp_model *model = dp_engine_model(engine);
    const dp_optimizer *opt = dp_engine_optimizer(engine);
    const dp_strategy *dist = dp_engine_strategy(engine);
    const char *backend = dp_engine_backend(engine)->describe(dp_engine_backend(engine));
    const char *gradient_path = dp_engine_gradient_path(engine);
    char strategy[512];
    dp_strategy_describe(dist, strategy, sizeof strategy);
    size_t slice = ((size_t)o->batch + comm->size - 1) / comm->size;
    const char *algorithm = dp_comm_algorithm_name(comm);
    const char *choice = dp_engine_algorithm_choice(engine);
    int hier = strcmp(algorithm, "hier") == 0;
    printf("dptrain %s: %d rank%s (%d on this node), all-reduce %s%s%s%s%s%s, backend %s\n",
           PACKAGE_VERSION, comm->size, comm->size == 1 ? "" : "s", comm->local_size, algorithm,
           hier ? " with inner " : "", hier ? dp_comm_hier_inner_name(comm) : "", *choice ? " (" : "", choice,
           *choice ? ")" : "", backend);
    printf("gradients: %s%s; %s\n", gradient_path,
           comm->grad_dtype == DP_DTYPE_F32 ? "" : ", reduced in bf16 (--grad-dtype)", strategy);
    report_master_address();
    char text[512];
    dp_model_describe(model, text, sizeof text);
    printf("model: %s, %zu parameters (%.2f MiB float32)", text, plan->nparams,
           (double)plan->nparams * 4.0 / (1 << 20));
    if (model->batchnorms)
        printf(", %d BatchNorm%s (%d sync)", model->batchnorms, model->batchnorms == 1 ? "" : "s",
               model->sync_batchnorms);
    printf(", loss %s\n", plan->loss == DP_LOSS_XENT ? "softmax cross-entropy" : "MSE");
    printf("data: train %s; test %s\n", train->description,
           test ? test->description : "none");
    printf("batch: %ld global = %zu%s per rank, x%ld accumulation = %zu samples per step; "
           "%ld steps/epoch%s, %ld steps\n",
           o->batch, slice, o->batch % comm->size ? " or fewer" : "", o->accum, plan->step_batch,
           plan->steps_per_epoch, o->drop_last ? " (drop last)" : "", plan->total_steps);
    describe_optimizer(o, opt, text, sizeof text);
    printf("optimizer: %s, seed %llu", text, (unsigned long long)o->seed);
    if (o->clip_grad_norm > 0.0f)
        printf(", gradients clipped to L2 norm %s", dp_float_text(o->clip_grad_norm, text));
    printf("\n");
    if (o->checkpoint_dir[0]) {
        dp_preempt_signal_names(o->preempt_signals, text, sizeof text);
        printf("checkpoints: %s, ", o->checkpoint_dir);
        if (o->checkpoint_every)
            printf("every %ld steps and ", o->checkpoint_every);
        printf("at the end; on %s: a checkpoint of the step all ranks stop after, then exit %d\n", text,
               DP_EXIT_PREEMPTED);
    }
    report_memory(o, model, opt, dist, !dp_engine_backend(engine)->host_memory);
    fflush(stdout);
}

/* "forward F, backward B, exposed comm E, optimizer O; comm C, H% hidden" in ms per step; on
 * a GPU first its own times from CUDA events, then the host's, each saying which it is. */
static void print_split(const dp_time_split *t, long steps)
{
    long timed = (long)t->device_steps; /* steps with more micro-batches than the clock's marks go untimed */
    if (timed)
        printf("device time from CUDA events: forward %.2f, backward %.2f, wait for comm %.2f, optimizer %.2f; host: ",
               per_step_ms(t->device_forward, timed), per_step_ms(t->device_backward, timed),
               per_step_ms(t->device_wait, timed), per_step_ms(t->device_optimizer, timed));
    printf("forward %.2f, backward %.2f, exposed comm %.2f, optimizer %.2f; comm %.2f, %.0f%% hidden",
           per_step_ms(t->forward, steps), per_step_ms(t->backward, steps), per_step_ms(t->exposed, steps),
           per_step_ms(t->optimizer, steps), per_step_ms(t->comm, steps),
           t->comm > 0.0 ? 100.0 * t->hidden / t->comm : 0.0);
}

void dp_report_step(const dp_plan *plan, long step, long epoch, const dp_interval *iv)
{
    char lr[24];
    printf("step %6ld/%ld  epoch %ld  loss %.4f  lr %s", step, plan->total_steps, epoch + 1,
           iv->loss_sum / iv->samples, dp_float_text(iv->lr, lr));
    if (iv->has_norm) /* the last step's, before clipping; how many of the interval's were clipped */
        printf("  grad norm %.4g (%ld of %ld clipped)", iv->grad_norm, iv->clipped, iv->steps);
    printf("  %.0f samples/s  %.2f ms/step (", iv->samples / iv->seconds, per_step_ms(iv->seconds, iv->steps));
    print_split(&iv->split, iv->steps);
    printf(")");
    if (iv->ranks) /* each rank's compute per step, waits for the others left out */
        printf("  slowest rank %d %+.0f%% (ranks' compute %.2f/%.2f/%.2f ms/step min/median/max)", iv->slowest_rank,
               iv->rank_ms_median > 0.0 ? 100.0 * (iv->rank_ms_max / iv->rank_ms_median - 1.0) : 0.0, iv->rank_ms_min,
               iv->rank_ms_median, iv->rank_ms_max);
    if (iv->averagings)
        printf("  divergence %.3e (max over %ld averaging%s)", iv->divergence, iv->averagings,
               iv->averagings == 1 ? "" : "s");
    printf("\n");
    fflush(stdout);
}

void dp_report_epoch(const dp_plan *plan, long epoch, long epochs, const dp_interval *train,
                     const dp_train_result *eval)
{
    printf("epoch %ld", epoch + 1);
    if (epochs)
        printf("/%ld", epochs);
    printf("  train loss %.4f", train->loss_sum / train->samples);
    if (plan->loss == DP_LOSS_XENT)
        printf(" acc %.2f%%", 100.0 * train->correct / train->samples);
    if (eval->has_test) {
        printf("  test loss %.4f", eval->test_loss);
        if (plan->loss == DP_LOSS_XENT)
            printf(" acc %.2f%%", 100.0 * eval->test_accuracy);
    }
    printf("  (%.1f s, %.0f samples/s)\n", train->seconds, train->samples / train->seconds);
    fflush(stdout);
}

void dp_report_eval(const dp_plan *plan, long step, long epoch, const dp_train_result *eval)
{
    printf("eval   %6ld/%ld  epoch %ld  test loss %.4f", step, plan->total_steps, epoch + 1, eval->test_loss);
    if (plan->loss == DP_LOSS_XENT)
        printf(" acc %.2f%%", 100.0 * eval->test_accuracy);
    printf("\n");
    fflush(stdout);
}

void dp_report_summary(const dp_plan *plan, const dp_train_result *r)
{
    if (r->steps == 0) {
        printf("summary: 0 steps: the run was already at its last step (%ld of %ld); nothing "
               "trained, the parameters are the checkpoint's\n", plan->total_steps, plan->total_steps);
        fflush(stdout);
        return;
    }
    double step_ms = per_step_ms(r->wall_seconds, r->steps);
    printf("summary: %ld steps, %ld samples in %.2f s = %.0f samples/s; %.2f ms/step = ", r->steps, r->samples,
           r->wall_seconds, (double)r->samples / r->wall_seconds, step_ms);
    print_split(&r->split, r->steps);
    if (r->skipped_steps)
        printf("; %ld steps skipped for non-finite gradients", r->skipped_steps);
    if (r->clipped_steps)
        printf("; %ld steps' gradients clipped", r->clipped_steps);
    if (r->has_test) {
        printf("; final test loss %.4f", r->test_loss);
        if (plan->loss == DP_LOSS_XENT)
            printf(", accuracy %.2f%%", 100.0 * r->test_accuracy);
    }
    printf("\n");
    static const char *const kinds[DP_COLLECTIVE_KINDS] = {"all-reduce", "reduce-scatter", "all-gather"};
    double sent = 0.0;
    for (int kind = 0; kind < DP_COLLECTIVE_KINDS; kind++)
        sent += r->sent[kind];
    /* The ZeRO paper's unit: a ring all-reduce sends 2 x Psi (W-1)/W elements per rank, "2 Psi". */
    double psi = (double)r->nparams * sizeof(float) * (r->world - 1) / (r->world ? r->world : 1);
    printf("memory and communication (--strategy %s): peak %.2f MiB of backend memory per rank (rank %d's; rank 0's "
           "peaks: parameters %.2f, gradients %.2f, optimizer state %.2f, working buffers %.2f); sent %.3f MiB "
           "per step per rank (mean over ranks", r->strategy, mib(r->memory_peak), r->memory_peak_rank,
           mib((double)r->memory.peak[DP_MEM_PARAMETERS]), mib((double)r->memory.peak[DP_MEM_GRADIENTS]),
           mib((double)r->memory.peak[DP_MEM_OPTIMIZER]), mib((double)r->memory.peak[DP_MEM_WORKING]),
           mib(sent / (double)r->steps));
    const char *separator = ": ";
    for (int kind = 0; kind < DP_COLLECTIVE_KINDS; kind++)
        if (r->sent[kind] > 0.0) {
            printf("%s%s %.3f", separator, kinds[kind], mib(r->sent[kind] / (double)r->steps));
            separator = ", ";
        }
    if (psi > 0.0)
        printf("; %.2f Psi in the ZeRO paper's units, where DDP's all-reduce is 2 Psi", sent / (double)r->steps / psi);
    printf(")\n");
    fflush(stdout);
}

void dp_report_preempted(const dp_options *o, const dp_plan *plan, const dp_train_result *r, const char *signal)
{
    printf("preempted: %s reached a rank; every rank stopped after step %ld of %ld and its checkpoint is in %s: "
           "exit %d, continue with --resume %s (or --resume auto)\n", signal, r->preempted_step, plan->total_steps,
           o->checkpoint_dir, DP_EXIT_PREEMPTED, o->checkpoint_dir);
    fflush(stdout);
}
