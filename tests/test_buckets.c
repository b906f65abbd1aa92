/* The bucket plan (src/dist/dist.c), worked by hand: backward order from the buffer's end, a
 * small first bucket, whole segments where a bucket's memory holds whole segments (ZeRO-2 and
 * 3) or nothing starts during backward (--no-overlap), and buckets cut inside segments at
 * their caps otherwise (DDP and ZeRO-1 overlapped), which the model's row-block pieces feed,
 * the last taking what would be under half a cap. */
#include "dp/dist.h"
#include "tests/testutil.h"

#include <stdlib.h>

/* Segments of 300, 1000 and 50 floats in forward order; caps of 100 floats first, then 400. */
static const size_t offsets[] = {0, 300, 1300}, counts[] = {300, 1000, 50};
static const dp_dist_layout layout = {.segments = 3, .offset = offsets, .count = counts, .total = 1350};
#define MIB_FLOATS (1048576.0 / sizeof(float))

static void plan(int overlap, int zero, int *buckets, size_t *largest)
{
    dp_dist_config config = dp_dist_default_config(overlap, 400.0 / MIB_FLOATS, zero, layout.total);
    config.first_bucket_mb = 100.0 / MIB_FLOATS;
    ck_assert_int_eq(dp_dist_plan_sizes(&layout, &config, buckets, largest), 0);
}

START_TEST(overlapped_ddp_and_stage_1_cut_segments_at_the_caps)
{
    /* From the end: 50 of the last + 50 of the middle; 400; 400; then 450 floats are left, under
     * 1.5 caps: the middle's first 150 and the whole first segment in one. */
    for (int zero = 0; zero <= 1; zero++) {
        int buckets;
        size_t largest;
        plan(1, zero, &buckets, &largest);
        ck_assert_int_eq(buckets, 4);
        ck_assert_uint_eq(largest, 450);
    }
}
END_TEST

START_TEST(whole_segments_without_overlap_and_under_stages_2_and_3)
{
    /* The last 50 < 100, so the middle joins it (1050 >= 100: closed); then the first's 300. */
    static const struct { int overlap, zero; } cases[] = {{0, 0}, {0, 1}, {1, 2}, {1, 3}, {0, 3}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int buckets;
        size_t largest;
        plan(cases[i].overlap, cases[i].zero, &buckets, &largest);
        ck_assert_int_eq(buckets, 2);
        ck_assert_uint_eq(largest, 1050);
    }
}
END_TEST

START_TEST(default_caps_give_one_small_first_bucket)
{
    /* 1 MiB first, then 25 MiB: 1350 floats are one bucket. */
    dp_dist_config config = dp_dist_default_config(1, 25.0, 0, layout.total);
    ck_assert(config.first_bucket_mb == 1.0);
    int buckets;
    size_t largest;
    ck_assert_int_eq(dp_dist_plan_sizes(&layout, &config, &buckets, &largest), 0);
    ck_assert_int_eq(buckets, 1);
    ck_assert_uint_eq(largest, 1350);
    ck_assert(dp_dist_default_config(1, 0.5, 0, layout.total).first_bucket_mb == 0.5); /* never above the cap */
}
END_TEST

START_TEST(auto_caps_are_ddps_25_or_an_eighth_of_the_gradients_at_least_1)
{
    static const struct { double mib, cap; } cases[] = {{1000.0, 25.0}, {200.0, 25.0}, {80.0, 10.0}, {7.5, 1.0},
                                                         {0.01, 1.0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dp_dist_config config = dp_dist_default_config(1, 0.0, 0, (size_t)(cases[i].mib * MIB_FLOATS));
        ck_assert_double_eq_tol(config.bucket_mb, cases[i].cap, 1e-9);
        ck_assert(config.first_bucket_mb == 1.0);
    }
    ck_assert(dp_dist_default_config(1, 3.0, 0, (size_t)(80 * MIB_FLOATS)).bucket_mb == 3.0); /* as given */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("buckets");
    TCase *tc = tcase_create("plan");
    tcase_add_test(tc, overlapped_ddp_and_stage_1_cut_segments_at_the_caps);
    tcase_add_test(tc, whole_segments_without_overlap_and_under_stages_2_and_3);
    tcase_add_test(tc, default_caps_give_one_small_first_bucket);
    tcase_add_test(tc, auto_caps_are_ddps_25_or_an_eighth_of_the_gradients_at_least_1);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
