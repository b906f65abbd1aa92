/* --metrics FILE: one JSON object per progress line, for plotting (scripts/plot-metrics.sh).
 * Rank 0 writes it as training goes, so a long run can be watched; the last line, a summary
 * object, says the run completed. */
#include "src/train/trainer.h"

#include "dp/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int dp_trainer_open_metrics(trainer *t)
{
    const char *path = t->o->metrics_path;
    if (!path[0] || t->comm->rank != 0)
        return 0;
    t->metrics = fopen(path, "w");
    return t->metrics ? 0 : dp_fail(DP_EIO, "--metrics %s: cannot write: %s", path, strerror(errno));
}

/* ms per step of a phase. */
static double ms(double seconds, long steps)
{
    return steps ? 1e3 * seconds / (double)steps : 0.0;
}

static void write_split(FILE *f, const dp_time_split *s, long steps)
{
    fprintf(f, "\"forward_ms\":%.4f,\"backward_ms\":%.4f,\"exposed_comm_ms\":%.4f,\"optimizer_ms\":%.4f,"
               "\"comm_ms\":%.4f,\"hidden_comm_ms\":%.4f",
            ms(s->forward, steps), ms(s->backward, steps), ms(s->exposed, steps), ms(s->optimizer, steps),
            ms(s->comm, steps), ms(s->hidden, steps));
}

void dp_trainer_metrics_line(trainer *t, long step, long epoch, const dp_interval *iv)
{
    if (!t->metrics)
        return;
    fprintf(t->metrics, "{\"step\":%ld,\"epoch\":%ld,\"loss\":%.6g,\"samples_per_s\":%.1f,\"ms_per_step\":%.4f,", step,
            epoch + 1, iv->loss_sum / iv->samples, iv->samples / iv->seconds, ms(iv->seconds, iv->steps));
    write_split(t->metrics, &iv->split, iv->steps);
    fprintf(t->metrics, ",\"lr\":%.6g}\n", dp_lr_at(t->o->lr_schedule, t->o->lr, step, t->plan.total_steps));
    fflush(t->metrics);
}

int dp_trainer_close_metrics(trainer *t, const dp_train_result *r)
{
    if (!t->metrics)
        return 0;
    if (r) {
        fprintf(t->metrics, "{\"summary\":{\"steps\":%ld,\"samples\":%ld,\"seconds\":%.4f,", r->steps, r->samples,
                r->wall_seconds);
        write_split(t->metrics, &r->split, r->steps);
        if (r->has_test)
            fprintf(t->metrics, ",\"test_loss\":%.6g,\"test_accuracy\":%.6g", r->test_loss, r->test_accuracy);
        fprintf(t->metrics, "}}\n");
    }
    int failed = ferror(t->metrics) | fclose(t->metrics);
    t->metrics = NULL;
    return failed && r ? dp_fail(DP_EIO, "--metrics %s: write failed", t->o->metrics_path) : 0;
}
