/* The kernel launch arithmetic written once (src/backend/kernel_grid.h), on any machine: the
 * argmax rule (NaN largest, first index wins) holds in the CPU backend and in the GPU's warp
 * butterfly emulated on the host, on 20,000 rows with NaN, infinities, zeros and ties; dropout
 * masks are a hash of sample and unit; every launch shape visits each element exactly once; and
 * the reductions' one-block tree adds each block's partial once, in a fixed order.
 * Each operation's results against a reference, on every backend, are the backend test
 * table's (tests/test_backend_ops.c). */
#include "dp/backend.h"
#include "dp/rng.h"
#include "src/backend/kernel_grid.h"
#include "tests/fakecuda/emulate.h"
#include "tests/testutil.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A passing ck_assert costs Check a message to its parent: loops over many values test with this. */
#define EXPECT(cond, ...)                                                    \
    do {                                                                     \
        if (!(cond))                                                         \
            ck_abort_msg(__VA_ARGS__);                                       \
    } while (0)

/* The CPU backend's argmax of a row, observed through softmax_xent's correct count. */
static int cpu_says_argmax_is(const float *z, int cols, int label)
{
    double totals[2] = {0.0, 0.0};
    int32_t l = label;
    dp_backend_cpu()->softmax_xent(dp_backend_cpu(), z, &l, 1, cols, NULL, totals);
    return totals[1] == 1.0;
}

/* Dropout's mask: 0 or the scale, a function of (seed, step, sample, unit) alone, and kept
 * about 1 - p of the time. */
START_TEST(dropout_masks_are_a_hash_of_sample_and_unit)
{
    uint64_t step = 3, next_step = 4;
    dp_dropout_key key = {.seed = 11, .step = &step, .first_sample = 100, .p = 0.3f, .scale = 1.0f / 0.7f};
    dp_dropout_key shifted = key;
    shifted.first_sample = 90;
    long kept = 0, total = 0;
    for (uint64_t row = 0; row < 200; row++)
        for (uint64_t unit = 0; unit < 100; unit++, total++) {
            float m = dp_dropout_mask(&key, row, unit);
            EXPECT(m == 0.0f || m == key.scale, "mask %g", m);
            kept += m != 0.0f;
            /* Row r from sample 100 is row r + 10 from sample 90: the same sample, the same mask. */
            EXPECT(m == dp_dropout_mask(&shifted, row + 10, unit), "mask of sample %lu unit %lu depends on the split",
                   (unsigned long)(100 + row), (unsigned long)unit);
        }
    double kept_share = (double)kept / (double)total;
    ck_assert_msg(fabs(kept_share - 0.7) < 0.02, "kept %.3f of units, want about 0.7", kept_share);
    key.step = &next_step;
    int differ = 0;
    for (uint64_t unit = 0; unit < 100; unit++)
        differ += dp_dropout_mask(&key, 0, unit) != dp_dropout_mask(&shifted, 10, unit);
    ck_assert_msg(differ > 10, "the next step's masks repeat this one's");
}
END_TEST

