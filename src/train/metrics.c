/* --metrics FILE: one JSON object per progress line, for plotting (scripts/plot-metrics.sh).
 * Rank 0 writes it as training goes, so a long run can be watched; the last line, a summary
 * object, says the run completed. The same values go to --csv as rows and to --tensorboard as
 * scalars, per progress line and per evaluation. */
#include "src/train/trainer.h"

#include "dp/error.h"
#include "dp/memory.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

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

/* --csv's columns: a progress line fills the first ones, an evaluation step, epoch and the last two. */
static const char *const csv_columns[] = {"step", "epoch", "loss", "samples_per_s", "ms_per_step", "forward_ms",
                                          "backward_ms", "exposed_comm_ms", "optimizer_ms", "comm_ms",
                                          "hidden_comm_ms", "lr", "grad_norm", "clipped_steps", "rank_step_ms_min",
                                          "rank_step_ms_median", "rank_step_ms_max", "slowest_rank", "memory_mib",
                                          "test_loss", "test_accuracy"};
enum { CSV_COLUMNS = sizeof csv_columns / sizeof *csv_columns, CSV_TEST_LOSS = CSV_COLUMNS - 2 };

/* Opened at its first row with a header, as --metrics is. */
static int open_csv(trainer *t)
{
    const char *path = t->o->csv_path;
    if (t->csv || !path[0] || t->comm->rank != 0)
        return 0;
    t->csv = fopen(path, "w");
    if (!t->csv)
        return dp_fail(DP_EIO, "--csv %s: cannot write: %s", path, strerror(errno));
    for (int i = 0; i < CSV_COLUMNS; i++)
        fprintf(t->csv, "%s%s", i ? "," : "", csv_columns[i]);
    fputc('\n', t->csv);
    return 0;
}

/* One row: cells[i] for column i, NAN for an empty cell. */
static int csv_row(trainer *t, const double *cells)
{
    int status = open_csv(t);
    if (status || !t->csv)
        return status;
    for (int i = 0; i < CSV_COLUMNS; i++) {
        fputs(i ? "," : "", t->csv);
        if (isfinite(cells[i]))
            fprintf(t->csv, "%.9g", cells[i]);
    }
    fputc('\n', t->csv);
    return fflush(t->csv) ? dp_fail(DP_EIO, "--csv %s: write failed", t->o->csv_path) : 0;
}

