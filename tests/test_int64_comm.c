/* Multi-rank: run under mpirun for W = 2, 3, 5 (tests/int64-comm-wN.sh). int64 reductions (what
 * --exact's digits travel as) for every host algorithm against MPI_Allreduce on MPI_INT64_T:
 * integer sums are exact in any order, so every algorithm must give MPI's bits exactly. The data
 * differ by rank and index and reach the largest magnitude a digit of --exact may have on W
 * ranks (2^(b-1) + 2^47 with b = 63 - ceil(log2 W), src/strategy/exact_sum.h), where every
 * partial sum of W of them still fits in int64. */
#include "dp/comm.h"
#include "dp/error.h"
#include "dp/partition.h"
#include "src/strategy/exact_sum.h"
#include "tests/collective_data.h"
#include "tests/testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The largest |digit| one rank sends at this world size. */
static int64_t largest_digit(void)
{
    return ((int64_t)1 << (dp_exact_digit_bits(world_size) - 1)) + ((int64_t)1 << 47);
}

/* Rank r's element i: the largest digit of either sign, values just below it, small ones and
 * zeros, in a pattern that differs by rank and index. */
static int64_t value_of(int rank, size_t i)
{
    int64_t top = largest_digit(), sign = (i + (size_t)rank) % 2 ? -1 : 1;
    switch ((i * 7 + (size_t)rank * 3) % 5) {
    case 0:
        return sign * top;
    case 1:
        return sign * (top - (int64_t)(i % 1021) - rank);
    case 2:
        return sign * (int64_t)((i * 2654435761u + (size_t)rank * 40503u) % ((size_t)1 << 40));
    case 3:
        return 0;
    default:
        return sign * ((int64_t)1 << 47) + (int64_t)i - rank;
    }
}

/* count values and a guard of sentinels after them (as collective_data.c's guarded floats). */
enum { GUARD = 4 };
static const int64_t SENTINEL = -77777777;

static int64_t *input_of(size_t count)
{
    int64_t *buf = malloc((count + GUARD) * sizeof *buf);
    ck_assert_ptr_nonnull(buf);
    for (size_t i = 0; i < count; i++)
        buf[i] = value_of(world_rank, i);
    for (size_t g = 0; g < GUARD; g++)
        buf[count + g] = SENTINEL;
    return buf;
}

static int guard_of_int64_intact(const int64_t *buf, size_t count)
{
    for (size_t g = 0; g < GUARD; g++)
        if (buf[count + g] != SENTINEL)
            return 0;
    return 1;
}

static int run_int64(dp_comm *c, dp_collective kind, int64_t *buf, size_t count)
{
    /* A request's buffer is typed as floats; int64 elements are read as what they are. */
    dp_request_args a = {.kind = kind, .buf = (float *)buf, .count = count, .label = "int64 data",
                         .dtype = DP_DTYPE_I64};
    dp_request *q = NULL;
    int status = dp_comm_start(c, &a, &q);
    return all_ok(status == 0 && dp_request_wait(&q) == 0);
}

/* One all-reduce and one reduce-scatter of count values: MPI's sums bit for bit (the
 * reduce-scatter on this rank's block), the guard intact, every rank alike. */
