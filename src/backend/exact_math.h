/* --exact's arithmetic on one element, written once (the scheme: src/strategy/exact_sum.h): the
 * host's vectorised loops (src/strategy/exact_sum.c), the CUDA kernels (cuda_exact_kernels.cu,
 * through exact_grid.h) and their host emulation (tests/fakecuda/exact_kernels.c) all call
 * these, so the accumulator gives the same digits and floats wherever it lives. Every step is
 * an exact double addition or a rounding that depends on its argument alone (kernel_math.h's
 * dp_dadd: never contracted), or integer arithmetic on int64 digits. Valid C11 and CUDA C++. */
#ifndef DP_EXACT_MATH_H
#define DP_EXACT_MATH_H

#include "src/backend/kernel_math.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

enum {
    DP_EXACT_FRACTION_BITS = 48, /* the grid: values are rounded to multiples of 2^-48 */
    DP_EXACT_INTEGER_BITS = 32,  /* |v| >= 2^32 (or NaN, inf) makes the element's sum NaN */
    DP_EXACT_PIECES = 2,         /* doubles per element in an accumulator */
    DP_EXACT_MAX_RANKS = 256,    /* digits of at least 55 bits: two of them hold any sum */
    DP_EXACT_DIGITS = 2,         /* the digits a sum may need on up to DP_EXACT_MAX_RANKS ranks */
};

/* The sums a device's pass reads: the accumulator's (acc, DP_EXACT_PIECES x n, always in pieces;
 * NULL: no group in it) plus, element by element, a group's gradient never added into it (last;
 * NULL: none): the rank's last group of a step costs no pass of its own, and acc is only read.
 * The host's passes read exact_sum.h's dp_exact_host_sums, its accumulator partly in units. */
typedef struct dp_exact_sums {
    const double *acc;
    const float *last;
} dp_exact_sums;

/* Inlined into each host build of the loops (a call per element would stop the vectoriser). */
#ifdef __CUDACC__
#define DP_EXACT_ELEMENT static __forceinline__ DP_HD
#else
#define DP_EXACT_ELEMENT static inline DP_HD __attribute__((always_inline))
#endif

/* x rounded to a multiple of u (a power of two), to nearest, ties to even: exact arithmetic
 * while |x| < 2^51 u, as adding 1.5 x 2^52 u leaves no bit below u. */
DP_EXACT_ELEMENT double dp_exact_round_to(double x, double u)
{
    double c = dp_dmul(0x1.8p52, u);
    return dp_dsub(dp_dadd(x, c), c);
}

/* v rounded to the grid, added into its element's two pieces: high a multiple of 2^-8, low of
 * 2^-48 (at most 2^-9); first: the pieces start from v's (no zeroing). Out of range (inf and
 * NaN included): the sum is NaN, which the update's check catches. */
DP_EXACT_ELEMENT void dp_exact_add_value(float value, double *high, double *low, int first)
{
    double v = value;
    double upper = dp_exact_round_to(v, 0x1p-8);
    double lower = dp_exact_round_to(dp_dsub(v, upper), 0x1p-48); /* v - upper is exact */
    upper = fabs(v) < 0x1p32 ? upper : (double)NAN;
    *high = first ? upper : dp_dadd(*high, upper);
    *low = first ? lower : dp_dadd(*low, lower);
}

/* The exact sum S as whole + fraction, whole an integer and fraction in (-1/2, 1/2]: the one
 * canonical form, whatever pieces made S, so its rounding depends on S alone. Every step is
 * exact: |whole| < 2^46, fraction a multiple of 2^-48 below 2^5. */
DP_EXACT_ELEMENT void dp_exact_canonical(double *whole, double *fraction)
{
    double carry = dp_exact_round_to(*fraction, 1.0);
    *whole = dp_dadd(*whole, carry);
    *fraction = dp_dsub(*fraction, carry);
    double tie = *fraction == -0.5 ? 1.0 : 0.0; /* -1/2 becomes +1/2 (a select: vectorised) */
    *fraction = dp_dadd(*fraction, tie);
    *whole = dp_dsub(*whole, tie);
}

