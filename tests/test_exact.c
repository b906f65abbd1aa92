/* --exact's sums (src/strategy/exact_sum.c): the accumulator never overflows within its stated
 * bound, the int64 digits' sums over any W up to the most ranks --exact takes never leave int64,
 * every order of adding (within a rank, and over ranks through any all-reduce's integer
 * additions of digits) gives the same bits, and those bits are the exact sum of the values
 * rounded to multiples of 2^-48, then to float (an independent 128-bit reference). */
#include "src/strategy/exact_sum.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

__extension__ typedef __int128 wide;

/* The reference: v x 2^48 rounded to the nearest integer (ties to even), in 128 bits. */
static wide reference_units(float v)
{
    return (wide)rintl(ldexpl((long double)v, DP_EXACT_FRACTION_BITS));
}

/* The float of units x 2^-48 as the library promises it: the nearest integer (ties up) plus a
 * fraction in (-1/2, 1/2], added in double, rounded to float. */
static float reference_float(wide units)
{
    wide one = (wide)1 << DP_EXACT_FRACTION_BITS, half = one / 2;
    wide fraction = units % one; /* the sign of units */
    fraction += fraction > half ? -one : fraction <= -half ? one : 0;
    double whole = (double)((units - fraction) / one);
    return (float)(whole + ldexp((double)fraction, -DP_EXACT_FRACTION_BITS));
}

static int same_bits(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* A float of random sign and magnitude between 2^-60 and 2^20 (zero sometimes). */
static float random_value(uint64_t *state)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    uint64_t r = *state >> 11;
    if (r % 17 == 0)
        return 0.0f;
    float mantissa = 1.0f + (float)(r & 0xffffff) / 16777216.0f;
    int exponent = (int)((r >> 24) % 81) - 60;
    return ((r >> 40) & 1 ? -1.0f : 1.0f) * ldexpf(mantissa, exponent);
}

/* A value's units both ways (the conversion to int64 of AVX-512DQ's build, the two roundings
 * of the others, whichever this CPU runs the loops with) against the reference, over every size
 * the units hold: below 2^-24 (rounded, ties to even among them), up to just below 2^13, both
 * signs, zero. */
START_TEST(a_values_units_are_the_reference_both_ways)
{
    uint64_t state = 2718;
    const float special[] = {0.0f, -0.0f, 0x1p-49f, 0x3p-49f, -0x1p-49f, 0x1p-50f, 0x1.8p-48f, 0x1p-25f + 0x1p-49f,
                             nextafterf(0x1p13f, 0.0f), -nextafterf(0x1p13f, 0.0f), 0x1p-24f, 0x1.fffffep-25f};
    for (int i = 0; i < 20000; i++) {
        float v = i < (int)(sizeof special / sizeof *special) ? special[i] : ldexpf(random_value(&state), -8);
        for (int converts = 0; converts <= 1; converts++)
            ck_assert_msg((wide)dp_exact_value_units(v, converts) == reference_units(v), "%a (converts %d)", (double)v,
                          converts);
    }
}
END_TEST

/* An accumulator of n sums (freed with dp_exact_acc_close). */
static dp_exact_acc open_acc(size_t n)
{
    dp_exact_acc acc;
    ck_assert_int_eq(dp_exact_acc_open(&acc, n), 0);
    return acc;
}

/* The host sums of an accumulator alone. */
static dp_exact_host_sums sums_of(const dp_exact_acc *acc)
{
    return (dp_exact_host_sums){.acc = acc};
}

