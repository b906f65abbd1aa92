#include "dp/bench.h"

#include "dp/error.h"

#include <stdlib.h>
#include <string.h>

/* dp_bench_value repeats every VALUE_PERIOD indices, so the expected sums fit a small table. */
enum { VALUE_PERIOD = 11 };

typedef struct bench_buffers {
    float *send, *recv;
} bench_buffers;

float dp_bench_value(int rank, size_t i)
{
    /* In [-5, 5]: sums over up to 3 million ranks are integers a float holds exactly. */
    return (float)((long)((i * 3 + (size_t)rank * 5) % VALUE_PERIOD) - 5);
}

long dp_bench_count_wrong(const float *result, size_t count, int world)
{
    float expected[VALUE_PERIOD];
    for (size_t i = 0; i < VALUE_PERIOD; i++) {
        expected[i] = 0.0f;
        for (int r = 0; r < world; r++)
            expected[i] += dp_bench_value(r, i);
    }
    long wrong = 0;
    for (size_t i = 0; i < count; i++)
        wrong += result[i] != expected[i % VALUE_PERIOD];
    return wrong;
}

double dp_bench_busbw(size_t bytes, double seconds, int world)
{
    return (double)bytes / seconds / 1e9 * 2.0 * (world - 1) / world;
}

static size_t size_count(const dp_bench_options *o)
{
    size_t n = 1;
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes / (size_t)o->factor; bytes *= (size_t)o->factor)
        n++;
    return n;
}

static int alloc_buffers(const dp_comm *c, size_t count, bench_buffers *b)
{
    b->send = dp_alloc(count * sizeof(float), "dp_bench send buffer");
    b->recv = b->send ? dp_alloc(count * sizeof(float), "dp_bench receive buffer") : NULL;
    if (!b->recv)
        return DP_ENOMEM;
    for (size_t i = 0; i < count; i++)
        b->send[i] = dp_bench_value(c->rank, i);
    return 0;
}

/* Out of place is a copy into the receive buffer, then the in-place algorithm on it, in the
 * comm's --grad-dtype (the inputs' sums are exact in bf16 too). */
static int call_once(dp_comm *c, const bench_buffers *b, size_t count, int in_place)
{
    if (!in_place)
        memcpy(b->recv, b->send, count * sizeof(float));
    dp_request_args a = {.kind = DP_ALLREDUCE, .buf = b->recv, .count = count, .label = "the gradient",
                         .dtype = c->grad_dtype};
    return dp_comm_run(c, &a);
}

static int time_calls(dp_comm *c, const bench_buffers *b, size_t count, int in_place,
                      const dp_bench_options *o, double *seconds)
{
    memcpy(b->recv, b->send, count * sizeof(float));
    int status = 0;
    for (int i = 0; status == 0 && i < o->warmup; i++)
        status = call_once(c, b, count, in_place);
    if (status)
        return status;
    DP_MPI_CHECK(MPI_Barrier(c->comm));
    double start = MPI_Wtime();
    for (int i = 0; status == 0 && i < o->iters; i++)
        status = call_once(c, b, count, in_place);
    double mine = (MPI_Wtime() - start) / o->iters;
    if (status)
        return status;
    DP_MPI_CHECK(MPI_Allreduce(&mine, seconds, 1, MPI_DOUBLE, MPI_MAX, c->comm));
    return 0;
}

/* One call on fresh inputs; elements that differ from the exact sum, over all ranks. */
static int count_wrong(dp_comm *c, const bench_buffers *b, size_t count, int in_place, long *wrong)
{
    memcpy(b->recv, b->send, count * sizeof(float));
    int status = call_once(c, b, count, in_place);
    if (status)
        return status;
    long mine = dp_bench_count_wrong(b->recv, count, c->size);
    DP_MPI_CHECK(MPI_Allreduce(&mine, wrong, 1, MPI_LONG, MPI_SUM, c->comm));
    return 0;
}

static int measure(dp_comm *c, const bench_buffers *b, size_t count, int in_place,
                   const dp_bench_options *o, dp_bench_timing *t)
{
    t->wrong = -1;
    int status = time_calls(c, b, count, in_place, o, &t->seconds);
    if (status == 0 && o->check)
        status = count_wrong(c, b, count, in_place, &t->wrong);
    return status;
}

/* A later round's measurement into the kept one: the fastest time, the worst #wrong. */
static void keep_best(dp_bench_timing *kept, const dp_bench_timing *t, int first)
{
    if (first || t->seconds < kept->seconds)
        kept->seconds = t->seconds;
    if (first || t->wrong > kept->wrong)
        kept->wrong = t->wrong;
}

static int measure_row(dp_comm *c, const dp_bench_options *o, const bench_buffers *b,
                       dp_bench_row *row, int first)
{
    dp_bench_timing out_of_place, in_place;
    int status = measure(c, b, row->count, 0, o, &out_of_place);
    if (!status)
        status = measure(c, b, row->count, 1, o, &in_place);
    if (!status) {
        keep_best(&row->out_of_place, &out_of_place, first);
        keep_best(&row->in_place, &in_place, first);
    }
    return status;
}

/* A noisy neighbour slows a stretch of time: rounds spread each cell's tries over the run. */
static int measure_all(dp_comm *c, const dp_bench_options *o, const bench_buffers *b,
                       dp_bench_results *r)
{
    for (int round = 0; round < o->rounds; round++) {
        size_t bytes = o->min_bytes;
        for (size_t s = 0; s < r->size_count; s++, bytes *= (size_t)o->factor)
            for (int a = 0; a < o->algorithm_count; a++) {
                dp_bench_row *row = &r->rows[(size_t)a * r->size_count + s];
                row->count = bytes / sizeof(float);
                int status = dp_comm_set_algorithm(c, o->algorithms[a]);
                if (!status)
                    status = measure_row(c, o, b, row, round == 0);
                if (status)
                    return status;
            }
    }
    return 0;
}

int dp_bench_run(dp_comm *c, const dp_bench_options *o, dp_bench_results *r)
{
    bench_buffers b = {0};
    r->size_count = size_count(o);
    r->rows = dp_calloc((size_t)o->algorithm_count * r->size_count, sizeof *r->rows, "dp_bench results");
    int status = r->rows ? alloc_buffers(c, o->max_bytes / sizeof(float), &b) : DP_ENOMEM;
    if (!status)
        status = measure_all(c, o, &b, r);
    free(b.send);
    free(b.recv);
    return status;
}

void dp_bench_results_free(dp_bench_results *r)
{
    free(r->rows);
    r->rows = NULL;
    r->size_count = 0;
}