/* An accumulator's two pieces (high, low) as the canonical form. */
DP_EXACT_ELEMENT void dp_exact_accumulated_sum(double high, double low, double *whole, double *fraction)
{
    *whole = dp_exact_round_to(high, 1.0);
    *fraction = dp_dadd(dp_dsub(high, *whole), low);
    dp_exact_canonical(whole, fraction);
}

/* One rounding to float through double, of the canonical form: a function of the sum alone. */
DP_EXACT_ELEMENT float dp_exact_to_float(double whole, double fraction)
{
    return (float)dp_dadd(whole, fraction);
}

/* The bit pattern of |high| + |low|: non-negative doubles order as their bit patterns, with
 * inf and NaN above every finite one, so the largest is an integer maximum (which vectorises,
 * and which a GPU takes with atomicMax in any order). */
DP_EXACT_ELEMENT uint64_t dp_exact_size_bits(double high, double low)
{
    double size = dp_dadd(fabs(high), fabs(low));
    uint64_t bits;
    memcpy(&bits, &size, sizeof bits);
    return bits;
}

/* The largest int64 is never a legal digit sum (their bound: exact_sum.h): it marks a sum that
 * is not finite, in each of its digits. */
#define DP_EXACT_MARK INT64_MIN

/* x / u as an integer, for x a multiple of u (a power of two) with |x| < 2^51 u: the low bits of
 * x + 1.5 x 2^52 u (dp_exact_round_to's sum) count units of u, so the difference of the two bit
 * patterns is x / u. No conversion instruction: it vectorises where converting double to int64
 * does not (AVX2, AVX-512F without DQ). */
DP_EXACT_ELEMENT int64_t dp_exact_units(double x, double u)
{
    double c = dp_dmul(0x1.8p52, u), t = dp_dadd(x, c);
    int64_t bits_t, bits_c;
    memcpy(&bits_t, &t, sizeof bits_t);
    memcpy(&bits_c, &c, sizeof bits_c);
    return (int64_t)((uint64_t)bits_t - (uint64_t)bits_c);
}

/* The inverse: units x u as a double, exactly, for |units| < 2^51. */
DP_EXACT_ELEMENT double dp_exact_from_units(int64_t units, double u)
{
    double c = dp_dmul(0x1.8p52, u), t;
    int64_t bits_c;
    memcpy(&bits_c, &c, sizeof bits_c);
    bits_c = (int64_t)((uint64_t)bits_c + (uint64_t)units); /* unsigned: garbage units (a NaN's) wrap */
    memcpy(&t, &bits_c, sizeof t);
    return dp_dsub(t, c);
}

/* v's count of 2^-48 once rounded to the grid (to nearest, ties to even: dp_exact_add_value's
 * rounding), for |v| < 2^13 (the host's accumulator in units, src/strategy/exact_sum.h). With
 * `converts` (where doubles convert to int64 as vectors), v x 2^48 (exact) rounded and converted;
 * else the two roundings of dp_exact_add_value, each piece an exact count of its unit, which
 * vectorise without such conversions. */
DP_EXACT_ELEMENT int64_t dp_exact_value_units(float value, int converts)
{
    double v = value;
    if (converts)
        return (int64_t)nearbyint(dp_dmul(v, 0x1p48)); /* nearbyint, not rint: rint would become a scalar lrint */
    double upper = dp_exact_round_to(v, 0x1p-8);
    double lower = dp_exact_round_to(dp_dsub(v, upper), 0x1p-48);
    return (int64_t)(((uint64_t)dp_exact_units(upper, 0x1p-8) << 40) + (uint64_t)dp_exact_units(lower, 0x1p-48));
}

/* The unit above digit k of b bits: digit k counts units of 2^(bk - 48) and stays near half of
 * this at most (exact_sum.h gives the bounds). */
DP_EXACT_ELEMENT double dp_exact_digit_unit(int b, int k)
{
    return ldexp(1.0, b * (k + 1) - DP_EXACT_FRACTION_BITS);
}

/* Digit 0 of an accumulator's pieces (high, low), in units of 2^-48, with next = its unit above
 * (2^(b-48) >= 2^7): the sum's integer part taken to the nearest multiple of next, what that
 * leaves (at most next / 2, times 2^48) plus the fraction (at most 1/2, times 2^48). *rest gets
 * the multiple of next for the digits above; NaN and DP_EXACT_MARK where the sum is not finite. */