START_TEST(the_bound_holds_at_its_worst_case)
{
    /* The stated bound: 2^13 terms of |v| < 2^32 in steps of 2^-8 need 53 bits, a double's. */
    ck_assert(ldexp((double)DP_EXACT_MAX_TERMS, DP_EXACT_INTEGER_BITS + 8) <= ldexp(1.0, 53));
    /* Each piece at its largest: the largest value (the 2^-8 piece's largest) and 2^-9 (the
     * 2^-48 piece's largest, a tie rounded to 0 in the piece above); both signs. */
    const float worst[] = {nextafterf(4294967296.0f, 0.0f), 0x1p-9f, -nextafterf(4294967296.0f, 0.0f), -0x1p-9f};
    enum { N = sizeof worst / sizeof *worst };
    dp_exact_acc acc = open_acc(N);
    for (size_t t = 0; t < DP_EXACT_MAX_TERMS; t++)
        dp_exact_add(&acc, worst, t == 0);
    float out[N];
    dp_exact_to_floats(sums_of(&acc), N, out);
    for (int i = 0; i < N; i++) {
        wide expected = reference_units(worst[i]) * (wide)DP_EXACT_MAX_TERMS;
        ck_assert_msg(same_bits(out[i], reference_float(expected)), "value %d: %a after 2^13 terms, want %a", i,
                      (double)out[i], (double)reference_float(expected));
        for (int p = 0; p < DP_EXACT_PIECES; p++)
            ck_assert(fabs(acc.pieces[p * N + i]) <= ldexp(1.0, 45)); /* every piece within the bound */
    }
    /* The same sums as digits on 2 and 256 ranks (rank 0 holding them, the others zeros). */
    for (int ranks = 2; ranks <= DP_EXACT_MAX_RANKS; ranks *= 128) {
        int64_t *d = malloc(2 * N * sizeof *d);
        int digits = dp_exact_digits_for(dp_exact_first_digits(sums_of(&acc), N, ranks, 2, d), ranks);
        ck_assert_int_le(digits, dp_exact_max_digits(ranks));
        float back[N];
        dp_exact_to_digits(sums_of(&acc), N, ranks, 0, digits, d);
        dp_exact_from_digits(d, N, ranks, digits, back);
        ck_assert_mem_eq(back, out, sizeof out);
        free(d);
    }
    dp_exact_acc_close(&acc);
}
END_TEST

/* The bounds exact_sum.h states, for every W --exact takes: a rank's digit 0 is at most
 * 2^(b-1) + 2^47 and the others at most 2^(95-b), so W of them (every partial sum an all-reduce
 * forms) stay inside int64, and the summed digits above 0 stay inside what the way back reads
 * exactly (2^51 units); two digits hold any sum, one every sum below 2^(b-50). */
static wide digit_bound(int ranks, int k)
{
    int b = dp_exact_digit_bits(ranks);
    return k == 0 ? ((wide)1 << (b - 1)) + ((wide)1 << 47) : (wide)1 << (95 - b);
}

START_TEST(digit_sums_stay_inside_int64_for_every_world_size)
{
    for (int ranks = 1; ranks <= DP_EXACT_MAX_RANKS; ranks++) {
        int b = dp_exact_digit_bits(ranks);
        ck_assert((wide)ranks * digit_bound(ranks, 0) < (wide)INT64_MAX);
        ck_assert((wide)ranks * digit_bound(ranks, 1) < (wide)1 << 51);
        ck_assert_int_ge(b - DP_EXACT_FRACTION_BITS, 7); /* digit 0's unit above: 2^(b-48), its half below 2^51 */
        ck_assert_int_eq(dp_exact_max_digits(ranks), 2); /* the widest sum: below 2^46 in units of 2^-48, a sign */
        ck_assert_int_ge(2 * b, 46 + DP_EXACT_FRACTION_BITS + 1);
        ck_assert_int_eq(dp_exact_digits_for(b - 1, ranks), 1);
    }
}
END_TEST

/* The largest sums (2^13 terms of values up to the largest, of both signs, and smaller ones),
 * as digits on W = 1, 2, 3, 8, 255 and 256 ranks: every digit within its bound and those above
 * what dp_exact_digits_for asks for zero, as one rank's (which may compute every shard); and W
 * ranks sharing the 2^13 terms alike add (in 128 bits) to what int64 holds and decode to the
 * reference's float of the whole sum. */
