/* --exact's sums (exact_sum.h): values rounded to a fixed grid by a rule of their own, pieces
 * that add exactly in doubles, balanced digits that add exactly in floats, one rounding back. */
#include "src/strategy/exact_sum.h"

#include <math.h>
#include <stdint.h>

__extension__ typedef __int128 wide;

/* x + c - c rounds x to a multiple of c's ulp (round to nearest even), c = 1.5 x 2^(52 - k)
 * rounding to multiples of 2^-k, exactly while |x| < 2^(51 - k). */
#define ROUND_TO_INTEGER 6755399441055744.0 /* 1.5 x 2^52 */
#define ROUND_TO_24 402653184.0             /* 1.5 x 2^28: multiples of 2^-24 */
#define ROUND_TO_48 24.0                    /* 1.5 x 2^4: multiples of 2^-48 */
#define INTEGER_LIMIT 4294967296.0          /* 2^DP_EXACT_INTEGER_BITS */

void dp_exact_add(double *acc, const float *values, size_t n)
{
    double *restrict whole = acc, *restrict high = acc + n, *restrict low = acc + 2 * n;
    for (size_t i = 0; i < n; i++) {
        double v = values[i];
        double integer = (v + ROUND_TO_INTEGER) - ROUND_TO_INTEGER;
        double rest = v - integer; /* exact, |rest| <= 1/2 */
        double upper = (rest + ROUND_TO_24) - ROUND_TO_24;
        double lower = ((rest - upper) + ROUND_TO_48) - ROUND_TO_48;
        /* Out of range (inf and NaN included): the sum is NaN, which the update's check catches. */
        whole[i] += fabs(v) < INTEGER_LIMIT ? integer : NAN;
        high[i] += upper;
        low[i] += lower;
    }
}

/* The exact sum in units of 2^-48: every piece converts to an integer exactly. */
static wide exact_units(const double *acc, size_t n, size_t i)
{
    return (wide)(int64_t)acc[i] * ((wide)1 << DP_EXACT_FRACTION_BITS) +
           (wide)(int64_t)ldexp(acc[n + i], 24) * ((wide)1 << 24) + (wide)(int64_t)ldexp(acc[2 * n + i], 48);
}

static int finite_sum(const double *acc, size_t n, size_t i)
{
    return isfinite(acc[i]) && isfinite(acc[n + i]) && isfinite(acc[2 * n + i]);
}

/* Units of 2^-48 to float: one correct rounding of the integer, then an exact scaling (but
 * below float's normal range, where the scaling rounds a second time). */
static float units_to_float(wide units)
{
    return ldexpf((float)units, -DP_EXACT_FRACTION_BITS);
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
    /* An accumulator's integer piece reaches 2^52, and the pieces below add less than 1. */
    return dp_exact_digits_for(52 + 1 + DP_EXACT_FRACTION_BITS, ranks);
}

int dp_exact_magnitude_bits(const double *acc, size_t n)
{
    double largest = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!finite_sum(acc, n, i))
            return -1;
        double size = fabs(acc[i]) + fabs(acc[n + i]) + fabs(acc[2 * n + i]);
        largest = size > largest ? size : largest;
    }
    int exponent = 0;
    frexp(largest, &exponent); /* largest < 2^exponent (an upper bound: the sum above may round up) */
    return largest > 0.0 ? exponent + 1 + DP_EXACT_FRACTION_BITS : 0;
}

void dp_exact_to_digits(const double *acc, size_t n, int ranks, int digits, float *out)
{
    int b = dp_exact_digit_bits(ranks);
    wide base = (wide)1 << b, half = base / 2;
    for (size_t i = 0; i < n; i++) {
        int finite = finite_sum(acc, n, i);
        wide units = finite ? exact_units(acc, n, i) : 0;
        for (int k = 0; k < digits; k++) {
            wide digit = units & (base - 1);
            digit -= digit >= half ? base : 0;
            units = (units - digit) >> b; /* exact: units - digit is a multiple of 2^b */
            out[(size_t)k * n + i] = finite ? (float)digit : NAN;
        }
    }
}

void dp_exact_from_digits(const float *digits_in, size_t n, int ranks, int digits, float *out)
{
    int b = dp_exact_digit_bits(ranks);
    for (size_t i = 0; i < n; i++) {
        wide units = 0;
        int finite = 1;
        for (int k = 0; k < digits; k++) {
            float digit = digits_in[(size_t)k * n + i];
            finite = finite && isfinite(digit);
            units += finite ? (wide)(int64_t)digit * ((wide)1 << (b * k)) : 0;
        }
        out[i] = finite ? units_to_float(units) : NAN;
    }
}

void dp_exact_to_floats(const double *acc, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = finite_sum(acc, n, i) ? units_to_float(exact_units(acc, n, i)) : NAN;
}

double dp_exact_round_total(double value)
{
    return (value + ROUND_TO_24) - ROUND_TO_24;
}
