/* --exact's arithmetic on one element, written once (the scheme: src/strategy/exact_sum.h): the
 * host's vectorised loops (src/strategy/exact_sum.c), the CUDA kernels (cuda_exact_kernels.cu,
 * through exact_grid.h) and their host emulation (tests/fakecuda/exact_kernels.c) all call
 * these, so the accumulator gives the same digits and floats wherever it lives. Every step is
 * an exact double addition or a rounding that depends on its argument alone (kernel_math.h's
 * dp_dadd: never contracted). Valid C11 and CUDA C++. */
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
    DP_EXACT_MAX_RANKS = 256,    /* digits of at least 17 bits */
};

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

/* The unit above digit k of b bits: digit k is a multiple of 2^(bk - 48), at most half this. */
DP_EXACT_ELEMENT double dp_exact_digit_unit(int b, int k)
{
    return ldexp(1.0, b * (k + 1) - DP_EXACT_FRACTION_BITS);
}

/* The next digit of whole + fraction (both multiples of the digit's unit; lowest digit first):
 * the remainder to the next unit, at most half of it; whole and fraction keep the rest. */
DP_EXACT_ELEMENT float dp_exact_digit(double *whole, double *fraction, double next)
{
    double whole_part = next <= 1.0 ? *whole : dp_exact_round_to(*whole, next);
    double rest = dp_dadd(dp_dsub(*whole, whole_part), *fraction);
    double carry = dp_exact_round_to(rest, next);
    *whole = whole_part;
    *fraction = carry;
    return (float)dp_dsub(rest, carry); /* exact: at most 2^(b-1) units */
}

/* A summed digit added back into whole + fraction (first: they start from it). */
DP_EXACT_ELEMENT void dp_exact_take_digit(float digit, double *whole, double *fraction, int first)
{
    double integer = dp_exact_round_to(digit, 1.0);
    *whole = dp_dadd(first ? 0.0 : *whole, integer);
    *fraction = dp_dadd(first ? 0.0 : *fraction, dp_dsub(digit, integer));
}

#endif
