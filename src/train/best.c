/* --keep-best and --early-stop: every evaluation judged by --best-metric against the best so
 * far; the K best evaluations' steps, whose checkpoints pruning never deletes (each checkpoint
 * lists them under DP_CHECKPOINT_BEST_KEY), and the evaluations since the best, after PATIENCE
 * of which the run stops. Every rank judges the same summed evaluation alike, and a checkpoint
 * carries the whole state, so a resumed or requeued run goes on judging where it stopped. */
#include "src/train/trainer.h"

#include "dp/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const metric_names[] = {[DP_BEST_TEST_LOSS] = "test_loss", [DP_BEST_TEST_ACC] = "test_acc"};

void dp_best_start(dp_best *b, const dp_options *o)
{
    memset(b, 0, sizeof *b);
    b->tracking = o->keep_best > 0 || o->early_stop > 0;
    b->metric = o->best_metric;
    b->step = -1;
}

const char *dp_best_metric_name(int metric)
{
    return metric_names[metric];
}

/* Whether a is better than b by the metric (a NaN is never better). */
static int better(int metric, double a, double b)
{
    return metric == DP_BEST_TEST_ACC ? a > b : a < b;
}

int dp_best_judge(dp_best *b, const dp_options *o, long step, double test_loss, double test_accuracy, int can_keep)
{
    if (!b->tracking)
        return 0;
    double value = b->metric == DP_BEST_TEST_ACC ? test_accuracy : test_loss;
    if (!b->have || better(b->metric, value, b->value)) {
        b->have = 1;
        b->value = value;
        b->step = step;
        b->since = 0;
    } else {
        b->since++;
    }
    if (b->count > o->keep_best) /* resumed with a smaller --keep-best: the best K of those kept */
        b->count = (int)o->keep_best;
    if (!o->keep_best || !can_keep || isnan(value))
        return 0;
    int at = b->count; /* after every entry at least as good: an earlier equal stays ahead */
    while (at > 0 && better(b->metric, value, b->values[at - 1]))
        at--;
    if (at >= o->keep_best)
        return 0;
    int count = b->count < o->keep_best ? b->count + 1 : (int)o->keep_best;
    for (int i = count - 1; i > at; i--) {
        b->steps[i] = b->steps[i - 1];
        b->values[i] = b->values[i - 1];
    }
    b->steps[at] = step;
    b->values[at] = value;
    b->count = count;
    return 1;
}

int dp_best_stops(const dp_best *b, const dp_options *o)
{
    return o->early_stop > 0 && b->have && b->since >= o->early_stop;
}

/* The kept steps as "S=V,S=V" (values exact: %.17g reads back the same double). */
static void list_text(const dp_best *b, char *text, size_t size)
{
    size_t used = 0;
    text[0] = '\0';
    for (int i = 0; i < b->count && used < size; i++)
        used += (size_t)snprintf(text + used, size - used, "%s%ld=%.17g", i ? "," : "", b->steps[i], b->values[i]);
}

void dp_best_record(const dp_best *b, char *metric, char *value, char *step, char *since, char *kept, size_t size)
{
    metric[0] = value[0] = step[0] = since[0] = kept[0] = '\0';
    if (!b->tracking)
        return;
    snprintf(metric, size, "%s", metric_names[b->metric]);
    snprintf(since, size, "%ld", b->since);
    if (b->have) {
        snprintf(value, size, "%.17g", b->value);
        snprintf(step, size, "%ld", b->step);
    }
    list_text(b, kept, size);
}

/* "S=V,S=V" into b's list; 0, or -1 when malformed. */
static int read_list(dp_best *b, const char *text)
{
    b->count = 0;
    for (const char *p = text; *p;) {
        char *end;
        long step = strtol(p, &end, 10);
        if (end == p || *end != '=' || step < 0 || b->count == DP_BEST_MAX)
            return -1;
        double value = strtod(end + 1, &end);
        if (*end && *end != ',')
            return -1;
        b->steps[b->count] = step;
        b->values[b->count++] = value;
        p = *end ? end + 1 : end;
    }
    return 0;
}

int dp_best_restore(dp_best *b, const char *path, const char *metric, const char *value, const char *step,
                    const char *since, const char *kept, char *note, size_t size)
{
    note[0] = '\0';
    if (!b->tracking || !metric[0])
        return 0;
    if (strcmp(metric, metric_names[b->metric]) != 0) {
        snprintf(note, size, "; the checkpoint judged by %s, this run by %s: its best evaluations start afresh", metric,
                 metric_names[b->metric]);
        return 0;
    }
    dp_best read = *b;
    char *end = NULL;
    read.since = strtol(since, &end, 10);
    int bad = !since[0] || *end || read.since < 0;
    read.have = value[0] != '\0';
    if (read.have) {
        read.value = strtod(value, &end);
        bad |= *end != '\0';
        read.step = strtol(step, &end, 10);
        bad |= !step[0] || *end || read.step < 0;
    }
    if (bad || read_list(&read, kept))
        return dp_fail(DP_EFORMAT, "--resume %s: its best evaluations (best_value '%s', best_step '%s', "
                       "evals_since_best '%s', best_steps '%s') cannot be read", path, value, step, since, kept);
    *b = read;
    return 0;
}