static int64_t *digits_of(const float *values, size_t n, size_t terms, int ranks, int *needed)
{
    dp_exact_acc acc = open_acc(n);
    for (size_t t = 0; t < terms; t++)
        dp_exact_add(&acc, values, t == 0);
    int64_t *d = malloc(2 * n * sizeof *d);
    *needed = dp_exact_digits_for(dp_exact_first_digits(sums_of(&acc), n, ranks, 2, d), ranks);
    dp_exact_acc_close(&acc);
    return d;
}

START_TEST(digits_stay_within_their_bounds_at_the_largest_sums)
{
    enum { N = 2048 };
    uint64_t state = 4242;
    float values[N];
    for (int i = 0; i < N; i++) {
        float v = random_value(&state);
        values[i] = i % 3 == 0 ? nextafterf(4294967296.0f, 0.0f) * (i % 2 ? -1.0f : 1.0f)
                    : i % 3 == 1 ? ldexpf(v, 11) : v; /* the largest, up to 2^31, and below */
    }
    const int worlds[] = {1, 2, 3, 8, 255, 256};
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
        int ranks = worlds[w], needed;
        int64_t *d = digits_of(values, N, DP_EXACT_MAX_TERMS, ranks, &needed);
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < N; i++) {
                wide digit = d[(size_t)k * N + i];
                ck_assert_msg(digit <= digit_bound(ranks, k) && -digit <= digit_bound(ranks, k),
                              "W=%d digit %d of element %d beyond its bound", ranks, k, i);
                ck_assert(k < needed || digit == 0);
            }
        free(d);
        size_t share = DP_EXACT_MAX_TERMS / (size_t)ranks; /* each rank's terms: W of them at most 2^13 */
        d = digits_of(values, N, share, ranks, &needed);
        for (size_t j = 0; j < 2 * (size_t)N; j++) {
            wide sum = (wide)d[j] * ranks;
            ck_assert(sum <= INT64_MAX && sum >= -(wide)INT64_MAX);
            d[j] = (int64_t)sum;
        }
        float back[N], expected[N];
        dp_exact_from_digits(d, N, ranks, 2, back);
        for (int i = 0; i < N; i++)
            expected[i] = reference_float(reference_units(values[i]) * (wide)(share * (size_t)ranks));
        ck_assert_msg(memcmp(back, expected, sizeof back) == 0, "W=%d: the ranks' summed digits decode wrongly", ranks);
        free(d);
    }
}
END_TEST

START_TEST(values_out_of_range_make_the_sum_nan)
{
    const float bad[] = {4294967296.0f, -INFINITY, NAN, 1.0f};
    dp_exact_acc acc = open_acc(4);
    dp_exact_add(&acc, bad, 1);
    float out[4];
    dp_exact_to_floats(sums_of(&acc), 4, out);
    for (int i = 0; i < 3; i++)
        ck_assert(isnan(out[i]));
    ck_assert(out[3] == 1.0f);
    int count = dp_exact_max_digits(2);
    int64_t *digits = malloc((size_t)count * 4 * sizeof *digits), flags[4] = {0};
    float back[4];
    ck_assert_int_eq(dp_exact_first_digits(sums_of(&acc), 4, 2, count, digits), -1);
    dp_exact_to_digits(sums_of(&acc), 4, 2, 0, count, digits);
    for (int k = 0; k < count; k++)
        for (int i = 0; i < 4; i++)
            ck_assert(i < 3 ? digits[k * 4 + i] == DP_EXACT_MARK : digits[k * 4 + i] != DP_EXACT_MARK);
    dp_exact_from_digits(digits, 4, 2, count, back);
    for (int i = 0; i < 3; i++)
        ck_assert(isnan(back[i]));
    ck_assert(back[3] == 1.0f);
    /* As the strategy sends them: the marks become flags, the digits zeros; marked back, NaN again. */
    dp_exact_take_marks(digits, 4, 0, count, flags);
    for (int i = 0; i < 4; i++)
        ck_assert(flags[i] == (i < 3) && digits[i] != DP_EXACT_MARK && digits[4 + i] != DP_EXACT_MARK);
    dp_exact_put_marks(digits, 4, flags);
    dp_exact_from_digits(digits, 4, 2, count, back);
    ck_assert(isnan(back[0]) && isnan(back[1]) && isnan(back[2]) && back[3] == 1.0f);
    free(digits);
    dp_exact_acc_close(&acc);
}
END_TEST

