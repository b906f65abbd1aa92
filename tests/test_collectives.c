/* Multi-rank: run under mpirun for W = 1..8 (tests/collectives-wN.sh). Every all-reduce
 * algorithm, and the reduce-scatter and all-gather forms, against MPI's own collectives on
 * the counts that break block arithmetic (0, 1, W-1, W, W+1) and two large ones. A deadlock
 * on any of them fails through the script's timeout. */
#include "dp/comm.h"
#include "dp/error.h"
#include "dp/partition.h"
#include "tests/collective_data.h"
#include "tests/testutil.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*collective_fn)(dp_comm *c, float *buf, size_t count);

static const struct {
    const char *name;
    collective_fn reduce_scatter, allgather;
} block_forms[] = {
    {"ring", dp_reduce_scatter_ring, dp_allgather_ring},
    {"mpi", dp_reduce_scatter_mpi, dp_allgather_mpi},
};
#define FORM_COUNT (sizeof block_forms / sizeof block_forms[0])

/* Runs op on buf; every rank learns whether all succeeded. */
static int run_ok(collective_fn op, dp_comm *c, float *buf, size_t count)
{
    return all_ok(op(c, buf, count) == 0);
}

/* Exact inputs: the result equals MPI_Allreduce's bit for bit, and nothing past the end changes. */
static void check_exact_allreduce(dp_comm *c, const char *label, size_t count)
{
    float *buf = exact_input(count), *expected = mpi_sum(buf, count, 0);
    ck_assert_msg(run_ok(dp_comm_allreduce_sum, c, buf, count), "%s W=%d count %zu: %s", label,
                  world_size, count, dp_last_error());
    int ok = memcmp(buf, expected, count * sizeof(float)) == 0 && guard_intact(buf, count);
    ck_assert_msg(all_ok(ok), "%s W=%d count %zu: differs from MPI_Allreduce or wrote past the end",
                  label, world_size, count);
    free(buf);
    free(expected);
}

/* Rounded inputs: close to MPI_Allreduce, bitwise the same on every rank and run to run. */
static void check_random_allreduce(dp_comm *c, const char *label, size_t count)
{
    float *input = random_input(count), *first = copy_of(input, count), *second = copy_of(input, count);
    float *expected = mpi_sum(input, count, 0), *abs_sum = mpi_sum(input, count, 1);
    ck_assert(run_ok(dp_comm_allreduce_sum, c, first, count));
    ck_assert(run_ok(dp_comm_allreduce_sum, c, second, count));
    ck_assert_msg(all_ok(close_to(first, expected, abs_sum, whole(count))),
                  "%s W=%d count %zu: further from MPI_Allreduce than rounding allows", label, world_size, count);
    ck_assert_msg(dp_test_same_on_every_rank(first, count * sizeof(float)),
                  "%s W=%d count %zu: ranks hold different results", label, world_size, count);
    ck_assert_msg(all_ok(memcmp(first, second, count * sizeof(float)) == 0 && guard_intact(first, count)),
                  "%s W=%d count %zu: two runs on the same input differ", label, world_size, count);
    free(input);
    free(first);
    free(second);
    free(expected);
    free(abs_sum);
}

/* Every count on comm c, exact and rounded inputs. */
static void check_allreduce_on_every_count(dp_comm *c, const char *label)
{
    size_t counts[COUNT_CASES];
    counts_for_world(counts);
    for (int k = 0; k < COUNT_CASES; k++) {
        check_exact_allreduce(c, label, counts[k]);
        check_random_allreduce(c, label, counts[k]);
    }
}

START_TEST(every_algorithm_matches_mpi_allreduce_on_every_count)
{
    for_every_named_algorithm(check_allreduce_on_every_count);
}
END_TEST

START_TEST(pipelined_ring_is_exact_for_any_segment_size)
{
    /* 1 float, 1 float after rounding down, an odd float count, and more than any block. */
    const size_t segment_bytes[] = {4, 6, 4102, SIZE_MAX};
    size_t counts[COUNT_CASES];
    counts_for_world(counts);
    dp_comm c;
    open_comm(&c, "ring-pipelined");
    for (size_t s = 0; s < sizeof segment_bytes / sizeof *segment_bytes; s++) {
        c.segment_bytes = segment_bytes[s];
        char label[64];
        snprintf(label, sizeof label, "ring-pipelined with %zu-byte segments", segment_bytes[s]);
        for (int k = 0; k < COUNT_CASES; k++)
            if (segment_bytes[s] > 8 || counts[k] < 1000) /* a million one-float messages: slow, nothing new */
                check_exact_allreduce(&c, label, counts[k]);
    }
    dp_comm_free(&c);
}
END_TEST

/* Rank r's block after a reduce-scatter equals that block of MPI_Allreduce (exactly for
 * exact inputs, within rounding otherwise); reduce-scatter is deterministic run to run. */
