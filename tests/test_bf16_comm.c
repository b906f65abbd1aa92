/* Multi-rank: run under mpirun for W = 2, 3, 4 (tests/bf16-comm-wN.sh). --grad-dtype bf16's
 * reductions for every host algorithm (nccl's: tests/fakecuda-grad-dtype.sh) against an independent reference: MPI_Allreduce in
 * float32 of the inputs rounded to bf16. Every partial sum rounds to bf16 (2^-8 relative at
 * most), and an element's sum goes through at most W-1 of them (the ring's and naive's chains;
 * rhd and rd fewer), so |result - reference| <= (W-1) 2^-8 sum|inputs| (+ float32's own
 * rounding of the reference); sums that bf16 holds exactly come out exact. */
#include "dp/comm.h"
#include "dp/error.h"
#include "dp/partition.h"
#include "tests/collective_data.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float bf16_round(float x)
{
    return dp_bf16_to_float(dp_bf16_from_float(x));
}

static float from_bits(uint32_t bits)
{
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

static uint32_t bits_of(float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return bits;
}

START_TEST(rounding_is_to_nearest_even)
{
    ck_assert_uint_eq(dp_bf16_from_float(1.0f), 0x3f80);
    ck_assert_uint_eq(dp_bf16_from_float(from_bits(0x3f808000)), 0x3f80);  /* tie, kept bit even: down */
    ck_assert_uint_eq(dp_bf16_from_float(from_bits(0x3f818000)), 0x3f82);  /* tie, kept bit odd: up */
    ck_assert_uint_eq(dp_bf16_from_float(from_bits(0x3f808001)), 0x3f81);  /* above the tie: up */
    ck_assert_uint_eq(dp_bf16_from_float(from_bits(0x3f807fff)), 0x3f80);  /* below it: down */
    ck_assert_uint_eq(dp_bf16_from_float(-0.0f), 0x8000);
    ck_assert_uint_eq(dp_bf16_from_float(INFINITY), 0x7f80);
    ck_assert_uint_eq(dp_bf16_from_float(-INFINITY), 0xff80);
    ck_assert_uint_eq(dp_bf16_from_float(from_bits(0x7f7fffff)), 0x7f80); /* float's largest: beyond bf16's */
    ck_assert_uint_eq(dp_bf16_from_float(from_bits(0x00018000)), 0x0002); /* subnormal tie: to even */
    ck_assert(isnan(dp_bf16_to_float(dp_bf16_from_float(NAN))));
    ck_assert(isnan(dp_bf16_to_float(dp_bf16_from_float(from_bits(0x7f800001))))); /* not rounded to infinity */
    for (uint32_t h = 0; h < 0x10000; h += 0x11) /* every bf16 survives the trip */
        if ((h & 0x7f80) != 0x7f80)
            ck_assert_uint_eq(dp_bf16_from_float(dp_bf16_to_float((uint16_t)h)), h);
}
END_TEST

/* The reference: MPI_Allreduce in float32 of the bf16-rounded inputs (and of their magnitudes). */
static float *rounded_copy(const float *input, size_t count)
{
    float *r = guarded(count);
    for (size_t i = 0; i < count; i++)
        r[i] = bf16_round(input[i]);
    return r;
}

/* Every element of r within (W-1) 2^-8 of the magnitudes' sum of the reference, and a bf16 value. */
static int within_bound(const float *got, const float *expected, const float *abs_sum, dp_range r)
{
    double roundings = (world_size - 1) * ldexp(1.0, -8); /* and their effect on later partial sums */
    double per_sum = roundings * (1.0 + roundings) + world_size * ldexp(1.0, -24);
    for (size_t i = r.begin; i < r.end; i++)
        if (fabs((double)got[i] - expected[i]) > per_sum * abs_sum[i] || (bits_of(got[i]) & 0xffffu) != 0)
            return 0;
    return 1;
}

/* Rank 0 prints what bf16 costs on count uniform inputs: the worst error the reduction adds
 * (against the float32 sum of the rounded inputs) over sum|inputs|, and the error against
 * float32's all-reduce of the inputs themselves (their rounding included), per element over
 * its |sum|: median and worst. docs/ALGORITHMS.md quotes these lines. */
static int compare_magnitudes(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report_error(const char *name, const float *got, const float *input, const float *rounded,
                         const float *abs_sum, size_t count)
{
    float *exact = mpi_sum(rounded, count, 0), *fp32 = mpi_sum(input, count, 0);
    if (world_rank == 0 && count > 1000) {
        double added = 0.0, *relative = malloc(count * sizeof *relative);
        size_t n = 0;
        for (size_t i = 0; i < count; i++) {
            double e = fabs((double)got[i] - exact[i]) / abs_sum[i];
            added = e > added ? e : added;
            if (fabs(fp32[i]) > 1e-3 * abs_sum[i]) /* leaves out sums that cancel to nearly nothing */
                relative[n++] = fabs((double)got[i] - fp32[i]) / fabs(fp32[i]);
        }
        qsort(relative, n, sizeof *relative, compare_magnitudes);
        printf("bf16 W=%d %-14s count %zu: added error <= %.2e sum|x| (bound %.2e); vs float32: median %.2e, "
               "99th percentile %.2e of |sum|\n", world_size, name, count, added,
               (world_size - 1) * ldexp(1.0, -8), relative[n / 2], relative[n - n / 100 - 1]);
        free(relative);
    }
    free(exact);
    free(fp32);
}

static int start_and_wait(dp_comm *c, dp_request_args *a)
{
    dp_request *q = NULL;
    int status = dp_comm_start(c, a, &q);
    return all_ok(status == 0 && dp_request_wait(&q) == 0);
}

/* One bf16 reduction of kind over count random floats on c: within the bound of the reference
 * on the ranks' blocks it defines, the same bits on every rank and run to run. */
static void check_random(dp_comm *c, const char *name, dp_collective kind, size_t count)
{
    float *input = random_input(count), *first = copy_of(input, count), *second = copy_of(input, count);
    float *rounded = rounded_copy(input, count);
    float *expected = mpi_sum(rounded, count, 0), *abs_sum = mpi_sum(rounded, count, 1);
    dp_request_args a = {.kind = kind, .buf = first, .count = count, .label = "bf16 data", .dtype = DP_DTYPE_BF16};
    ck_assert_msg(start_and_wait(c, &a), "%s W=%d count %zu: %s", name, world_size, count, dp_last_error());
    a.buf = second;
    ck_assert(start_and_wait(c, &a));
    dp_range r = kind == DP_ALLREDUCE ? (dp_range){0, count} : dp_partition(count, world_size, world_rank);
    ck_assert_msg(all_ok(within_bound(first, expected, abs_sum, r) && guard_intact(first, count)),
                  "%s %s W=%d count %zu: beyond (W-1) 2^-8 of MPI_Allreduce of the rounded inputs", name,
                  kind == DP_ALLREDUCE ? "all-reduce" : "reduce-scatter", world_size, count);
    if (kind == DP_ALLREDUCE)
        report_error(name, first, input, rounded, abs_sum, count);
    size_t bytes = dp_range_size(r) * sizeof(float);
    ck_assert_msg(all_ok(memcmp(first + r.begin, second + r.begin, bytes) == 0),
                  "%s W=%d count %zu: two runs differ", name, world_size, count);
    if (kind == DP_ALLREDUCE)
        ck_assert_msg(dp_test_same_on_every_rank(first, count * sizeof(float)),
                      "%s W=%d count %zu: ranks hold different results", name, world_size, count);
    free(input);
    free(first);
    free(second);
    free(rounded);
    free(expected);
    free(abs_sum);
}

/* Small integers: every partial sum is exact in bf16, so the result is MPI's, bit for bit. */
static void check_exact(dp_comm *c, const char *name, size_t count)
{
    float *buf = exact_input(count), *expected = mpi_sum(buf, count, 0);
    dp_request_args a = {.kind = DP_ALLREDUCE, .buf = buf, .count = count, .dtype = DP_DTYPE_BF16};
    ck_assert(start_and_wait(c, &a));
    ck_assert_msg(all_ok(memcmp(buf, expected, count * sizeof(float)) == 0 && guard_intact(buf, count)),
                  "%s W=%d count %zu: exact sums differ from MPI_Allreduce's", name, world_size, count);
    free(buf);
    free(expected);
}

static void check_algorithm(dp_comm *c, const char *name)
{
    size_t counts[COUNT_CASES];
    counts_for_world(counts);
    for (int k = 0; k < COUNT_CASES; k++) {
        check_exact(c, name, counts[k]);
        check_random(c, name, DP_ALLREDUCE, counts[k]);
        check_random(c, name, DP_REDUCE_SCATTER, counts[k]);
    }
}

START_TEST(every_algorithm_reduces_bf16_within_the_bound)
{
    for_every_host_algorithm(check_algorithm);
}
END_TEST

/* Buckets of a parent buffer, several in flight (as DDP's and ZeRO-2's): the ring sums each
 * element in the same order whichever bucket carries it, in bf16 as in float32. */
START_TEST(ring_buckets_in_flight_equal_the_whole_buffer)
{
    const size_t count = 100003, cuts[] = {0, 777, 40000, 99999, count};
    enum { BUCKETS = 4 };
    float *input = random_input(count), *whole = copy_of(input, count), *bucketed = copy_of(input, count);
    dp_comm c;
    open_comm(&c, "ring");
    for (int kind = DP_ALLREDUCE; kind <= DP_REDUCE_SCATTER; kind++) {
        memcpy(whole, input, count * sizeof(float));
        memcpy(bucketed, input, count * sizeof(float));
        dp_request_args a = {.kind = kind, .buf = whole, .count = count, .dtype = DP_DTYPE_BF16};
        ck_assert(start_and_wait(&c, &a));
        dp_request *q[BUCKETS];
        for (int b = BUCKETS - 1; b >= 0; b--) { /* backward order */
            dp_request_args piece = {.kind = kind, .buf = bucketed + cuts[b], .count = cuts[b + 1] - cuts[b],
                                     .parent_count = count, .parent_offset = cuts[b], .dtype = DP_DTYPE_BF16};
            ck_assert(dp_comm_start(&c, &piece, &q[b]) == 0);
        }
        for (int b = 0; b < BUCKETS; b++)
            ck_assert(dp_request_wait(&q[b]) == 0);
        dp_range r = kind == DP_ALLREDUCE ? (dp_range){0, count} : dp_partition(count, world_size, world_rank);
        ck_assert_msg(all_ok(memcmp(whole + r.begin, bucketed + r.begin, dp_range_size(r) * sizeof(float)) == 0),
                      "W=%d kind %d: bf16 buckets differ from the whole buffer", world_size, kind);
    }
    dp_comm_free(&c);
    free(input);
    free(whole);
    free(bucketed);
}
END_TEST

START_TEST(bf16_halves_the_bytes_sent)
{
    const size_t count = 4096;
    const char *names[] = {"ring", "mpi"};
    for (size_t n = 0; n < 2; n++) {
        float *buf = random_input(count);
        uint64_t f32 = allreduce_bytes(names[n], DP_DTYPE_F32, buf, count);
        uint64_t bf16 = allreduce_bytes(names[n], DP_DTYPE_BF16, buf, count);
        ck_assert_msg(f32 > 0 && bf16 * 2 == f32, "%s: %llu bytes in bf16 against %llu in float32", names[n],
                      (unsigned long long)bf16, (unsigned long long)f32);
        free(buf);
    }
}
END_TEST

START_TEST(what_bf16_does_not_take_is_refused_by_name)
{
    dp_comm c;
    open_comm(&c, "ring");
    float buf[4] = {0};
    dp_request *q = NULL;
    dp_request_args a = {.kind = DP_ALLGATHER, .buf = buf, .count = 4, .label = "the parameters", .dtype = DP_DTYPE_BF16};
    ck_assert_int_eq(dp_comm_start(&c, &a, &q), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "all-gather of the parameters in bfloat16"));
    dp_dtype d;
    ck_assert_int_eq(dp_grad_dtype_parse("fp16", &d), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "--grad-dtype 'fp16': unknown (valid: fp32 bf16)"));
    ck_assert_int_eq(dp_grad_dtype_parse("bf16", &d), 0);
    ck_assert_int_eq(d, DP_DTYPE_BF16);
    dp_comm_free(&c);
}
END_TEST

int main(int argc, char **argv)
{
    dp_test_mpi_init(&argc, &argv, &world_rank, &world_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    Suite *s = suite_create("bf16-comm");
    TCase *tc = tcase_create("against-mpi");
    tcase_add_test(tc, rounding_is_to_nearest_even);
    tcase_add_test(tc, every_algorithm_reduces_bf16_within_the_bound);
    tcase_add_test(tc, ring_buckets_in_flight_equal_the_whole_buffer);
    tcase_add_test(tc, bf16_halves_the_bytes_sent);
    tcase_add_test(tc, what_bf16_does_not_take_is_refused_by_name);
    suite_add_tcase(s, tc);
    int failed_anywhere = dp_test_run_mpi_suite(s);
    MPI_Finalize();
    return failed_anywhere ? EXIT_FAILURE : EXIT_SUCCESS;
}