static void check_count(dp_comm *c, const char *name, size_t count)
{
    int64_t *expected = input_of(count);
    MPI_Allreduce(MPI_IN_PLACE, expected, (int)count, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    for (int kind = DP_ALLREDUCE; kind <= DP_REDUCE_SCATTER; kind++) {
        int64_t *buf = input_of(count);
        ck_assert_msg(run_int64(c, kind, buf, count), "%s W=%d count %zu: %s", name, world_size, count,
                      dp_last_error());
        dp_range r = kind == DP_ALLREDUCE ? (dp_range){0, count} : dp_partition(count, world_size, world_rank);
        size_t bytes = dp_range_size(r) * sizeof *buf;
        ck_assert_msg(all_ok(memcmp(buf + r.begin, expected + r.begin, bytes) == 0 && guard_of_int64_intact(buf, count)),
                      "%s %s W=%d count %zu: not MPI_Allreduce's int64 sums", name,
                      kind == DP_ALLREDUCE ? "all-reduce" : "reduce-scatter", world_size, count);
        if (kind == DP_ALLREDUCE)
            ck_assert(dp_test_same_on_every_rank(buf, bytes));
        free(buf);
    }
    free(expected);
}

static void check_algorithm(dp_comm *c, const char *name)
{
    size_t counts[COUNT_CASES];
    counts_for_world(counts);
    for (int k = 0; k < COUNT_CASES; k++)
        check_count(c, name, counts[k]);
}

START_TEST(every_algorithm_sums_int64_as_mpi_does)
{
    /* The data's sums fit: W digits at their largest stay within int64. */
    ck_assert(world_size * (double)largest_digit() < 0x1p63);
    for_every_host_algorithm(check_algorithm);
    /* ring-pipelined with segments smaller than a block: int64 segments hold half the floats' elements. */
    dp_comm c;
    open_comm(&c, "ring-pipelined");
    c.segment_bytes = 4096;
    check_algorithm(&c, "ring-pipelined, 4 KiB segments");
    dp_comm_free(&c);
}
END_TEST

/* Partial sums that leave int64 come back when the total fits: the additions wrap (as unsigned)
 * instead of overflowing, in any order. The reference is the rank's values summed here. */
START_TEST(partial_sums_may_wrap_when_the_total_fits)
{
    const size_t count = 1000;
    int64_t *buf = malloc(count * sizeof *buf), *expected = calloc(count, sizeof *expected);
    for (size_t i = 0; i < count; i++) {
        /* Rank 0 near the top; each odd rank pushes past it, the even rank after pulls back. */
        for (int r = 0; r < world_size; r++) {
            int64_t push = r % 2 ? (r + 1 < world_size ? 1000 + (int64_t)i : 0) : -1000 - (int64_t)i;
            uint64_t v = r == 0 ? (uint64_t)INT64_MAX - 500 - i : (uint64_t)push;
            if (r == world_rank)
                buf[i] = (int64_t)v;
            expected[i] = (int64_t)((uint64_t)expected[i] + v);
        }
    }
    const char *names[] = {"ring", "rhd", "naive", "rd"};
    for (size_t n = 0; n < sizeof names / sizeof *names; n++) {
        dp_comm c;
        open_comm(&c, names[n]);
        int64_t *mine = malloc(count * sizeof *mine);
        memcpy(mine, buf, count * sizeof *mine);
        ck_assert(run_int64(&c, DP_ALLREDUCE, mine, count));
        ck_assert_msg(all_ok(memcmp(mine, expected, count * sizeof *mine) == 0), "%s W=%d: wrapped sums differ",
                      names[n], world_size);
        free(mine);
        dp_comm_free(&c);
    }
    free(buf);
    free(expected);
}
END_TEST

START_TEST(int64_doubles_the_bytes_of_float32)
{
    const size_t count = 4096;
    const char *names[] = {"ring", "mpi"};
    for (size_t n = 0; n < 2; n++) {
        int64_t *buf = input_of(count);
        uint64_t f32 = allreduce_bytes(names[n], DP_DTYPE_F32, buf, count);
        uint64_t i64 = allreduce_bytes(names[n], DP_DTYPE_I64, buf, count);
        ck_assert_msg(f32 > 0 && i64 == 2 * f32, "%s: %llu bytes in int64 against %llu in float32", names[n],
                      (unsigned long long)i64, (unsigned long long)f32);
        free(buf);
    }
}
END_TEST

START_TEST(an_int64_all_gather_is_refused_by_name)
{
    dp_comm c;
    open_comm(&c, "ring");
    int64_t buf[4] = {0};
    dp_request *q = NULL;
    dp_request_args a = {.kind = DP_ALLGATHER, .buf = (float *)buf, .count = 4, .label = "the counters",
                         .dtype = DP_DTYPE_I64};
    ck_assert_int_eq(dp_comm_start(&c, &a, &q), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "all-gather of the counters in int64"));
    dp_comm_free(&c);
}
END_TEST

int main(int argc, char **argv)
{
    dp_test_mpi_init(&argc, &argv, &world_rank, &world_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    Suite *s = suite_create("int64-comm");
    TCase *tc = tcase_create("against-mpi");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, every_algorithm_sums_int64_as_mpi_does);
    tcase_add_test(tc, partial_sums_may_wrap_when_the_total_fits);
    tcase_add_test(tc, int64_doubles_the_bytes_of_float32);
    tcase_add_test(tc, an_int64_all_gather_is_refused_by_name);
    suite_add_tcase(s, tc);
    int failed_anywhere = dp_test_run_mpi_suite(s);
    MPI_Finalize();
    return failed_anywhere ? EXIT_FAILURE : EXIT_SUCCESS;
}
