/* --exact's sums (exact_sum.h): values rounded to a fixed grid by a rule of their own, pieces
 * that add exactly in doubles, int64 digits that add exactly as integers, one canonical form
 * of the exact sum and one rounding back. Only additions of doubles that are exact, and the
 * roundings of dp_exact_round_to, which depend on their argument alone. The arithmetic per
 * element is src/backend/exact_math.h's, which the GPU's kernels share. */
#include "config.h"

#include "src/strategy/exact_sum.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The passes over every gradient built for AVX-512, AVX2 and the baseline, the widest this CPU
 * runs chosen when the program loads (function multiversioning): their additions are exact,
 * so every build gives the same bits. */
#ifdef HAVE_CPU_LOOPS_X86
#define WIDEST_VECTORS __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define WIDEST_VECTORS
#endif
/* The chunk passes inside each build: a call per chunk would stop the vectoriser. */
#define PER_CHUNK static inline __attribute__((always_inline))

/* Elements whose working values stay in the L1 cache through all the passes over digits. */
enum { CHUNK = 512 };

WIDEST_VECTORS void dp_exact_add(double *acc, const float *values, size_t n, int first)
{
    double *restrict high = acc, *restrict low = acc + n;
    for (size_t i = 0; i < n; i++)
        dp_exact_add_value(values[i], &high[i], &low[i], first);
}

int dp_exact_digit_bits(int ranks)
{
    int log2_ranks = 0;
    while ((1 << log2_ranks) < ranks)
        log2_ranks++;
    return 63 - log2_ranks;
}

int dp_exact_digits_for(int bits, int ranks)
{
    int b = dp_exact_digit_bits(ranks);
    int digits = (bits + 1 + b - 1) / b; /* K digits hold sums of bK - 1 bits (exact_sum.h) */
    return digits > 0 ? digits : 1;
}

int dp_exact_max_digits(int ranks)
{
    /* A step's sums stay below 2^46 (DP_EXACT_MAX_TERMS x 2^32, and the low piece's 2^4). */
    return dp_exact_digits_for(46 + DP_EXACT_FRACTION_BITS, ranks);
}

/* The largest dp_exact_size_bits of n elements and `largest`. */
PER_CHUNK uint64_t largest_size(const double *high, const double *low, size_t n, uint64_t largest)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t bits = dp_exact_size_bits(high[i], low[i]);
        largest = bits > largest ? bits : largest;
    }
    return largest;
}

int dp_exact_magnitude_of(uint64_t largest_bits)
{
    double largest;
    memcpy(&largest, &largest_bits, sizeof largest);
    if (!isfinite(largest))
        return -1;
    int exponent = 0;
    frexp(largest, &exponent); /* largest < 2^exponent (an upper bound: the sum above may round up) */
    return largest > 0.0 ? exponent + 1 + DP_EXACT_FRACTION_BITS : 0;
}

WIDEST_VECTORS int dp_exact_magnitude_bits(const double *acc, size_t n)
{
    return dp_exact_magnitude_of(largest_size(acc, acc + n, n, 0));
}

/* Digit 0 (want0) and digit 1 (want1) of the sums of elements [begin, begin + n) of an
 * accumulator of `total` (its pieces already at begin), into out (digit k at out + k total +
 * begin). Inlined with constant wants, so each caller's loop makes only what it stores. */
PER_CHUNK void chunk_digits(const double *restrict high, const double *restrict low, size_t begin, size_t n,
                            size_t total, int b, int want0, int want1, int64_t *out)
{
    double next0 = dp_exact_digit_unit(b, 0), next1 = dp_exact_digit_unit(b, 1);
    int64_t *restrict digit0 = out + begin, *restrict digit1 = out + total + begin;
    for (size_t i = 0; i < n; i++) {
        double rest;
        int64_t d0 = dp_exact_first_digit(high[i], low[i], next0, &rest);
        if (want0)
            digit0[i] = d0;
        if (want1)
            digit1[i] = dp_exact_next_digit(&rest, next0, next1);
    }
}

/* Digits [first, digits) of a chunk: the accumulator is read, never changed. */
PER_CHUNK void chunk_digits_from(const double *high, const double *low, size_t begin, size_t n, size_t total, int b,
                                 int first, int digits, int64_t *out)
{
    if (first == 0 && digits == 1)
        chunk_digits(high, low, begin, n, total, b, 1, 0, out);
    else if (first == 0 && digits == 2)
        chunk_digits(high, low, begin, n, total, b, 1, 1, out);
    else if (first == 1 && digits == 2)
        chunk_digits(high, low, begin, n, total, b, 0, 1, out);
}

/* The pieces of the sums of elements [begin, begin + n) of `total`: the accumulator's where
 * nothing is pending, else with the pending shard added into the chunk's L1 locals (high_at,
 * low_at), the accumulator only read. */
