/* Launcher variables against MPI's world: agreement passes, any contradiction names the
 * variable, its value and MPI's value. Single process: the MPI values are arguments. */
#include "dp/error.h"
#include "dp/launch_env.h"
#include "tests/testutil.h"

#include <stdlib.h>
#include <string.h>

static const char *const variables[] = {"WORLD_SIZE", "RANK", "OMPI_COMM_WORLD_RANK", "LOCAL_RANK"};
#define VARIABLE_COUNT (sizeof variables / sizeof variables[0])

/* The launcher environment: one value per entry of variables[], NULL for unset. */
static void set_launch_env(const char *const values[VARIABLE_COUNT])
{
    for (size_t i = 0; i < VARIABLE_COUNT; i++)
        if (values[i])
            setenv(variables[i], values[i], 1);
        else
            unsetenv(variables[i]);
}

static void unset_all(void)
{
    const char *const none[VARIABLE_COUNT] = {NULL};
    set_launch_env(none);
}

/* One variable set alone against MPI's rank 1 of 4, local rank 1: each must be refused with
 * a message naming the variable, its value and the phrase (MPI's value or the problem). */
static const struct {
    const char *name, *value, *phrase;
} rejected[] = {
    {"WORLD_SIZE", "2", "world size (MPI_Comm_size) 4"},
    {"RANK", "0", "rank (MPI_Comm_rank) 1"},
    {"OMPI_COMM_WORLD_RANK", "3", "rank (MPI_Comm_rank) 1"},
    {"LOCAL_RANK", "0", "(MPI_Comm_split_type) 1"},
    {"WORLD_SIZE", "", "not a non-negative integer"},
    {"WORLD_SIZE", "four", "not a non-negative integer"},
    {"RANK", "1x", "not a non-negative integer"},
    {"LOCAL_RANK", "-1", "not a non-negative integer"},
};

START_TEST(unset_variables_are_not_checked)
{
    unset_all();
    ck_assert_int_eq(dp_launch_env_check(3, 8, 1), 0);
}
END_TEST

START_TEST(variables_that_agree_with_mpi_pass)
{
    const char *const agreeing[VARIABLE_COUNT] = {"8", "3", "3", "1"};
    set_launch_env(agreeing);
    ck_assert_int_eq(dp_launch_env_check(3, 8, 1), 0);
}
END_TEST

START_TEST(a_contradiction_or_a_non_count_is_refused_naming_it)
{
    const char *name = rejected[_i].name, *value = rejected[_i].value;
    unset_all();
    setenv(name, value, 1);
    ck_assert_int_eq(dp_launch_env_check(1, 4, 1), DP_EINVAL);
    const char *message = dp_last_error();
    ck_assert_msg(strstr(message, name), "message lacks %s: %s", name, message);
    ck_assert_msg(strstr(message, value), "message lacks %s: %s", value, message);
    ck_assert_msg(strstr(message, rejected[_i].phrase), "message lacks '%s': %s",
                  rejected[_i].phrase, message);
}
END_TEST

START_TEST(one_wrong_variable_among_agreeing_ones_is_found)
{
    const char *const local_rank_wrong[VARIABLE_COUNT] = {"4", "1", NULL, "2"};
    set_launch_env(local_rank_wrong);
    ck_assert_int_eq(dp_launch_env_check(1, 4, 1), DP_EINVAL);
    ck_assert_msg(strstr(dp_last_error(), "LOCAL_RANK=2"), "%s", dp_last_error());
}
END_TEST

int main(void)
{
    Suite *s = suite_create("launch_env");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, unset_variables_are_not_checked);
    tcase_add_test(tc, variables_that_agree_with_mpi_pass);
    tcase_add_loop_test(tc, a_contradiction_or_a_non_count_is_refused_naming_it, 0,
                        sizeof rejected / sizeof rejected[0]);
    tcase_add_test(tc, one_wrong_variable_among_agreeing_ones_is_found);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
