#include "config.h"

#include "dp/auto_table.h"
#include "dp/bench.h"

#include <string.h>
#include <unistd.h>

/* Column widths of nccl-tests' all_reduce_perf (without its root column). */
enum { GROUP_WIDTH = 33 };

/* The sum's element type, as the header and (nccl-tests' names) the type column call it. */
static const char *sum_type(const dp_comm *c, int column)
{
    if (c->grad_dtype == DP_DTYPE_BF16)
        return "bfloat16";
    return column ? "float" : "float32";
}

static void print_header(FILE *out, const dp_comm *c, const dp_bench_options *o)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    fprintf(out, "# dp_bench (%s %s): all-reduce, %s sum, %d ranks (%d on this node, %ld cores%s)\n",
            PACKAGE_NAME, PACKAGE_VERSION, sum_type(c, 0), c->size, c->local_size, cores,
            c->local_size > cores ? ": OVERSUBSCRIBED, times include waiting for a core" : "");
    fprintf(out, "# minBytes %zu maxBytes %zu step: %d(factor) warmup iters: %d iters: %d rounds: %d validation: %d\n",
            o->min_bytes, o->max_bytes, o->factor, o->warmup, o->iters, o->rounds, o->check);
    fprintf(out, "# time: one call in us (mean of the iters, max over ranks, fastest of the rounds)\n"
                 "# algbw = size / time; busbw = algbw * 2(W-1)/W (GB/s)\n"
                 "# out-of-place: copy the send buffer into the receive buffer, then the in-place\n"
                 "#   algorithm on it; its time includes the copy\n"
                 "# #wrong: elements differing from the exact sum (small-integer inputs, by rank and index)\n"
                 "# sizes are measured one by one, the algorithms taking turns, so noise hits them alike\n");
    if (c->grad_dtype != DP_DTYPE_F32)
        fprintf(out, "# --grad-dtype %s: each float32 buffer (count floats) is sent as %s: size, algbw and\n"
                     "#   busbw count those bytes, half the float32 buffer's\n", dp_grad_dtype_name(c->grad_dtype),
                sum_type(c, 0));
    fprintf(out, "#\n");
}

/* Appends text centred in a column group to line. */
static void append_centered(char *line, size_t size, const char *text)
{
    size_t used = strlen(line);
    int pad = GROUP_WIDTH - (int)strlen(text);
    snprintf(line + used, size - used, "%*s%s%*s", pad - pad / 2, "", text, pad / 2, "");
}

/* Prints line without its trailing blanks. */
static void print_trimmed(FILE *out, char *line)
{
    size_t len = strlen(line);
    while (len > 0 && line[len - 1] == ' ')
        line[--len] = '\0';
    fprintf(out, "%s\n", line);
}

/* One title line: the row's four columns, then the four of each mode (out-of-place, in-place). */
static void print_title_row(FILE *out, const char *const row[4], const char *const mode[4])
{
    char line[256];
    int used = snprintf(line, sizeof line, "#%11s  %12s  %8s  %6s", row[0], row[1], row[2], row[3]);
    for (int m = 0; m < 2; m++)
        used += snprintf(line + used, sizeof line - (size_t)used, "  %7s  %6s  %6s %6s", mode[0],
                         mode[1], mode[2], mode[3]);
    print_trimmed(out, line);
}

static void print_column_titles(FILE *out)
{
    static const char *const names[4] = {"size", "count", "type", "redop"};
    static const char *const units[4] = {"(B)", "(elements)", "", ""};
    static const char *const mode_names[4] = {"time", "algbw", "busbw", "#wrong"};
    static const char *const mode_units[4] = {"(us)", "(GB/s)", "(GB/s)", ""};
    char line[256];
    snprintf(line, sizeof line, "#%43s", "");
    append_centered(line, sizeof line, "out-of-place");
    append_centered(line, sizeof line, "in-place");
    print_trimmed(out, line);
    print_title_row(out, names, mode_names);
    print_title_row(out, units, mode_units);
}

/* Prints one mode's columns; returns its bus bandwidth. */
static double print_timing(FILE *out, size_t bytes, const dp_bench_timing *t, int world)
{
    double us = t->seconds * 1e6, busbw = dp_bench_busbw(bytes, t->seconds, world);
    char wrong[24] = "N/A";
    if (t->wrong >= 0)
        snprintf(wrong, sizeof wrong, "%ld", t->wrong);
    fprintf(out, us >= 10000.0 ? "  %7.0f" : us >= 100.0 ? "  %7.1f" : "  %7.2f", us);
    fprintf(out, "  %6.2f  %6.2f  %5s", (double)bytes / t->seconds / 1e9, busbw, wrong);
    return busbw;
}

static long wrong_of(const dp_bench_timing *t)
{
    return t->wrong > 0 ? t->wrong : 0;
}

static long rows_wrong(const dp_bench_row *rows, size_t count)
{
    long wrong = 0;
    for (size_t s = 0; s < count; s++)
        wrong += wrong_of(&rows[s].out_of_place) + wrong_of(&rows[s].in_place);
    return wrong;
}

long dp_bench_total_wrong(const dp_bench_options *o, const dp_bench_results *r)
{
    return rows_wrong(r->rows, (size_t)o->algorithm_count * r->size_count);
}

static void print_auto_rules(FILE *out, const dp_comm *c, const dp_bench_options *o)
{
    char rules[512];
    dp_auto_table_describe(c->auto_table, c->size, rules, sizeof rules);
    fprintf(out, "# auto table %s, %s\n", o->auto_table_path[0] ? o->auto_table_path : "built-in", rules);
}

/* One algorithm's table and footer. */
static void print_algorithm(FILE *out, const dp_comm *c, const dp_bench_options *o,
                            const dp_bench_row *rows, size_t count, const char *name)
{
    fprintf(out, "# Algorithm: %s\n", name);
    if (strcmp(name, "auto") == 0 && c->auto_table)
        print_auto_rules(out, c, o);
    print_column_titles(out);
    double busbw_sum = 0.0;
    for (size_t s = 0; s < count; s++) {
        const dp_bench_row *row = &rows[s];
        size_t bytes = row->count * dp_dtype_size(c->grad_dtype);
        fprintf(out, "%12zu  %12zu  %8s  %6s", bytes, row->count, sum_type(c, 1), "sum");
        busbw_sum += print_timing(out, bytes, &row->out_of_place, c->size);
        busbw_sum += print_timing(out, bytes, &row->in_place, c->size);
        fputc('\n', out);
    }
    long wrong = rows_wrong(rows, count);
    if (o->check)
        fprintf(out, "# Out of bounds values : %ld %s\n", wrong, wrong ? "FAILED" : "OK");
    else
        fprintf(out, "# Out of bounds values : N/A (not checked, -c 0)\n");
    fprintf(out, "# Avg bus bandwidth    : %g\n#\n", busbw_sum / (2.0 * (double)count));
}

void dp_bench_report(FILE *out, const dp_comm *c, const dp_bench_options *o,
                     const dp_bench_results *r)
{
    print_header(out, c, o);
    for (int a = 0; a < o->algorithm_count; a++)
        print_algorithm(out, c, o, &r->rows[(size_t)a * r->size_count], r->size_count,
                        o->algorithms[a]);
    fflush(out);
}