static double wall_clock(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

int dp_trainer_open_outputs(trainer *t)
{
    if (!t->o->tensorboard_dir[0] || t->comm->rank != 0)
        return 0;
    return dp_tensorboard_open(&t->tensorboard, t->o->tensorboard_dir, wall_clock());
}

/* The interval's values for --csv and --tensorboard. */
static int progress_rows(trainer *t, long step, long epoch, const dp_interval *iv)
{
    const dp_time_split *s = &iv->split;
    double memory = (double)dp_memory_usage_now().total / (1 << 20);
    double cells[CSV_COLUMNS] = {(double)step, (double)(epoch + 1), iv->loss_sum / iv->samples, iv->samples / iv->seconds,
                                 ms(iv->seconds, iv->steps), ms(s->forward, iv->steps), ms(s->backward, iv->steps),
                                 ms(s->exposed, iv->steps), ms(s->optimizer, iv->steps), ms(s->comm, iv->steps),
                                 ms(s->hidden, iv->steps), iv->lr, iv->has_norm ? iv->grad_norm : NAN,
                                 iv->has_norm ? (double)iv->clipped : NAN, iv->ranks ? iv->rank_ms_min : NAN,
                                 iv->ranks ? iv->rank_ms_median : NAN, iv->ranks ? iv->rank_ms_max : NAN,
                                 iv->ranks ? (double)iv->slowest_rank : NAN, memory, NAN, NAN};
    int status = csv_row(t, cells);
    dp_tensorboard *tb = &t->tensorboard;
    if (status || !tb->file)
        return status;
    static const char *const tags[] = {"train/loss", "train/samples_per_s", "time/ms_per_step", "time/forward_ms",
                                       "time/backward_ms", "time/exposed_comm_ms", "time/optimizer_ms",
                                       "time/comm_ms", "time/hidden_comm_ms", "train/lr"};
    for (int i = 0; i < 10; i++)
        dp_tensorboard_add(tb, tags[i], cells[2 + i]);
    if (iv->has_norm)
        dp_tensorboard_add(tb, "train/grad_norm", iv->grad_norm);
    if (iv->ranks) {
        dp_tensorboard_add(tb, "ranks/step_ms_min", iv->rank_ms_min);
        dp_tensorboard_add(tb, "ranks/step_ms_median", iv->rank_ms_median);
        dp_tensorboard_add(tb, "ranks/step_ms_max", iv->rank_ms_max);
        dp_tensorboard_add(tb, "ranks/slowest_rank", iv->slowest_rank);
    }
    dp_tensorboard_add(tb, "memory/backend_mib", memory);
    return dp_tensorboard_write(tb, step, wall_clock());
}

int dp_trainer_metrics_line(trainer *t, long step, long epoch, const dp_interval *iv)
{
    int status = open_metrics(t);
    if (!status && t->comm->rank == 0)
        status = progress_rows(t, step, epoch, iv);
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
    if (iv->has_norm) { /* the last step's norm, before clipping */
        fputc(',', f);
        number(f, "grad_norm", "%.9g", iv->grad_norm);
        fprintf(f, ",\"clipped_steps\":%ld", iv->clipped);
    }
    if (iv->ranks) { /* each rank's compute time per step (no waits), over the ranks */
        fputc(',', f);
        number(f, "rank_step_ms_min", "%.4f", iv->rank_ms_min);
        fputc(',', f);
        number(f, "rank_step_ms_median", "%.4f", iv->rank_ms_median);
        fputc(',', f);
        number(f, "rank_step_ms_max", "%.4f", iv->rank_ms_max);
        fprintf(f, ",\"slowest_rank\":%d", iv->slowest_rank);
    }
    fputs("}\n", f);
    fflush(f);
    return 0;
}

int dp_trainer_metrics_eval(trainer *t, long step, long epoch, const dp_train_result *eval)
{
    if (t->comm->rank != 0 || !eval->has_test)
        return 0;
    double cells[CSV_COLUMNS];
    for (int i = 0; i < CSV_COLUMNS; i++)
        cells[i] = NAN;
    cells[0] = (double)step;
    cells[1] = (double)(epoch + 1);
    cells[CSV_TEST_LOSS] = eval->test_loss;
    cells[CSV_TEST_LOSS + 1] = eval->test_accuracy;
    int status = t->o->csv_path[0] ? csv_row(t, cells) : 0;
    if (!status && t->tensorboard.file) {
        dp_tensorboard_add(&t->tensorboard, "test/loss", eval->test_loss);
        dp_tensorboard_add(&t->tensorboard, "test/accuracy", eval->test_accuracy);
        status = dp_tensorboard_write(&t->tensorboard, step, wall_clock());
    }
    /* --metrics keeps its lines as they were unless --eval-every asks for evaluations between epochs. */
    if (!status && t->o->eval_every && (status = open_metrics(t)) == 0 && t->metrics) {
        fprintf(t->metrics, "{\"eval\":{\"step\":%ld,\"epoch\":%ld,", step, epoch + 1);
        number(t->metrics, "test_loss", "%.9g", eval->test_loss);
        fputc(',', t->metrics);
        number(t->metrics, "test_accuracy", "%.9g", eval->test_accuracy);
        fputs("}}\n", t->metrics);
        fflush(t->metrics);
    }
    return status;
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
    int csv_failed = t->csv && (ferror(t->csv) | fclose(t->csv));
    t->csv = NULL;
    if (!status && csv_failed && r)
        status = dp_fail(DP_EIO, "--csv %s: write failed", t->o->csv_path);
    int tensorboard = dp_tensorboard_close(&t->tensorboard);
    if (!status && r)
        status = tensorboard;
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
        if (r->stopped_early)
            fprintf(t->metrics, ",\"stopped_early_after_step\":%ld", r->stopped_early);
        fprintf(t->metrics, "}}\n");
    }
    int failed = ferror(t->metrics) | fclose(t->metrics);
    t->metrics = NULL;
    return failed && r ? dp_fail(DP_EIO, "--metrics %s: write failed", t->o->metrics_path) : 0;
}
