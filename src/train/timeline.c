/* What the trainer shows of its time: the --trace timeline (spans of modules, collectives,
 * gathers and the optimizer on every rank; on a GPU also the modules' passes timed by the
 * device's events), as the engine's observer: it watches the step and drives nothing. */
#include "src/train/trainer.h"

#include "dp/error.h"

#include <stdio.h>
#include <stdlib.h>

/* At most this many spans per rank are kept (about 80 bytes each); later ones are dropped. */
#define MAX_SPANS ((size_t)1 << 20)

static const char *const pass_names[2] = {"forward", "backward"};

/* The device's view of a module's pass: a timer slot at its start and at its end. */
static void time_on_device(dp_timeline *t, int module, int begin, const char *name, const char *category)
{
    dp_device_spans *d = &t->device_spans;
    if (!d->pending || !d->in_step)
        return;
    int mark = t->be->timer_mark(t->be);
    if (begin) {
        d->module_mark[module] = mark;
    } else if (d->count < d->capacity) {
        dp_device_span *span = &d->pending[d->count++];
        snprintf(span->name, sizeof span->name, "%s", name);
        span->category = category;
        span->begin = d->module_mark[module];
        span->end = mark;
    }
}

/* Around each module's pass: its span. */
static void on_pass(void *arg, int module, int backward, int begin)
{
    dp_timeline *t = arg;
    double now = MPI_Wtime();
    char name[DP_TRACE_NAME_MAX] = "", module_name[32];
    if (!begin) {
        dp_model_module_name(t->model, module, module_name, sizeof module_name);
        snprintf(name, sizeof name, "%s %s", pass_names[backward], module_name);
    }
    time_on_device(t, module, begin, name, pass_names[backward]);
    if (begin) {
        t->module_began[module] = now;
        return;
    }
    dp_trace_add(&t->trace, name, pass_names[backward], DP_LANE_COMPUTE, t->module_began[module], now);
}

static void on_span(void *arg, const char *name, const char *category, double begin, double end)
{
    dp_timeline *t = arg;
    dp_trace_add(&t->trace, name, category, DP_LANE_COMPUTE, begin, end);
}

static void on_collective(void *arg, const char *label, double begin, double end)
{
    dp_timeline *t = arg;
    dp_trace_add(&t->trace, label, "collective", DP_LANE_COMM, begin, end);
}

int dp_trainer_open_timeline(trainer *t)
{
    if (!t->o->trace_path[0])
        return 0;
    dp_timeline *tl = &t->timeline;
    dp_engine *e = t->engine;
    tl->model = dp_engine_model(e);
    tl->be = dp_engine_backend(e);
    size_t modules = (size_t)tl->model->count;
    tl->module_began = dp_calloc(modules + 1, sizeof *tl->module_began, "module start times");
    if (!tl->module_began)
        return DP_ENOMEM;
    /* Per step: every module's two passes per row group (micro-batch or shard), a gather and a
     * shard's add each, the strategy's collectives, the update, an evaluation at most. */
    size_t groups = dp_engine_row_groups_per_step(e);
    size_t per_step = groups * (2 * modules + 2) + dp_strategy_spans_per_step(dp_engine_strategy(e), groups) + 4;
    size_t passes = groups * 2 * modules; /* the device's view of each pass, on a GPU */
    if (tl->be->timer_mark) { /* passes beyond the timer's slots go untimed */
        dp_device_spans *d = &tl->device_spans;
        d->pending = dp_calloc(passes, sizeof *d->pending, "the device's spans of a step");
        d->module_mark = dp_calloc(modules + 1, sizeof *d->module_mark, "the device's pass marks");
        if (!d->pending || !d->module_mark)
            return DP_ENOMEM;
        d->capacity = passes;
        per_step += passes;
    }
    size_t steps = (size_t)(t->plan.total_steps > 0 ? t->plan.total_steps : 1);
    size_t capacity = steps < MAX_SPANS / per_step ? steps * per_step : MAX_SPANS;
    dp_engine_set_observer(e, &(dp_engine_observer){.pass = on_pass, .span = on_span, .arg = tl});
    dp_strategy_observe_spans(dp_engine_strategy(e), on_collective, tl);
    return dp_trace_open(&tl->trace, t->comm, capacity);
}

void dp_trainer_timeline_step_begin(trainer *run)
{
    dp_timeline *t = &run->timeline;
    dp_device_spans *d = &t->device_spans;
    if (!d->pending)
        return;
    /* With the device idle, its timestamp now is the host's now. */
    t->be->synchronize(t->be);
    t->be->timer_reset(t->be);
    d->anchor = t->be->timer_mark(t->be);
    d->anchor_time = MPI_Wtime();
    d->count = 0;
    d->in_step = 1;
}

void dp_trainer_timeline_step_end(trainer *run)
{
    dp_timeline *t = &run->timeline;
    dp_device_spans *d = &t->device_spans;
    if (!d->pending)
        return;
    t->be->synchronize(t->be);
    for (size_t i = 0; i < d->count; i++) {
        const dp_device_span *s = &d->pending[i];
        if (s->begin >= 0 && s->end >= 0)
            dp_trace_add(&t->trace, s->name, s->category, DP_LANE_DEVICE,
                         d->anchor_time + t->be->timer_seconds(t->be, d->anchor, s->begin),
                         d->anchor_time + t->be->timer_seconds(t->be, d->anchor, s->end));
    }
    d->in_step = 0;
}

int dp_trainer_write_timeline(trainer *t)
{
    return t->o->trace_path[0] ? dp_trace_write(&t->timeline.trace, t->comm, t->o->trace_path) : 0;
}

void dp_trainer_close_timeline(trainer *t)
{
    dp_timeline *tl = &t->timeline;
    dp_trace_close(&tl->trace);
    free(tl->module_began);
    free(tl->device_spans.pending);
    free(tl->device_spans.module_mark);
    *tl = (dp_timeline){0};
}
