#include "dp/auto_table.h"
#include "dp/bench.h"
#include "dp/error.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* An algorithm keeps winning a size while this close to the fastest, so noise between
 * near-equal algorithms does not split the table into many small ranges. */
#define TUNE_TOLERANCE 1.10

static double in_place_seconds(const dp_bench_results *r, int a, size_t s)
{
    return r->rows[(size_t)a * r->size_count + s].in_place.seconds;
}

/* The algorithm for size s: the fastest, unless the previous size's winner is within tolerance. */
static int winner(const dp_bench_options *o, const dp_bench_results *r, size_t s, int previous)
{
    int best = 0;
    for (int a = 1; a < o->algorithm_count; a++)
        if (in_place_seconds(r, a, s) < in_place_seconds(r, best, s))
            best = a;
    if (previous >= 0 && in_place_seconds(r, previous, s) <= TUNE_TOLERANCE * in_place_seconds(r, best, s))
        return previous;
    return best;
}

/* Merges sizes with the same winner into rules; returns the rule count. */
static size_t choose_rules(const dp_bench_options *o, const dp_bench_results *r, size_t *max_bytes,
                           const char **names)
{
    size_t rules = 0;
    int previous = -1;
    for (size_t s = 0; s < r->size_count; s++) {
        int w = winner(o, r, s, previous);
        if (w != previous) {
            if (rules)
                max_bytes[rules - 1] = r->rows[s - 1].count * sizeof(float);
            names[rules++] = o->algorithms[w];
        }
        previous = w;
    }
    max_bytes[rules - 1] = SIZE_MAX;
    return rules;
}

/* Rank 0: the file's other world sizes' rules (when it exists), this world's new ones, written. */
static int write_rules(const char *path, int world, const size_t *max_bytes, const char **names,
                       size_t rules, FILE *out)
{
    dp_auto_table t = {0};
    int status = access(path, F_OK) == 0 ? dp_auto_table_read(path, &t) : 0;
    if (status)
        dp_fail_context(status, "--tune %s: its other world sizes' rules are kept, so it is read first", path);
    if (!status)
        status = dp_auto_table_set_world(&t, world, max_bytes, names, rules);
    char comment[256], host[64] = "?";
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    time_t now = time(NULL);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%d", localtime(&now));
    snprintf(comment, sizeof comment,
             "written by dp_bench --tune: fastest in-place all-reduce per size; W=%d measured on %s, %s",
             world, host, date);
    if (!status)
        status = dp_auto_table_write(path, &t, comment);
    if (!status && out) {
        char description[512];
        dp_auto_table_describe(&t, world, description, sizeof description);
        fprintf(out, "# --tune wrote %s, %s\n", path, description);
    }
    dp_auto_table_free(&t);
    return status;
}

int dp_bench_tune(dp_comm *c, const dp_bench_options *o, const dp_bench_results *r, FILE *out)
{
    size_t *max_bytes = dp_calloc(r->size_count, sizeof *max_bytes, "tuned rule sizes");
    const char **names = dp_calloc(r->size_count, sizeof *names, "tuned rule names");
    int status = max_bytes && names ? 0 : DP_ENOMEM;
    /* Times are maxima over ranks, so every rank would choose alike; rank 0 alone writes. */
    if (!status && c->rank == 0)
        status = write_rules(o->tune_path, c->size, max_bytes, names,
                             choose_rules(o, r, max_bytes, names), out);
    free(max_bytes);
    free(names);
    int shared = status;
    DP_MPI_CHECK(MPI_Bcast(&shared, 1, MPI_INT, 0, c->comm));
    if (shared && c->rank != 0)
        return dp_fail(DP_EIO, "%s: rank 0 could not write the tuned table", o->tune_path);
    return status;
}
