/* --metrics FILE: one JSON object per progress line, for plotting (scripts/plot-metrics.sh).
 * Rank 0 writes it as training goes, so a long run can be watched; the last line, a summary
 * object, says the run completed. */
#include "src/train/trainer.h"

#include "dp/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Opened at the first line, not at start-up: a run that fails before its first logged step
 * leaves an earlier run's file as it was (the path itself was checked at start-up). */
static int open_metrics(trainer *t)
{
    const char *path = t->o->metrics_path;
    if (t->metrics || !path[0] || t->comm->rank != 0)
        return 0;
    t->metrics = fopen(path, "w");
    return t->metrics ? 0 : dp_fail(DP_EIO, "--metrics %s: cannot write: %s", path, strerror(errno));
}

/* A JSON number, or null where C would print nan or inf (not JSON). */
static void number(FILE *f, const char *key, const char *format, double value)
{
    fprintf(f, "\"%s\":", key);
    if (isfinite(value))
        fprintf(f, format, value);
    else
        fputs("null", f);
}

/* ms per step of a phase. */
static double ms(double seconds, long steps)
{
    return steps ? 1e3 * seconds / (double)steps : 0.0;
}

static void write_split(FILE *f, const dp_time_split *s, long steps)
{
    static const char *const keys[] = {"forward_ms", "backward_ms", "exposed_comm_ms", "optimizer_ms", "comm_ms",
                                       "hidden_comm_ms"};
    const double values[] = {s->forward, s->backward, s->exposed, s->optimizer, s->comm, s->hidden};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        fputs(i ? "," : "", f);
        number(f, keys[i], "%.4f", ms(values[i], steps));
    }
    /* On a GPU: its own time per phase from CUDA events (the step line's "device time"). */
    static const char *const device_keys[] = {"device_forward_ms", "device_backward_ms", "device_wait_ms",
                                              "device_optimizer_ms"};
    const double device[] = {s->device_forward, s->device_backward, s->device_wait, s->device_optimizer};
    if (s->device_steps > 0.0) /* the steps the clock timed */
        for (size_t i = 0; i < sizeof device_keys / sizeof *device_keys; i++) {
            fputc(',', f);
            number(f, device_keys[i], "%.4f", ms(device[i], (long)s->device_steps));
        }
}

int dp_trainer_metrics_line(trainer *t, long step, long epoch, const dp_interval *iv)
{
    int status = open_metrics(t);
    if (status || !t->metrics)
        return status;
    FILE *f = t->metrics;
    fprintf(f, "{\"step\":%ld,\"epoch\":%ld,", step, epoch + 1);
    number(f, "loss", "%.6g", iv->loss_sum / iv->samples);
    fputc(',', f);
    number(f, "samples_per_s", "%.1f", iv->samples / iv->seconds);
    fputc(',', f);
    number(f, "ms_per_step", "%.4f", ms(iv->seconds, iv->steps));
    fputc(',', f);
    write_split(f, &iv->split, iv->steps);
    fputc(',', f);
    number(f, "lr", "%.6g", iv->lr); /* the rate the interval's last step used */
    if (iv->averagings) {
        fprintf(f, ",\"averagings\":%ld,", iv->averagings);
        number(f, "divergence", "%.6g", iv->divergence);
    }
    fputs("}\n", f);
    fflush(f);
    return 0;
}

int dp_trainer_metrics_average(trainer *t, long step, double divergence)
{
    int status = open_metrics(t);
    if (status || !t->metrics)
        return status;
    fprintf(t->metrics, "{\"average\":{\"step\":%ld,", step);
    number(t->metrics, "divergence", "%.9g", divergence);
    fputs("}}\n", t->metrics);
    fflush(t->metrics);
    return 0;
}

int dp_trainer_close_metrics(trainer *t, const dp_train_result *r)
{
    int status = r ? open_metrics(t) : 0; /* a run that logged no step still ends with its summary */
    if (status || !t->metrics)
        return status;
    if (r) {
        double sent = 0.0;
        for (int kind = 0; kind < DP_COLLECTIVE_KINDS; kind++)
            sent += r->sent[kind];
        fprintf(t->metrics, "{\"summary\":{\"steps\":%ld,\"samples\":%ld,\"seconds\":%.4f,\"sent_bytes\":%.0f,", r->steps,
                r->samples, r->wall_seconds, sent);
        write_split(t->metrics, &r->split, r->steps);
        if (r->has_test) {
            fputc(',', t->metrics);
            number(t->metrics, "test_loss", "%.6g", r->test_loss);
            fputc(',', t->metrics);
            number(t->metrics, "test_accuracy", "%.6g", r->test_accuracy);
        }
        fprintf(t->metrics, "}}\n");
    }
    int failed = ferror(t->metrics) | fclose(t->metrics);
    t->metrics = NULL;
    return failed && r ? dp_fail(DP_EIO, "--metrics %s: write failed", t->o->metrics_path) : 0;
}