PER_CHUNK void chunk_sums(dp_exact_sums sums, size_t begin, size_t n, size_t total, double *restrict high_at,
                          double *restrict low_at, const double **high, const double **low)
{
    if (!sums.last) {
        *high = sums.acc + begin;
        *low = sums.acc + total + begin;
        return;
    }
    const float *restrict last = sums.last + begin;
    if (sums.acc) {
        const double *restrict from_high = sums.acc + begin, *restrict from_low = sums.acc + total + begin;
        for (size_t i = 0; i < n; i++) {
            high_at[i] = from_high[i];
            low_at[i] = from_low[i];
            dp_exact_add_value(last[i], &high_at[i], &low_at[i], 0);
        }
    } else {
        for (size_t i = 0; i < n; i++)
            dp_exact_add_value(last[i], &high_at[i], &low_at[i], 1);
    }
    *high = high_at;
    *low = low_at;
}

WIDEST_VECTORS void dp_exact_to_digits(dp_exact_sums sums, size_t n, int ranks, int first, int digits, int64_t *out)
{
    int b = dp_exact_digit_bits(ranks);
    double high_at[CHUNK], low_at[CHUNK];
    for (size_t begin = 0; begin < n; begin += CHUNK) {
        size_t count = begin + CHUNK < n ? CHUNK : n - begin;
        const double *high, *low;
        chunk_sums(sums, begin, count, n, high_at, low_at, &high, &low);
        chunk_digits_from(high, low, begin, count, n, b, first, digits, out);
    }
}

WIDEST_VECTORS int dp_exact_first_digits(dp_exact_sums sums, size_t n, int ranks, int digits, int64_t *out)
{
    int b = dp_exact_digit_bits(ranks);
    uint64_t largest = 0;
    double high_at[CHUNK], low_at[CHUNK];
    for (size_t begin = 0; begin < n; begin += CHUNK) {
        size_t count = begin + CHUNK < n ? CHUNK : n - begin;
        const double *high, *low; /* the chunk stays in the L1 cache through both passes */
        chunk_sums(sums, begin, count, n, high_at, low_at, &high, &low);
        largest = largest_size(high, low, count, largest);
        chunk_digits_from(high, low, begin, count, n, b, 0, digits, out);
    }
    return dp_exact_magnitude_of(largest);
}

void dp_exact_take_marks(int64_t *digits_in, size_t n, int first, int digits, int64_t *flags)
{
    for (int k = first; k < digits; k++)
        for (size_t i = 0; i < n; i++)
            if (digits_in[(size_t)k * n + i] == DP_EXACT_MARK) {
                digits_in[(size_t)k * n + i] = 0;
                flags[i] = 1;
            }
}

void dp_exact_put_marks(int64_t *digit0, size_t n, const int64_t *flags)
{
    for (size_t i = 0; i < n; i++)
        digit0[i] = flags[i] ? DP_EXACT_MARK : digit0[i];
}

WIDEST_VECTORS void dp_exact_from_digits(const int64_t *digits_in, size_t n, int ranks, int digits, float *out)
{
    int b = dp_exact_digit_bits(ranks);
    double whole[CHUNK], fraction[CHUNK]; /* a chunk's sums, in the L1 cache: no pass over memory */
    for (size_t begin = 0; begin < n; begin += CHUNK) {
        size_t count = begin + CHUNK < n ? CHUNK : n - begin;
        if (digits == 1) { /* the usual step: each sum one int64; to double, then to float (each loop vectorises) */
            for (size_t i = 0; i < count; i++)
                whole[i] = dp_exact_single_digit_sum(digits_in[begin + i]);
            for (size_t i = 0; i < count; i++)
                out[begin + i] = (float)whole[i];
            continue;
        }
        for (int k = 0; k < digits; k++) {
            const int64_t *restrict digit = digits_in + (size_t)k * n + begin;
            /* digit 0 starts the sums: no zeroing pass; the unit only counts above it */
            double unit = k > 0 ? dp_exact_digit_unit(b, k - 1) : 0.0;
            for (size_t i = 0; i < count; i++)
                dp_exact_take_digit(digit[i], unit, k, &whole[i], &fraction[i]);
        }
        for (size_t i = 0; i < count; i++) {
            dp_exact_canonical(&whole[i], &fraction[i]);
            out[begin + i] = dp_exact_to_float(whole[i], fraction[i]);
        }
    }
}

WIDEST_VECTORS void dp_exact_to_floats(dp_exact_sums sums, size_t n, float *out)
{
    double high_at[CHUNK], low_at[CHUNK];
    for (size_t begin = 0; begin < n; begin += CHUNK) {
        size_t count = begin + CHUNK < n ? CHUNK : n - begin;
        const double *high, *low; /* read before out is written: out may be sums.last */
        chunk_sums(sums, begin, count, n, high_at, low_at, &high, &low);
        for (size_t i = 0; i < count; i++) {
            double whole, fraction;
            dp_exact_accumulated_sum(high[i], low[i], &whole, &fraction);
            out[begin + i] = dp_exact_to_float(whole, fraction);
        }
    }
}

double dp_exact_round_total(double value)
{
    return dp_exact_round_to(value, 0x1p-24);
}