/* Four chunks of elements (the last one short), each summing differently: small values (in
 * units throughout), values of any size (in pieces from the first term), small values with one
 * large value in the middle term (units, then pieces from there), and values of 2^4 to 2^5 (at
 * W = 1 their sums pass the units' limit late in the step; at W = 2 a rank's stay in units
 * past what one digit carries, so its digits come from the pieces). */
enum { VALUES = 3 * DP_EXACT_CHUNK + 64, TERMS = 300 };

static float table_value(uint64_t *state, int t, int i)
{
    float v = random_value(state);
    switch (i / DP_EXACT_CHUNK) {
    case 0: return ldexpf(v, -22); /* below 2^-2 */
    case 1: return v;
    case 2: return t == TERMS / 2 && i % 7 == 0 ? 0x1p20f : ldexpf(v, -22);
    default: return copysignf(16.0f + fmodf(fabsf(v), 16.0f), v);
    }
}

/* The sum of terms [first, last) of the table added in order (reverse: last first). */
static void accumulate(const float *table, int first, int last, int reverse, dp_exact_acc *acc)
{
    dp_exact_clear(acc);
    for (int t = first; t < last; t++)
        dp_exact_add(acc, table + (size_t)(reverse ? first + last - 1 - t : t) * VALUES, t == first);
}

START_TEST(any_split_over_ranks_and_any_order_give_the_reference_bits)
{
    uint64_t state = 12345;
    float *table = malloc((size_t)TERMS * VALUES * sizeof *table);
    for (int t = 0; t < TERMS; t++)
        for (int i = 0; i < VALUES; i++)
            table[(size_t)t * VALUES + i] = table_value(&state, t, i);
    float expected[VALUES];
    for (int i = 0; i < VALUES; i++) {
        wide units = 0;
        for (int t = 0; t < TERMS; t++)
            units += reference_units(table[(size_t)t * VALUES + i]);
        expected[i] = reference_float(units);
    }
    dp_exact_acc acc = open_acc(VALUES);
    float one_rank[VALUES];
    accumulate(table, 0, TERMS, 1, &acc);
    dp_exact_to_floats(sums_of(&acc), VALUES, one_rank);
    ck_assert_mem_eq(one_rank, expected, sizeof expected);
    ck_assert(acc.bound[0] < DP_EXACT_UNITS_LIMIT && acc.bound[3] == INFINITY); /* the cases above */
    for (int ranks = 2; ranks <= 8; ranks++) {
        int digits = dp_exact_max_digits(ranks);
        size_t size = (size_t)digits * VALUES;
        int64_t *mine = malloc((size_t)ranks * size * sizeof *mine), *forward = calloc(size, sizeof *forward),
                *backward = calloc(size, sizeof *backward);
        float out[VALUES];
        for (int r = 0; r < ranks; r++) { /* contiguous runs of terms, as the engine's shards */
            int first = TERMS * r / ranks, last = TERMS * (r + 1) / ranks;
            accumulate(table, first, last, r % 2, &acc);
            /* In two calls split at a digit of its own (none, one or all in the first), as a
             * rank sends more digits when the ranks find the first ones too few. */
            int split = r % (digits + 1);
            dp_exact_to_digits(sums_of(&acc), VALUES, ranks, 0, split, mine + (size_t)r * size);
            dp_exact_to_digits(sums_of(&acc), VALUES, ranks, split, digits, mine + (size_t)r * size);
        }
        /* Integer sums over the ranks in two orders, as different all-reduce algorithms add. */
        for (size_t j = 0; j < size; j++)
            for (int r = 0; r < ranks; r++) {
                forward[j] += mine[(size_t)r * size + j];
                backward[j] += mine[(size_t)(ranks - 1 - r) * size + j];
            }
        ck_assert_mem_eq(forward, backward, size * sizeof *forward);
        dp_exact_from_digits(forward, VALUES, ranks, digits, out);
        ck_assert_msg(memcmp(out, expected, sizeof out) == 0, "%d ranks differ from the reference", ranks);
        free(mine);
        free(forward);
        free(backward);
    }
    dp_exact_acc_close(&acc);
    free(table);
}
END_TEST