START_TEST(argmax_takes_the_first_nan_else_the_first_largest)
{
    static const struct {
        float z[4];
        int cols, want;
    } rows[] = {
        {{1.0f, NAN, 3.0f}, 3, 1},          {{NAN, NAN}, 2, 0},
        {{-0.0f, 0.0f}, 2, 0},              {{0.0f, -0.0f}, 2, 0},
        {{1.0f, 3.0f, 3.0f}, 3, 1},         {{-INFINITY, -INFINITY}, 2, 0},
        {{INFINITY, 2.0f, NAN, NAN}, 4, 2}, {{-INFINITY, -FLT_MAX}, 2, 1},
        {{FLT_TRUE_MIN, 0.0f}, 2, 0},       {{5.0f}, 1, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        float top;
        int best;
        ck_assert(dp_emulate_warp_argmax(rows[i].z, rows[i].cols, &top, &best));
        ck_assert_msg(best == rows[i].want, "row %zu: the warp picks %d, want %d", i, best, rows[i].want);
        for (int label = 0; label < rows[i].cols; label++)
            ck_assert_msg(cpu_says_argmax_is(rows[i].z, rows[i].cols, label) == (label == rows[i].want),
                          "row %zu: the CPU backend's argmax is not %d", i, rows[i].want);
    }
}
END_TEST

/* Values from a few levels (ties), NaN, infinities, zeros and subnormals. */
static float hostile_value(dp_rng *rng)
{
    static const float pool[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, FLT_TRUE_MIN, -FLT_MIN / 4.0f, 2.0f, 2.0f, -1.0f};
    float u = dp_rng_uniform(rng);
    if (u < 0.08f)
        return pool[(int)(dp_rng_uniform(rng) * 10.0f) % 10];
    return u < 0.5f ? (float)(int)(dp_rng_uniform(rng) * 4.0f) : 8.0f * dp_rng_uniform(rng) - 4.0f;
}

START_TEST(warp_butterfly_argmax_equals_the_cpu_backend_on_20000_rows)
{
    static const int widths[] = {1, 2, 5, 10, 31, 32, 33, 64, 100, 1000};
    enum { ROWS = 20000 };
    dp_rng rng;
    dp_rng_seed(&rng, 77);
    float *z = malloc(1000 * sizeof *z);
    int with_nan = 0;
    for (int r = 0; r < ROWS; r++) {
        int cols = widths[r % 10];
        int has_nan = 0;
        for (int c = 0; c < cols; c++) {
            z[c] = hostile_value(&rng);
            has_nan |= isnan(z[c]);
        }
        with_nan += has_nan;
        float top;
        int best;
        EXPECT(dp_emulate_warp_argmax(z, cols, &top, &best), "row %d: lanes disagree", r);
        EXPECT(cpu_says_argmax_is(z, cols, best), "row %d (%d columns): the warp picks column %d, the CPU another",
                      r, cols, best);
    }
    ck_assert_msg(with_nan > 1000, "only %d rows held NaN", with_nan);
    free(z);
}
END_TEST

/* Runs every thread of a rows shape through dp_bias_act_thread on zeros with bias 1: each
 * element ends as the number of times a thread visited it. */
static void check_rows_shape(int rows, int cols)
{
    dp_shape s = dp_shape_rows(rows, cols);
    ck_assert_uint_eq(s.block_x * s.block_y, DP_THREADS);
    ck_assert_msg(s.block_x >= (unsigned)cols || s.block_x == DP_THREADS, "%d columns on %u x-threads", cols, s.block_x);
    ck_assert_msg(2 * (unsigned)cols > s.block_x || s.block_x == 1, "%d columns leave most of %u x-threads idle", cols,
                  s.block_x);
    ck_assert(s.grid_y <= DP_MAX_GRID_Y && s.grid_x <= DP_MAX_COLUMN_BLOCKS);
    size_t n = (size_t)rows * cols;
    float *y = calloc(n, sizeof *y), *bias = malloc((size_t)cols * sizeof *bias);
    for (int c = 0; c < cols; c++)
        bias[c] = 1.0f;
    for (unsigned by = 0; by < s.grid_y; by++)
        for (unsigned bx = 0; bx < s.grid_x; bx++)
            for (unsigned ty = 0; ty < s.block_y; ty++)
                for (unsigned tx = 0; tx < s.block_x; tx++)
                    dp_bias_act_thread(y, bias, rows, cols, 0, dp_span_y(s, by, ty), dp_span_x(s, bx, tx));
    for (size_t i = 0; i < n; i++)
        EXPECT(y[i] == 1.0f, "[%d, %d]: element %zu visited %g times", rows, cols, i, y[i]);
    free(y);
    free(bias);
}

START_TEST(every_launch_shape_visits_each_element_once)
{
    static const int shapes[][2] = {{1, 1}, {3, 10}, {257, 1}, {5, 784}, {70001, 3}, {2, 20000}, {129, 33}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        check_rows_shape(shapes[i][0], shapes[i][1]);
    static const size_t sizes[] = {1, 255, 256, 257, 1000003};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        dp_shape s = dp_shape_flat(n);
        float *p = calloc(n, sizeof *p), *g = malloc(n * sizeof *g), *unused = calloc(n, sizeof *unused);
        for (size_t k = 0; k < n; k++)
            g[k] = 1.0f;
        for (unsigned b = 0; b < s.grid_x; b++)
            for (unsigned t = 0; t < s.block_x; t++)
                dp_sgd_thread(p, g, unused, n, &(dp_sgd_coefs){.grad_scale = 1.0f, .lr = -1.0f, .apply = 1},
                              dp_span_x(s, b, t)); /* p += 1 per visit */
        for (size_t k = 0; k < n; k++)
            EXPECT(p[k] == 1.0f, "n %zu: element %zu visited %g times", n, k, p[k]);
        ck_assert_uint_le(dp_shape_reduce(n).grid_x, DP_MAX_PARTIALS);
        free(p);
        free(g);
        free(unused);
    }
    /* Past the grid cap, threads stride over the rest: counted by the spans' own walk. */
    size_t big = (size_t)DP_MAX_GRID * DP_THREADS + 3;
    dp_shape s = dp_shape_flat(big);
    ck_assert_uint_eq(s.grid_x, DP_MAX_GRID);
    unsigned char *visits = calloc(big, 1);
    for (unsigned b = 0; b < s.grid_x; b++)
        for (unsigned t = 0; t < s.block_x; t++)
            for (dp_span i = dp_span_x(s, b, t); i.first < big; i.first += i.step)
                visits[i.first]++;
    for (size_t k = 0; k < big; k++)
        EXPECT(visits[k] == 1, "element %zu of %zu visited %d times", k, big, visits[k]);
    free(visits);
    ck_assert_uint_le(dp_shape_softmax(1 << 20).grid_x, DP_MAX_PARTIALS);
}
END_TEST

/* add_partials as the one block computes it (emulated): each thread's share, the tree, the finish. */
static void tree_totals(const dp_cuda_partial *partials, int blocks, double *sum, double *count)
{
    double sums[DP_THREADS], counts[DP_THREADS];
    for (int t = 0; t < DP_THREADS; t++)
        dp_add_partials_thread(partials, blocks, t, &sums[t], &counts[t]);
    *sum = 0.0;
    *count = 0.0;
    dp_add_partials_finish(dp_emulate_block_sum(sums), dp_emulate_block_sum(counts), sum, count, 1.0);
}

/* The reductions' partials are added by a block of threads, not one: every partial exactly
 * once for any count of blocks up to DP_MAX_PARTIALS (exact sums: small integers), and close
 * to a long-double sum for values of mixed signs and magnitudes, the same bits every time. */
START_TEST(partials_tree_adds_each_block_once_in_a_fixed_order)
{
    static const int counts[] = {1, 2, 255, 256, 257, 511, 1000, DP_MAX_PARTIALS};
    dp_cuda_partial *p = malloc(DP_MAX_PARTIALS * sizeof *p);
    dp_rng rng;
    dp_rng_seed(&rng, 19);
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
        int blocks = counts[i];
        double want = 0.0, want_count = 0.0;
        for (int b = 0; b < blocks; b++) {
            p[b] = (dp_cuda_partial){(double)(b + 1), (unsigned long long)(3 * b + 1)};
            want += b + 1;
            want_count += 3 * b + 1;
        }
        double sum, count;
        tree_totals(p, blocks, &sum, &count);
        EXPECT(sum == want && count == want_count, "%d blocks: sum %.17g count %.17g, want %.17g %.17g", blocks, sum,
               count, want, want_count);
        long double exact = 0.0L;
        for (int b = 0; b < blocks; b++) {
            p[b].sum = (dp_rng_uniform(&rng) - 0.5) * pow(10.0, (double)(b % 9));
            exact += p[b].sum;
        }
        double again, scale = 0.0;
        tree_totals(p, blocks, &sum, &count);
        tree_totals(p, blocks, &again, &count);
        for (int b = 0; b < blocks; b++)
            scale += fabs(p[b].sum);
        EXPECT(memcmp(&sum, &again, sizeof sum) == 0, "%d blocks: two runs differ", blocks);
        EXPECT(fabsl((long double)sum - exact) <= 16 * DBL_EPSILON * scale, "%d blocks: %.17g vs %.17Lg", blocks, sum,
               exact);
    }
    free(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kernel-math");
    TCase *tc = tcase_create("shared");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, argmax_takes_the_first_nan_else_the_first_largest);
    tcase_add_test(tc, dropout_masks_are_a_hash_of_sample_and_unit);
    tcase_add_test(tc, warp_butterfly_argmax_equals_the_cpu_backend_on_20000_rows);
    tcase_add_test(tc, every_launch_shape_visits_each_element_once);
    tcase_add_test(tc, partials_tree_adds_each_block_once_in_a_fixed_order);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
