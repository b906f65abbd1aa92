/* Measuring all-reduce algorithms side by side, read like nccl-tests' all_reduce_perf:
 * per message size, the time of one call (max over ranks), algorithm and bus bandwidth, and
 * #wrong, the elements that differ from the exact sum. dp_bench's options, measurement,
 * report and --tune live here so tests and other tools can reuse them. */
#ifndef DP_BENCH_H
#define DP_BENCH_H

#include "dp/comm.h"
#include "dp/options.h"

#include <stdio.h>

#define DP_BENCH_MAX_ALGORITHMS 16

typedef struct dp_bench_options {
    size_t min_bytes, max_bytes; /* message sizes: min, min*factor, ... up to max */
    int factor;
    int warmup, iters;
    int rounds;                  /* sweeps over all sizes; each cell keeps its fastest */
    int check;                   /* count wrong elements after each measurement */
    char algorithms[DP_BENCH_MAX_ALGORITHMS][32];
    int algorithm_count;
    char tune_path[DP_PATH_MAX];       /* "" : no --tune */
    char auto_table_path[DP_PATH_MAX]; /* "" : auto uses the built-in table */
    dp_group group;              /* the ranks that take part (--group) */
    char hier_inner[32];         /* --hier-inner */
    dp_dtype dtype;              /* --grad-dtype: what the all-reduce sends and adds */
} dp_bench_options;

/* Parses dp_bench's argv (defaults first). Returns DP_OPTIONS_RUN, DP_OPTIONS_EXIT after
 * printing --help to out (when not NULL), or DP_EINVAL naming the bad option. */
int dp_bench_options_parse(dp_bench_options *o, int argc, char **argv, FILE *out);

void dp_bench_print_usage(FILE *out);

/* One measurement: seconds per call (max over ranks) and elements wrong (summed over ranks;
 * -1 when not checked). */
typedef struct dp_bench_timing {
    double seconds;
    long wrong;
} dp_bench_timing;

typedef struct dp_bench_row {
    size_t count; /* floats */
    dp_bench_timing out_of_place, in_place;
} dp_bench_row;

/* Every algorithm at every size: rows[a * size_count + s]. */
typedef struct dp_bench_results {
    size_t size_count;
    dp_bench_row *rows;
} dp_bench_results;

/* The value rank puts at index i: a small integer, so every sum over ranks is exact in float. */
float dp_bench_value(int rank, size_t i);

/* Elements of result that differ from the exact sum over world ranks of dp_bench_value. */
long dp_bench_count_wrong(const float *result, size_t count, int world);

/* Measures o's algorithms at o's sizes on c, size by size with the algorithms taking turns
 * so that machine noise hits them alike, o->rounds times over; each cell keeps its fastest
 * round (and its worst #wrong). Collective; fills r (free with dp_bench_results_free). */
int dp_bench_run(dp_comm *c, const dp_bench_options *o, dp_bench_results *r);

void dp_bench_results_free(dp_bench_results *r);

/* Bus bandwidth in GB/s: bytes / seconds * 2(W-1)/W, the per-link traffic of an all-reduce,
 * comparable across world sizes. */
double dp_bench_busbw(size_t bytes, double seconds, int world);

/* nccl-tests-style report on out: the header, then per algorithm a table and its footer
 * (out-of-bounds values, average bus bandwidth). */
void dp_bench_report(FILE *out, const dp_comm *c, const dp_bench_options *o,
                     const dp_bench_results *r);

/* The sum of every #wrong in r (the same on every rank). */
long dp_bench_total_wrong(const dp_bench_options *o, const dp_bench_results *r);

/* --tune: per measured size the fastest algorithm (in-place time; an algorithm keeps a size
 * while within 10% of the fastest so noise does not split ranges) becomes c's world size's
 * rules in the table at o->tune_path (other world sizes' rules there are kept), written
 * atomically by rank 0. Collective; all ranks return the same status. Describes the rules on
 * out (when not NULL). */
int dp_bench_tune(dp_comm *c, const dp_bench_options *o, const dp_bench_results *r, FILE *out);

#endif