/* The bits of the largest |sum| of n 128-bit sums (dp_exact_magnitude_of's measure, exactly). */
static int reference_bits(const wide *units, size_t n)
{
    wide largest = 0;
    for (size_t i = 0; i < n; i++)
        largest = units[i] > largest ? units[i] : -units[i] > largest ? -units[i] : largest;
    int bits = 0;
    while (largest >> bits)
        bits++;
    return bits ? bits + 1 : 0;
}

/* The pass that makes the first digits and finds the sums' size, over more elements than its
 * chunks and not a multiple of them, with chunks in units and in pieces: the digits of the
 * separate pass, and a size that bounds the sums' (exactly theirs where all are in units). */
START_TEST(first_digits_in_one_pass_are_the_separate_passes)
{
    enum { N = 1500, TERMS_ADDED = 3, RANKS = 3 };
    for (int small = 0; small <= 1; small++) {
        uint64_t state = 777;
        dp_exact_acc acc = open_acc(N);
        float values[N];
        wide sums[N] = {0};
        for (int t = 0; t < TERMS_ADDED; t++) {
            for (int i = 0; i < N; i++) {
                values[i] = small || i < DP_EXACT_CHUNK ? ldexpf(random_value(&state), -20) : random_value(&state);
                sums[i] += reference_units(values[i]);
            }
            dp_exact_add(&acc, values, t == 0);
        }
        int digits = dp_exact_max_digits(RANKS);
        int64_t *separate = malloc((size_t)digits * N * sizeof *separate),
                *together = malloc((size_t)digits * N * sizeof *together);
        dp_exact_to_digits(sums_of(&acc), N, RANKS, 0, digits, separate);
        int bits = dp_exact_first_digits(sums_of(&acc), N, RANKS, digits, together);
        ck_assert_mem_eq(together, separate, (size_t)digits * N * sizeof *together);
        if (small)
            ck_assert_int_eq(bits, reference_bits(sums, N));
        else
            ck_assert_int_ge(bits, reference_bits(sums, N));
        free(separate);
        free(together);
        dp_exact_acc_close(&acc);
    }
}
END_TEST

/* The accumulator's bytes (pieces and bounds) and its units, to check that a pass only read it. */
static void *copy_of(const dp_exact_acc *acc, size_t n)
{
    size_t chunks = (n + DP_EXACT_CHUNK - 1) / DP_EXACT_CHUNK;
    char *copy = malloc(DP_EXACT_PIECES * n * sizeof(double) + chunks * sizeof(double));
    memcpy(copy, acc->pieces, DP_EXACT_PIECES * n * sizeof(double));
    memcpy(copy + DP_EXACT_PIECES * n * sizeof(double), acc->bound, chunks * sizeof(double));
    return copy;
}

/* A rank's last shard left pending (never added into the accumulator) and added by the passes
 * that read the sums: the digits, size and floats of the accumulator it was added into, with
 * the accumulator unchanged; the only shard pending (no accumulator) likewise; the floats
 * written over the pending shard itself. Over chunks and their remainder, with sums in units
 * and in pieces, a pending shard that takes units past their limit, and values out of range
 * and not finite in the pending shard in one case. */