static void check_reduce_scatter(dp_comm *c, size_t f, size_t count)
{
    dp_range mine = dp_partition(count, world_size, world_rank);
    size_t bytes = dp_range_size(mine) * sizeof(float);
    float *exact = exact_input(count), *expected = mpi_sum(exact, count, 0);
    ck_assert_msg(run_ok(block_forms[f].reduce_scatter, c, exact, count), "%s", dp_last_error());
    int ok = memcmp(exact + mine.begin, expected + mine.begin, bytes) == 0 && guard_intact(exact, count);
    ck_assert_msg(all_ok(ok), "reduce-scatter %s W=%d count %zu: block differs from MPI_Allreduce's",
                  block_forms[f].name, world_size, count);
    float *input = random_input(count), *first = copy_of(input, count), *second = copy_of(input, count);
    float *rounded = mpi_sum(input, count, 0), *abs_sum = mpi_sum(input, count, 1);
    ck_assert(run_ok(block_forms[f].reduce_scatter, c, first, count));
    ck_assert(run_ok(block_forms[f].reduce_scatter, c, second, count));
    ok = close_to(first, rounded, abs_sum, mine) && memcmp(first + mine.begin, second + mine.begin, bytes) == 0;
    ck_assert_msg(all_ok(ok), "reduce-scatter %s W=%d count %zu: rounded block wrong or not deterministic",
                  block_forms[f].name, world_size, count);
    free(exact);
    free(expected);
    free(input);
    free(first);
    free(second);
    free(rounded);
    free(abs_sum);
}

/* check(c, form, count) for both forms and every count. */
static void for_every_form_and_count(void (*check)(dp_comm *c, size_t form, size_t count))
{
    size_t counts[COUNT_CASES];
    counts_for_world(counts);
    dp_comm c;
    open_comm(&c, "mpi");
    for (size_t f = 0; f < FORM_COUNT; f++)
        for (int k = 0; k < COUNT_CASES; k++)
            check(&c, f, counts[k]);
    dp_comm_free(&c);
}

START_TEST(reduce_scatter_leaves_each_rank_its_summed_block)
{
    for_every_form_and_count(check_reduce_scatter);
}
END_TEST

/* Each rank fills only its own block (the rest is poison); afterwards all hold every block. */
static void check_allgather(dp_comm *c, size_t f, size_t count)
{
    float *buf = guarded(count);
    dp_range mine = dp_partition(count, world_size, world_rank);
    for (size_t i = 0; i < count; i++)
        buf[i] = i >= mine.begin && i < mine.end ? owned_value(world_rank, i) : NAN;
    ck_assert_msg(run_ok(block_forms[f].allgather, c, buf, count), "%s", dp_last_error());
    int ok = guard_intact(buf, count);
    for (int owner = 0; owner < world_size; owner++) {
        dp_range block = dp_partition(count, world_size, owner);
        for (size_t i = block.begin; i < block.end; i++)
            ok &= buf[i] == owned_value(owner, i);
    }
    ck_assert_msg(all_ok(ok), "all-gather %s W=%d count %zu: some block missing or from the wrong rank",
                  block_forms[f].name, world_size, count);
    free(buf);
}

START_TEST(allgather_gives_every_rank_every_block)
{
    for_every_form_and_count(check_allgather);
}
END_TEST

START_TEST(mpi_forms_refuse_counts_beyond_int)
{
    dp_comm c;
    open_comm(&c, "mpi");
    float unused[1];
    size_t too_many = (size_t)INT_MAX + 1;
    ck_assert_int_eq(dp_reduce_scatter_mpi(&c, unused, too_many), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "dp_reduce_scatter_mpi: count 2147483648 exceeds"));
    ck_assert_int_eq(dp_allgather_mpi(&c, unused, too_many), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "dp_allgather_mpi: count 2147483648 exceeds"));
    dp_comm_free(&c);
}
END_TEST

START_TEST(unknown_algorithm_error_lists_every_valid_name)
{
    dp_comm c;
    ck_assert_int_eq(dp_comm_init(&c, MPI_COMM_WORLD, "tree"), DP_EINVAL);
    const char *message = dp_last_error();
    ck_assert_ptr_nonnull(strstr(message, "'tree': unknown algorithm"));
    char names[1024];
    strcpy(names, dp_comm_algorithm_names());
    char *save = NULL;
    int listed = 0;
    for (char *name = strtok_r(names, " ", &save); name; name = strtok_r(NULL, " ", &save), listed++)
        ck_assert_msg(strstr(message, name) != NULL, "'%s' lacks %s", message, name);
    ck_assert_int_ge(listed, 5);
}
END_TEST

int main(int argc, char **argv)
{
    dp_test_mpi_init(&argc, &argv, &world_rank, &world_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    Suite *s = suite_create("collectives");
    TCase *tc = tcase_create("against-mpi");
    tcase_add_test(tc, every_algorithm_matches_mpi_allreduce_on_every_count);
    tcase_add_test(tc, pipelined_ring_is_exact_for_any_segment_size);
    tcase_add_test(tc, reduce_scatter_leaves_each_rank_its_summed_block);
    tcase_add_test(tc, allgather_gives_every_rank_every_block);
    tcase_add_test(tc, mpi_forms_refuse_counts_beyond_int);
    tcase_add_test(tc, unknown_algorithm_error_lists_every_valid_name);
    suite_add_tcase(s, tc);
    int failed_anywhere = dp_test_run_mpi_suite(s);
    MPI_Finalize();
    return failed_anywhere ? EXIT_FAILURE : EXIT_SUCCESS;
}
