/* The sampler decides who trains on what: slices must tile every batch exactly once. */
#include "dp/sampler.h"
#include "tests/testutil.h"

#include <stdlib.h>
#include <string.h>

START_TEST(slices_tile_the_batch_with_sizes_within_one)
{
    for (size_t total = 0; total <= 70; total++)
        for (int world = 1; world <= 9; world++) {
            size_t expected_begin = 0, smallest = (size_t)-1, largest = 0;
            for (int rank = 0; rank < world; rank++) {
                dp_range r = dp_partition(total, world, rank);
                ck_assert_uint_eq(r.begin, expected_begin); /* contiguous, disjoint, in rank order */
                ck_assert_uint_le(r.begin, r.end);
                size_t size = r.end - r.begin;
                smallest = size < smallest ? size : smallest;
                largest = size > largest ? size : largest;
                expected_begin = r.end;
            }
            ck_assert_uint_eq(expected_begin, total); /* covers the whole batch */
            ck_assert_uint_le(largest - smallest, 1);
        }
}
END_TEST

START_TEST(larger_slices_come_first)
{
    dp_range first = dp_partition(10, 4, 0), last = dp_partition(10, 4, 3);
    ck_assert_uint_eq(first.end - first.begin, 3);
    ck_assert_uint_eq(last.end - last.begin, 2);
}
END_TEST

static int is_permutation(const size_t *order, size_t n)
{
    char *seen = calloc(n ? n : 1, 1);
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        ok = order[i] < n && !seen[order[i]];
        if (ok)
            seen[order[i]] = 1;
    }
    free(seen);
    return ok;
}

START_TEST(epoch_order_is_a_permutation_that_depends_only_on_seed_and_epoch)
{
    dp_sampler a, b;
    ck_assert_int_eq(dp_sampler_init(&a, 1000, 7), 0);
    ck_assert_int_eq(dp_sampler_init(&b, 1000, 7), 0);
    dp_sampler_set_epoch(&a, 3);
    dp_sampler_set_epoch(&b, 5);
    dp_sampler_set_epoch(&b, 3); /* a rank arriving by another path gets the same order */
    ck_assert(is_permutation(a.order, 1000));
    ck_assert_mem_eq(a.order, b.order, 1000 * sizeof(size_t));
    dp_sampler_free(&a);
    dp_sampler_free(&b);
}
END_TEST

START_TEST(epochs_and_seeds_differ)
{
    dp_sampler s;
    ck_assert_int_eq(dp_sampler_init(&s, 500, 1), 0);
    size_t *epoch0 = malloc(500 * sizeof(size_t));
    dp_sampler_set_epoch(&s, 0);
    memcpy(epoch0, s.order, 500 * sizeof(size_t));
    dp_sampler_set_epoch(&s, 1);
    ck_assert(is_permutation(s.order, 500));
    ck_assert(memcmp(epoch0, s.order, 500 * sizeof(size_t)) != 0);
    dp_sampler other;
    ck_assert_int_eq(dp_sampler_init(&other, 500, 2), 0);
    dp_sampler_set_epoch(&other, 0);
    ck_assert(memcmp(epoch0, other.order, 500 * sizeof(size_t)) != 0);
    free(epoch0);
    dp_sampler_free(&s);
    dp_sampler_free(&other);
}
END_TEST

START_TEST(step_ranges_cover_the_epoch_and_the_last_may_be_short)
{
    ck_assert_int_eq(dp_sampler_steps_per_epoch(100, 30, 0), 4);
    ck_assert_int_eq(dp_sampler_steps_per_epoch(100, 30, 1), 3);
    ck_assert_int_eq(dp_sampler_steps_per_epoch(90, 30, 0), 3);
    ck_assert_int_eq(dp_sampler_steps_per_epoch(20, 30, 1), 0);
    dp_range last = dp_sampler_step_range(100, 30, 3);
    ck_assert_uint_eq(last.begin, 90);
    ck_assert_uint_eq(last.end, 100);
    dp_range second = dp_sampler_step_range(100, 30, 1);
    ck_assert_uint_eq(second.begin, 30);
    ck_assert_uint_eq(second.end, 60);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, slices_tile_the_batch_with_sizes_within_one);
    tcase_add_test(tc, larger_slices_come_first);
    tcase_add_test(tc, epoch_order_is_a_permutation_that_depends_only_on_seed_and_epoch);
    tcase_add_test(tc, epochs_and_seeds_differ);
    tcase_add_test(tc, step_ranges_cover_the_epoch_and_the_last_may_be_short);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