START_TEST(a_pending_last_shard_gives_the_sums_it_was_added_into)
{
    enum { N = 1500, RANKS = 2 };
    int digits = dp_exact_max_digits(RANKS);
    for (int alone = 0; alone <= 1; alone++)
        for (int kind = 0; kind < 3; kind++) { /* any sizes; small; small then past the limit and specials */
            uint64_t state = 4242 + 3 * (uint64_t)alone + (uint64_t)kind;
            dp_exact_acc acc = open_acc(N), added = open_acc(N);
            float last[N], in_place[N], want[N], got[N];
            for (int t = 0; !alone && t < 2; t++) {
                for (int i = 0; i < N; i++)
                    last[i] = kind ? ldexpf(random_value(&state), -12) : random_value(&state);
                dp_exact_add(&acc, last, t == 0);
                dp_exact_add(&added, last, t == 0);
            }
            for (int i = 0; i < N; i++)
                /* kind 2: the first chunk's sums not finite or out of range, the second's past
                 * what units in one digit carry at W = 2, the third's small */
                last[i] = kind == 2 && i % 97 == 5 && i < 2 * DP_EXACT_CHUNK
                              ? (i >= DP_EXACT_CHUNK ? 0x1.8p12f : (const float[]){NAN, INFINITY, 0x1p40f}[i % 3])
                          : kind ? ldexpf(random_value(&state), -12)
                                 : random_value(&state);
            void *before = copy_of(&acc, N);
            dp_exact_add(&added, last, alone);
            dp_exact_host_sums pending = {.acc = alone ? NULL : &acc, .last = last}, reference = sums_of(&added);
            int64_t *a = malloc((size_t)digits * N * sizeof *a), *b = malloc((size_t)digits * N * sizeof *b);
            int bits = dp_exact_first_digits(pending, N, RANKS, 1, a);
            ck_assert_int_eq(bits, dp_exact_first_digits(reference, N, RANKS, 1, b));
            ck_assert_mem_eq(a, b, N * sizeof *a);
            dp_exact_to_digits(pending, N, RANKS, 1, digits, a);
            dp_exact_to_digits(reference, N, RANKS, 1, digits, b);
            ck_assert_mem_eq(a, b, (size_t)digits * N * sizeof *a);
            dp_exact_to_floats(reference, N, want);
            dp_exact_to_floats(pending, N, got);
            ck_assert_mem_eq(got, want, sizeof want);
            memcpy(in_place, last, sizeof last);
            dp_exact_to_floats((dp_exact_host_sums){.acc = pending.acc, .last = in_place}, N, in_place);
            ck_assert_mem_eq(in_place, want, sizeof want);
            if (!alone) { /* only read */
                void *after = copy_of(&acc, N);
                ck_assert_mem_eq(after, before, DP_EXACT_PIECES * N * sizeof(double) + 3 * sizeof(double));
                free(after);
            }
            free(before);
            dp_exact_acc_close(&acc);
            dp_exact_acc_close(&added);
            free(a);
            free(b);
        }
}
END_TEST

/* Sums the accumulator holds in units but one digit of a large world cannot (2^10 to 2^13; one
 * digit carries 2^5 at W = 256): their digits come from the pieces, within the digits' bounds,
 * and decode to the reference. */
START_TEST(units_beyond_one_digit_give_the_reference_on_many_ranks)
{
    enum { N = 100, TERMS_ADDED = 4 };
    uint64_t state = 5150;
    dp_exact_acc acc = open_acc(N);
    wide sums[N] = {0};
    float values[N], back[N], expected[N];
    for (int t = 0; t < TERMS_ADDED; t++) {
        for (int i = 0; i < N; i++) {
            values[i] = copysignf(1024.0f + fmodf(fabsf(random_value(&state)), 1024.0f), random_value(&state));
            sums[i] += reference_units(values[i]);
        }
        dp_exact_add(&acc, values, t == 0);
    }
    ck_assert(acc.bound[0] < DP_EXACT_UNITS_LIMIT);
    for (int i = 0; i < N; i++)
        expected[i] = reference_float(sums[i]);
    for (int ranks = 16; ranks <= DP_EXACT_MAX_RANKS; ranks *= 16) {
        int64_t d[2 * N];
        int digits = dp_exact_digits_for(dp_exact_first_digits(sums_of(&acc), N, ranks, 2, d), ranks);
        ck_assert_int_eq(digits, 2);
        for (int k = 0; k < 2; k++) /* so that W of them add within int64 */
            for (int i = 0; i < N; i++)
                ck_assert((wide)d[k * N + i] <= digit_bound(ranks, k) && -(wide)d[k * N + i] <= digit_bound(ranks, k));
        dp_exact_from_digits(d, N, ranks, 2, back); /* one rank's digits: the sums themselves */
        ck_assert_msg(memcmp(back, expected, sizeof back) == 0, "W=%d: the digits decode wrongly", ranks);
    }
    dp_exact_acc_close(&acc);
}
END_TEST