DP_EXACT_ELEMENT int64_t dp_exact_first_digit(double high, double low, double next, double *rest)
{
    double whole = dp_exact_round_to(high, 1.0);
    double fraction = dp_dadd(dp_dsub(high, whole), low); /* exact: below 2^5 in steps of 2^-48 */
    double carry = dp_exact_round_to(fraction, 1.0);
    whole = dp_dadd(whole, carry);
    fraction = dp_dsub(fraction, carry);
    double top = dp_exact_round_to(whole, next);
    /* Unsigned: where the sum is not finite the units are garbage that the select below drops,
     * and they must not overflow a signed product on the way. */
    int64_t digit = (int64_t)(((uint64_t)dp_exact_units(dp_dsub(whole, top), 1.0) << DP_EXACT_FRACTION_BITS) +
                              (uint64_t)dp_exact_units(fraction, 0x1p-48));
    *rest = top;
    return fraction == fraction ? digit : DP_EXACT_MARK; /* NaN pieces: a select, so it vectorises */
}

/* Digit k >= 1: of *rest (a multiple of unit = 2^(bk-48) below 2^47), what is left below next,
 * in units; *rest keeps the multiple of next above it. */
DP_EXACT_ELEMENT int64_t dp_exact_next_digit(double *rest, double unit, double next)
{
    double top = dp_exact_round_to(*rest, next);
    int64_t digit = dp_exact_units(dp_dsub(*rest, top), unit);
    int64_t marked = *rest == *rest ? digit : DP_EXACT_MARK;
    *rest = top;
    return marked;
}

/* Digit k of the sums over the ranks added back into whole + fraction: digit 0's low 48 bits
 * (balanced, in [-2^47, 2^47)) are the fraction, the rest an integer below 2^16; digit k >= 1
 * counts units of unit (fewer than 2^51 of them), an integer multiple of 2^7 or more. Every
 * addition is of integers below 2^53, or of the one fraction: exact. DP_EXACT_MARK: NaN. */
DP_EXACT_ELEMENT void dp_exact_take_digit(int64_t digit, double unit, int k, double *whole, double *fraction)
{
    if (k > 0) {
        *whole = dp_dadd(*whole, dp_exact_from_units(digit, unit));
        return;
    }
    const uint64_t half = (uint64_t)1 << (DP_EXACT_FRACTION_BITS - 1), low_bits = 2 * half - 1;
    int64_t low = (int64_t)(((uint64_t)digit + half) & low_bits) - (int64_t)half;
    /* (digit - low) / 2^48 with a logical shift (AVX2 has no arithmetic one on 64 bits): offset by 2^63. */
    int64_t high = (int64_t)(((uint64_t)digit - (uint64_t)low + ((uint64_t)1 << 63)) >> DP_EXACT_FRACTION_BITS) -
                   ((int64_t)1 << (63 - DP_EXACT_FRACTION_BITS));
    *whole = digit == DP_EXACT_MARK ? (double)NAN : dp_exact_from_units(high, 1.0);
    *fraction = dp_exact_from_units(low, 0x1p-48);
}

/* The double nearest a sum the ranks' single digits hold (units of 2^-48, |digit| < 2^62), from
 * the digit's two halves converted exactly and added with one rounding: the canonical form's
 * dp_exact_to_float rounds the same sum to double once, so its float is this one's, in a third
 * of the steps. DP_EXACT_MARK: NaN. */
DP_EXACT_ELEMENT double dp_exact_single_digit_sum(int64_t digit)
{
    const uint64_t offset = (uint64_t)1 << 63; /* a logical shift of digit + 2^63: no signed shift */
    int64_t high = (int64_t)(((uint64_t)digit + offset) >> 32) - ((int64_t)1 << 31);
    int64_t low = (int64_t)((uint64_t)digit & 0xffffffffu);
    double sum = dp_dadd(dp_exact_from_units(high, 0x1p32), dp_exact_from_units(low, 1.0));
    double value = dp_dmul(sum, 0x1p-48); /* made first: the select below then vectorises */
    return digit == DP_EXACT_MARK ? (double)NAN : value;
}

#endif
