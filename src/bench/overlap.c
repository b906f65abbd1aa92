#include "dp/overlap_bench.h"

#include "dp/error.h"

#include <stdlib.h>
#include <string.h>

const dp_progress_way dp_progress_ways[DP_PROGRESS_WAYS] = {
    {"none: start, compute, wait", DP_PROGRESS_NONE, 0},
    {"test after each piece", DP_PROGRESS_TEST, 0},
    {"thread, every 1 ms", DP_PROGRESS_THREAD, 1000},
    {"thread, every 50 us", DP_PROGRESS_THREAD, 50},
    {"thread, spinning", DP_PROGRESS_THREAD, 0},
};

enum { CALIBRATION_RUNS = 9 };

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int n)
{
    qsort(values, (size_t)n, sizeof *values, compare_doubles);
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

/* The slowest rank's time, every rank starting together. */
static int slowest(dp_comm *c, double mine, double *seconds)
{
    DP_MPI_CHECK(MPI_Allreduce(&mine, seconds, 1, MPI_DOUBLE, MPI_MAX, c->comm));
    return 0;
}

static int run_pieces(const dp_overlap_setup *s, int pieces, dp_comm *progress_each)
{
    for (int i = 0; i < pieces; i++) {
        s->compute_piece(s->context);
        int status = progress_each ? dp_comm_progress(progress_each) : 0;
        if (status)
            return status;
    }
    return 0;
}

/* One step of a way (way < 0: the all-reduce alone; pieces alone when buf is NULL). */
static int step(dp_comm *c, const dp_overlap_setup *s, float *buf, int pieces, int way, double *seconds)
{
    DP_MPI_CHECK(MPI_Barrier(c->comm));
    double started = MPI_Wtime();
    dp_request *q = NULL;
    int status = buf ? dp_comm_start_allreduce(c, buf, s->count, "the benchmark buffer", &q) : 0;
    const dp_progress_way *w = way >= 0 ? &dp_progress_ways[way] : NULL;
    int threaded = !status && q && w && w->kind == DP_PROGRESS_THREAD;
    if (threaded)
        status = dp_comm_start_progress_thread(c, w->interval_us);
    if (!status && w)
        status = run_pieces(s, pieces, w->kind == DP_PROGRESS_TEST ? c : NULL);
    if (threaded)
        dp_comm_stop_progress_thread(c);
    if (!status && q)
        status = dp_request_wait(&q);
    return status ? status : slowest(c, MPI_Wtime() - started, seconds);
}

/* Medians of the all-reduce alone and of one piece, and so the pieces per step. */
static int calibrate(dp_comm *c, const dp_overlap_setup *s, float *buf, dp_overlap_result *r)
{
    double comm[CALIBRATION_RUNS], piece[CALIBRATION_RUNS];
    for (int i = 0; i < CALIBRATION_RUNS; i++) {
        int status = step(c, s, buf, 0, -1, &comm[i]);
        if (!status)
            status = step(c, s, NULL, 1, 0, &piece[i]);
        if (status)
            return status;
    }
    r->comm = median(comm, CALIBRATION_RUNS);
    r->piece = median(piece, CALIBRATION_RUNS);
    r->pieces = (int)(r->comm / r->piece + 0.5);
    if (r->pieces < 1)
        r->pieces = 1;
    return 0;
}

int dp_overlap_measure(dp_comm *c, const dp_overlap_setup *s, dp_overlap_result *r)
{
    memset(r, 0, sizeof *r);
    int n = s->iterations;
    float *buf = dp_calloc(s->count ? s->count : 1, sizeof(float), "the benchmark buffer");
    double *samples = dp_calloc((size_t)n * (DP_PROGRESS_WAYS + 2), sizeof(double), "benchmark samples");
    int status = buf && samples ? dp_comm_reserve(c, s->count, 1, 0) : DP_ENOMEM;
    if (!status)
        status = calibrate(c, s, buf, r);
    /* Per iteration every measurement in turn: the ways, the pieces alone, the all-reduce alone. */
    for (int i = 0; i < n && !status; i++) {
        for (int way = 0; way < DP_PROGRESS_WAYS && !status; way++)
            status = step(c, s, buf, r->pieces, way, &samples[way * n + i]);
        if (!status)
            status = step(c, s, NULL, r->pieces, 0, &samples[DP_PROGRESS_WAYS * n + i]);
        if (!status)
            status = step(c, s, buf, 0, -1, &samples[(DP_PROGRESS_WAYS + 1) * n + i]);
    }
    for (int way = 0; way < DP_PROGRESS_WAYS && !status; way++)
        r->step[way] = median(&samples[way * n], n);
    if (!status) {
        r->compute = median(&samples[DP_PROGRESS_WAYS * n], n);
        r->comm = median(&samples[(DP_PROGRESS_WAYS + 1) * n], n);
    }
    free(buf);
    free(samples);
    return status;
}

double dp_overlap_hidden(const dp_overlap_result *r, int way)
{
    return (r->comm + r->compute - r->step[way]) / r->comm;
}

double dp_overlap_hideable(const dp_overlap_result *r)
{
    return (r->compute < r->comm ? r->compute : r->comm) / r->comm;
}