/* The usual step's single digit back to float by its short path: bitwise the general path's
 * (the same sums as two digits, the upper one 0), on digits of every size up to the bound at
 * W = 2, halfway cases of the rounding to double (and one that rounding straight to float would
 * take the other way), zero and the mark. */
START_TEST(a_single_digit_gives_the_general_paths_float)
{
    enum { N = 4096, RANKS = 2 };
    const int64_t bound = (int64_t)1 << 61; /* digit 0's sums at W = 2 when one digit holds them */
    static int64_t digits[2 * N];
    uint64_t state = 31337;
    for (int i = 0; i < N; i++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        int64_t magnitude = (int64_t)(state >> (3 + (state >> 58) % 61)); /* below 2^61 down to 0 or 1 */
        digits[i] = (state >> 2) & 1 ? -(magnitude % bound) : magnitude % bound;
    }
    const int64_t special[] = {0, 1, -1, bound - 1, -(bound - 1), ((int64_t)1 << 60) + 128, ((int64_t)1 << 60) + 384,
                               ((int64_t)1 << 60) + 129, -((int64_t)1 << 60) - 128, ((int64_t)1 << 60) + ((int64_t)1 << 36) + 1, DP_EXACT_MARK};
    memcpy(digits, special, sizeof special);
    float single[N], general[N];
    dp_exact_from_digits(digits, N, RANKS, 1, single); /* digits[N..2N) are 0: the upper digit */
    dp_exact_from_digits(digits, N, RANKS, 2, general);
    ck_assert(isnan(single[10]) && isnan(general[10]));
    ck_assert_mem_eq(single, general, 10 * sizeof *single);
    ck_assert_mem_eq(single + 11, general + 11, (N - 11) * sizeof *single);
}
END_TEST

START_TEST(rounded_loss_sums_add_exactly_in_any_order)
{
    uint64_t state = 99;
    enum { N = 1000 };
    double values[N], forward = 0.0, backward = 0.0;
    for (int i = 0; i < N; i++) {
        values[i] = dp_exact_round_total(fabs((double)random_value(&state)) * 1e-3);
        ck_assert(values[i] == ldexp(rint(ldexp(values[i], 24)), -24)); /* a multiple of 2^-24 */
    }
    for (int i = 0; i < N; i++) {
        forward += values[i];
        backward += values[N - 1 - i];
    }
    ck_assert(forward == backward);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exact");
    TCase *tc = tcase_create("sums");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, a_values_units_are_the_reference_both_ways);
    tcase_add_test(tc, the_bound_holds_at_its_worst_case);
    tcase_add_test(tc, values_out_of_range_make_the_sum_nan);
    tcase_add_test(tc, digit_sums_stay_inside_int64_for_every_world_size);
    tcase_add_test(tc, digits_stay_within_their_bounds_at_the_largest_sums);
    tcase_add_test(tc, any_split_over_ranks_and_any_order_give_the_reference_bits);
    tcase_add_test(tc, first_digits_in_one_pass_are_the_separate_passes);
    tcase_add_test(tc, a_pending_last_shard_gives_the_sums_it_was_added_into);
    tcase_add_test(tc, units_beyond_one_digit_give_the_reference_on_many_ranks);
    tcase_add_test(tc, a_single_digit_gives_the_general_paths_float);
    tcase_add_test(tc, rounded_loss_sums_add_exactly_in_any_order);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
