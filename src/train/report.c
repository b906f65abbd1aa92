#include "config.h"

#include "src/train/report.h"

#include <stdio.h>
#include <stdlib.h>

static double per_step_ms(double seconds, long steps)
{
    return steps ? 1e3 * seconds / (double)steps : 0.0;
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

void dp_report_banner(const dp_options *o, const dp_comm *comm, const dp_plan *plan,
                      const char *backend, const char *gradient_path,
                      const dp_dataset *train, const dp_dataset *test)
{
    size_t slice = ((size_t)o->batch + comm->size - 1) / comm->size;
    printf("dptrain %s: %d rank%s (%d on this node), all-reduce %s, backend %s\n",
           PACKAGE_VERSION, comm->size, comm->size == 1 ? "" : "s", comm->local_size,
           dp_comm_algorithm_name(comm), backend);
    printf("gradients: %s\n", gradient_path);
    report_master_address();
    printf("model: MLP %s, %zu parameters (%.2f MiB float32), loss %s\n", o->layers_spec,
           plan->nparams, (double)plan->nparams * 4.0 / (1 << 20),
           plan->loss == DP_LOSS_XENT ? "softmax cross-entropy" : "MSE");
    printf("data: train %s; test %s\n", train->description,
           test ? test->description : "none");
    printf("batch: %ld global = %zu%s per rank, x%ld accumulation = %zu samples per step; "
           "%ld steps/epoch%s, %ld steps\n",
           o->batch, slice, o->batch % comm->size ? " or fewer" : "", o->accum, plan->step_batch,
           plan->steps_per_epoch, o->drop_last ? " (drop last)" : "", plan->total_steps);
    printf("optimizer: SGD lr %g (%s) momentum %g weight decay %g, seed %llu\n", o->lr,
           o->lr_schedule == DP_LR_COSINE ? "cosine to 0" : "constant", o->momentum,
           o->weight_decay, (unsigned long long)o->seed);
    fflush(stdout);
}

void dp_report_step(const dp_plan *plan, long step, long epoch, const dp_interval *iv)
{
    printf("step %6ld/%ld  epoch %ld  loss %.4f  %.0f samples/s  %.2f ms/step (compute %.2f, comm %.2f)\n",
           step, plan->total_steps, epoch + 1, iv->loss_sum / iv->samples, iv->samples / iv->seconds,
           per_step_ms(iv->seconds, iv->steps), per_step_ms(iv->compute_seconds, iv->steps),
           per_step_ms(iv->comm_seconds, iv->steps));
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

void dp_report_summary(const dp_plan *plan, const dp_train_result *r)
{
    double step_ms = per_step_ms(r->wall_seconds, r->steps);
    printf("summary: %ld steps, %ld samples in %.2f s = %.0f samples/s; %.2f ms/step = compute %.2f (%.0f%%) + comm %.2f (%.0f%%)",
           r->steps, r->samples, r->wall_seconds, (double)r->samples / r->wall_seconds, step_ms,
           per_step_ms(r->compute_seconds, r->steps), 100.0 * r->compute_seconds / r->wall_seconds,
           per_step_ms(r->comm_seconds, r->steps), 100.0 * r->comm_seconds / r->wall_seconds);
    if (r->skipped_steps)
        printf("; %ld steps skipped for non-finite gradients", r->skipped_steps);
    if (r->has_test) {
        printf("; final test loss %.4f", r->test_loss);
        if (plan->loss == DP_LOSS_XENT)
            printf(", accuracy %.2f%%", 100.0 * r->test_accuracy);
    }
    printf("\n");
    fflush(stdout);
}
