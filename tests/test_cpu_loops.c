/* The CPU backend's threads and instruction sets: the parts of an operation tile its range on
 * distinct threads, and the loops chosen at run time are ones this CPU runs. Each operation's
 * results at every instruction set and thread count are the backend test table's
 * (tests/test_backend_ops.c). */
#include "dp/backend.h"
#include "src/backend/cpu_loops.h"
#include "src/backend/cpu_parallel.h"
#include "tests/testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const isas[] = {"generic", "avx2", "avx512"};

/* What the parts of one operation were: their ranges, the threads that ran them. */
static struct {
    pthread_mutex_t lock;
    int count;
    size_t begin[64], end[64];
    pthread_t thread[64];
} seen = {PTHREAD_MUTEX_INITIALIZER, 0, {0}, {0}, {0}};

static size_t record_part(const dp_loop_args *a, size_t begin, size_t end)
{
    (void)a;
    pthread_mutex_lock(&seen.lock);
    ck_assert_int_lt(seen.count, 64);
    seen.begin[seen.count] = begin;
    seen.end[seen.count] = end;
    seen.thread[seen.count++] = pthread_self();
    pthread_mutex_unlock(&seen.lock);
    return end - begin;
}

/* The parts tile [0, n) on 64-byte boundaries, one per thread at most, none below the grain,
 * each run once, by distinct threads, the caller among them; their counts add up. */
START_TEST(parts_tile_the_range_on_distinct_threads)
{
    static const struct { int threads; size_t n, grain; int parts; } cases[] = {
        {1, 1000000, 1000, 1}, {4, 1000000, 1000, 4}, {4, 2500, 1000, 2}, {4, 999, 1000, 1},
        {3, 100003, 1, 3}, {5, 4099, 870, 4},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        dp_cpu_parallel_set_threads(cases[c].threads);
        seen.count = 0;
        size_t total = dp_cpu_parallel(record_part, &(dp_loop_args){0}, cases[c].n, cases[c].grain);
        ck_assert_uint_eq(total, cases[c].n);
        ck_assert_int_eq(seen.count, cases[c].parts);
        size_t covered = 0;
        int caller_ran = 0;
        for (int p = 0; p < seen.count; p++) {
            /* parts may run in any order: find the one starting where coverage stands */
            int at = -1;
            for (int q = 0; q < seen.count; q++)
                if (seen.begin[q] == covered && seen.end[q] > covered)
                    at = q;
            ck_assert_msg(at >= 0, "case %zu: no part begins at %zu", c, covered);
            ck_assert_uint_eq(seen.begin[at] % 16, 0);
            covered = seen.end[at];
            caller_ran |= pthread_equal(seen.thread[at], pthread_self());
            for (int q = 0; q < at; q++)
                ck_assert_msg(!pthread_equal(seen.thread[q], seen.thread[at]), "case %zu: a thread ran two parts", c);
        }
        ck_assert_uint_eq(covered, cases[c].n);
        ck_assert(caller_ran);
    }
    dp_cpu_parallel_set_threads(1);
}
END_TEST

/* The best instruction set is one this CPU runs, and the generic build exists everywhere. */
START_TEST(the_best_loops_are_ones_this_cpu_runs)
{
    const dp_cpu_loops *best = dp_cpu_loops_best();
    ck_assert_ptr_nonnull(dp_cpu_loops_for("generic"));
    ck_assert_ptr_eq(dp_cpu_loops_for(best->isa), best);
    ck_assert_ptr_null(dp_cpu_loops_for("sse9"));
    ck_assert_ptr_nonnull(strstr(dp_backend_cpu()->describe(dp_backend_cpu()), best->isa));
    printf("CPU loops: %s (of", best->isa);
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++)
        printf(" %s%s", isas[k], dp_cpu_loops_for(isas[k]) ? "" : " (not run here)");
    printf(")\n");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cpu-loops");
    TCase *tc = tcase_create("loops");
        tcase_add_test(tc, parts_tile_the_range_on_distinct_threads);
    tcase_add_test(tc, the_best_loops_are_ones_this_cpu_runs);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
