/* --exact's sums (exact_sum.h): values rounded to a fixed grid by a rule of their own, pieces
 * that add exactly in doubles, balanced digits that add exactly in floats, one canonical form
 * of the exact sum and one rounding back. Only additions of doubles that are exact, and the
 * roundings of round_to, which depend on their argument alone. */
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
/* The per-element helpers inside each build: a call per element would stop the vectoriser. */
#define PER_ELEMENT static inline __attribute__((always_inline))

/* Elements whose working values stay in the L1 cache through all the passes over digits. */
enum { CHUNK = 512 };

/* x rounded to a multiple of u (a power of two), to nearest, ties to even: exact arithmetic
 * while |x| < 2^51 u, as adding 1.5 x 2^52 u leaves no bit below u. */
PER_ELEMENT double round_to(double x, double u)
{
    double c = 0x1.8p52 * u;
    return (x + c) - c;
}

#define INTEGER_LIMIT 0x1p32 /* 2^DP_EXACT_INTEGER_BITS */

WIDEST_VECTORS void dp_exact_add(double *acc, const float *values, size_t n, int first)
{
    double *restrict high = acc, *restrict low = acc + n;
    for (size_t i = 0; i < n; i++) {
        double v = values[i];
        double upper = round_to(v, 0x1p-8);
        double lower = round_to(v - upper, 0x1p-48); /* v - upper is exact, at most 2^-9 */
        /* Out of range (inf and NaN included): the sum is NaN, which the update's check catches. */
        upper = fabs(v) < INTEGER_LIMIT ? upper : NAN;
        high[i] = first ? upper : high[i] + upper;
        low[i] = first ? lower : low[i] + lower;
    }
}

/* The exact sum S as whole + fraction, whole an integer and fraction in (-1/2, 1/2]: the one
 * canonical form, whatever pieces made S, so its rounding depends on S alone. Every step is
 * exact: |whole| < 2^46, fraction a multiple of 2^-48 below 2^5. */
PER_ELEMENT void canonical(double *whole, double *fraction)
{
    double carry = round_to(*fraction, 1.0);
    *whole += carry;
    *fraction -= carry;
    double tie = *fraction == -0.5 ? 1.0 : 0.0; /* -1/2 becomes +1/2 (a select: vectorised) */
    *fraction += tie;
    *whole -= tie;
}

/* An accumulator's two pieces (high, low) as the canonical form. */
PER_ELEMENT void accumulated_sum(double high, double low, double *whole, double *fraction)
{
    *whole = round_to(high, 1.0);
    *fraction = (high - *whole) + low;
    canonical(whole, fraction);
}

/* One rounding to float through double, of the canonical form: a function of the sum alone. */
PER_ELEMENT float to_float(double whole, double fraction)
{
    return (float)(whole + fraction);
}

int dp_exact_digit_bits(int ranks)
{
    int log2_ranks = 0;
    while ((1 << log2_ranks) < ranks)
        log2_ranks++;
    return 25 - log2_ranks;
}

int dp_exact_digits_for(int bits, int ranks)
{
    int b = dp_exact_digit_bits(ranks);
    int digits = (bits + 1 + b - 1) / b; /* balanced digits reach 2^(bK - 1) */
    return digits > 0 ? digits : 1;
}

int dp_exact_max_digits(int ranks)
{
    /* A step's sums stay below 2^46 (DP_EXACT_MAX_TERMS x 2^32, and the low piece's 2^4). */
    return dp_exact_digits_for(46 + DP_EXACT_FRACTION_BITS, ranks);
}

/* The bit pattern of the largest |high| + |low| of n elements and `largest` (a pattern too):
 * non-negative doubles order as their bit patterns, with inf and NaN above every finite one,
 * so an integer maximum, which vectorises (a test per element would leave the loop). */
PER_ELEMENT uint64_t largest_size(const double *high, const double *low, size_t n, uint64_t largest)
{
    for (size_t i = 0; i < n; i++) {
        double size = fabs(high[i]) + fabs(low[i]);
        uint64_t bits;
        memcpy(&bits, &size, sizeof bits);
        largest = bits > largest ? bits : largest;
    }
    return largest;
}

