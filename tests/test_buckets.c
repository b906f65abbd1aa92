/* The bucket plan (src/strategy/strategy.c), worked by hand: backward order from the buffer's end, a
 * small first bucket, whole segments where a bucket's memory holds whole segments (ZeRO-2 and
 * 3) or nothing starts during backward (--no-overlap), and buckets cut inside segments at
 * their caps otherwise (DDP and ZeRO-1 overlapped), which the model's row-block pieces feed,
 * the last taking what would be under half a cap. */
#include "dp/strategy.h"
#include "tests/testutil.h"

#include "dp/error.h"

#include <stdlib.h>
#include <string.h>

/* Segments of 300, 1000 and 50 floats in forward order; caps of 100 floats first, then 400. */
static const size_t offsets[] = {0, 300, 1300}, counts[] = {300, 1000, 50};
static const dp_strategy_layout layout = {.segments = 3, .offset = offsets, .count = counts, .total = 1350};
#define MIB_FLOATS (1048576.0 / sizeof(float))

/* The named strategy's configuration (dp_strategy_default_config). */
static dp_strategy_config config_for(const char *name, int overlap, double bucket_mb, size_t total)
{
    dp_strategy_choice choice;
    ck_assert_msg(dp_strategy_choose(&choice, name, "the test") == 0, "%s", dp_last_error());
    return dp_strategy_default_config(&choice, overlap, bucket_mb, total);
}

/* Which flat buffers the model keeps whole under the named strategy. */
static unsigned owns(const char *name)
{
    dp_strategy_choice choice;
    ck_assert_int_eq(dp_strategy_choose(&choice, name, "the test"), 0);
    return dp_strategy_model_owns(&choice);
}

static void plan(int overlap, int zero, int *buckets, size_t *largest)
{
    char name[64];
    snprintf(name, sizeof name, "%s%s", dp_strategy_name_for_zero(zero), zero > 1 ? ":live-mb=unlimited" : "");
    dp_strategy_config config = config_for(name, overlap, 400.0 / MIB_FLOATS, layout.total);
    config.first_bucket_mb = 100.0 / MIB_FLOATS;
    size_t unit;
    ck_assert_int_eq(dp_strategy_plan_sizes(&layout, &config, 1, buckets, largest, &unit), 0);
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
    dp_strategy_config config = config_for("ddp", 1, 25.0, layout.total);
    ck_assert(config.first_bucket_mb == 1.0);
    int buckets;
    size_t largest, unit;
    ck_assert_int_eq(dp_strategy_plan_sizes(&layout, &config, 1, &buckets, &largest, &unit), 0);
    ck_assert_int_eq(buckets, 1);
    ck_assert_uint_eq(largest, 1350);
    ck_assert(config_for("ddp", 1, 0.5, layout.total).first_bucket_mb == 0.5); /* never above the cap */
}
END_TEST

/* Strategies are found by name in one table; --zero's stages are names too; an unknown name is
 * refused with the known ones. */
START_TEST(strategies_are_chosen_by_name)
{
    static const char *const names[] = {"ddp", "zero-1", "zero-2", "zero-3"};
    for (int stage = 0; stage < 4; stage++) {
        ck_assert_str_eq(dp_strategy_name_for_zero(stage), names[stage]);
        ck_assert_ptr_nonnull(dp_strategy_find(names[stage]));
    }
    ck_assert_ptr_null(dp_strategy_name_for_zero(4));
    ck_assert_ptr_null(dp_strategy_find("zero-4"));
    ck_assert_str_eq(dp_strategy_names(), "ddp, zero-1, zero-2, zero-3, local-sgd, exact, bf16-compress");
    ck_assert_uint_eq(owns("local-sgd"), 3u);
    ck_assert_ptr_nonnull(dp_strategy_find("exact"));
    ck_assert_uint_eq(owns("exact"), 3u); /* the whole model on every rank, as DDP */
    ck_assert_uint_eq(owns("ddp"), 3u);
    ck_assert_uint_eq(owns("zero-2"), 1u);
    ck_assert_uint_eq(owns("zero-3"), 0u);
    dp_strategy_choice choice;
    ck_assert_int_eq(dp_strategy_choose(&choice, "elastic-sgd", "--strategy"), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "--strategy 'elastic-sgd': no strategy 'elastic-sgd' (known: ddp, zero-1"));
}
END_TEST

START_TEST(auto_caps_are_ddps_25_or_an_eighth_of_the_gradients_at_least_1)
{
    static const struct { double mib, cap; } cases[] = {{1000.0, 25.0}, {200.0, 25.0}, {80.0, 10.0}, {7.5, 1.0},
                                                         {0.01, 1.0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dp_strategy_config config = config_for("ddp", 1, 0.0, (size_t)(cases[i].mib * MIB_FLOATS));
        ck_assert_double_eq_tol(config.bucket_mb, cases[i].cap, 1e-9);
        ck_assert(config.first_bucket_mb == 1.0);
    }
    ck_assert(config_for("ddp", 1, 3.0, (size_t)(80 * MIB_FLOATS)).bucket_mb == 3.0); /* as given */
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
    tcase_add_test(tc, strategies_are_chosen_by_name);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