/* dp_exact_magnitude_bits of the largest size's bit pattern. */
static int magnitude_bits(uint64_t largest_bits)
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
    return magnitude_bits(largest_size(acc, acc + n, n, 0));
}

/* Digits [first, digits) of the sums of elements [begin, begin + n) of an accumulator of
 * `total` (whole and fraction already at begin), into out (digit k at out + k total + begin). */
PER_ELEMENT void chunk_digits(double *restrict whole, double *restrict fraction, size_t begin, size_t n,
                              size_t total, int b, int first, int digits, float *out)
{
    /* Through locals: stores through pointers into the arrays kept this loop scalar. */
    if (first == 0) {
        for (size_t i = 0; i < n; i++) {
            double w, f;
            accumulated_sum(whole[i], fraction[i], &w, &f);
            whole[i] = w;
            fraction[i] = f;
        }
    }
    /* Lowest digit first: what is left of the sum is whole + fraction, both multiples of the
     * digit's unit; the digit is the remainder to the next unit, at most half of it. */
    for (int k = first; k < digits; k++) {
        double next = ldexp(1.0, b * (k + 1) - DP_EXACT_FRACTION_BITS);
        float *restrict digit = out + (size_t)k * total + begin;
        for (size_t i = 0; i < n; i++) {
            double whole_part = next <= 1.0 ? whole[i] : round_to(whole[i], next);
            double rest = (whole[i] - whole_part) + fraction[i];
            double carry = round_to(rest, next);
            digit[i] = (float)(rest - carry); /* exact: at most 2^(b-1) units */
            whole[i] = whole_part;
            fraction[i] = carry;
        }
    }
}

WIDEST_VECTORS void dp_exact_to_digits(double *acc, size_t n, int ranks, int first, int digits, float *out)
{
    int b = dp_exact_digit_bits(ranks);
    for (size_t begin = 0; begin < n; begin += CHUNK) {
        size_t count = begin + CHUNK < n ? CHUNK : n - begin;
        chunk_digits(acc + begin, acc + n + begin, begin, count, n, b, first, digits, out);
    }
}

WIDEST_VECTORS int dp_exact_first_digits(double *acc, size_t n, int ranks, int digits, float *out)
{
    int b = dp_exact_digit_bits(ranks);
    uint64_t largest = 0;
    for (size_t begin = 0; begin < n; begin += CHUNK) {
        size_t count = begin + CHUNK < n ? CHUNK : n - begin;
        double *high = acc + begin, *low = acc + n + begin; /* the chunk stays in the L1 cache */
        largest = largest_size(high, low, count, largest);
        chunk_digits(high, low, begin, count, n, b, 0, digits, out);
    }
    return magnitude_bits(largest);
}

WIDEST_VECTORS void dp_exact_from_digits(const float *digits_in, size_t n, int digits, float *out)
{
    double whole[CHUNK], fraction[CHUNK]; /* a chunk's sums, in the L1 cache: no pass over memory */
    for (size_t begin = 0; begin < n; begin += CHUNK) {
        size_t count = begin + CHUNK < n ? CHUNK : n - begin;
        for (int k = 0; k < digits; k++) {
            const float *restrict digit = digits_in + (size_t)k * n + begin;
            for (size_t i = 0; i < count; i++) { /* the first digit adds to 0: no zeroing pass */
                double integer = round_to(digit[i], 1.0);
                whole[i] = (k == 0 ? 0.0 : whole[i]) + integer;
                fraction[i] = (k == 0 ? 0.0 : fraction[i]) + (digit[i] - integer);
            }
        }
        for (size_t i = 0; i < count; i++) {
            canonical(&whole[i], &fraction[i]);
            out[begin + i] = to_float(whole[i], fraction[i]);
        }
    }
}

WIDEST_VECTORS void dp_exact_to_floats(const double *acc, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++) {
        double whole, fraction;
        accumulated_sum(acc[i], acc[n + i], &whole, &fraction);
        out[i] = to_float(whole, fraction);
    }
}

double dp_exact_round_total(double value)
{
    return round_to(value, 0x1p-24);
}
