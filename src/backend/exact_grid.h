/* --exact's accumulator in device memory: what one thread of each kernel computes (the launch
 * shape is kernel_grid.h's dp_shape_flat over the elements), from exact_math.h's arithmetic
 * per element. The kernels (cuda_exact_kernels.cu) pass their block and thread; the host
 * emulation (tests/fakecuda/exact_kernels.c) loops over every block and thread. Each element
 * is one thread's alone, so the bits are the host loops' (src/strategy/exact_sum.c). */
#ifndef DP_EXACT_GRID_H
#define DP_EXACT_GRID_H

#include "src/backend/exact_math.h"
#include "src/backend/kernel_grid.h"

/* acc (high pieces, then low, n each) += values, or = values when first. */
static inline DP_HD void dp_exact_add_thread(double *acc, const float *values, size_t n, int first, dp_span s)
{
    for (size_t i = s.first; i < n; i += s.step)
        dp_exact_add_value(values[i], &acc[i], &acc[n + i], first);
}

/* Element i's pieces of the sums (n elements): the accumulator's plus the pending group's value. */
static inline DP_HD void dp_exact_sum_at(dp_exact_sums sums, size_t n, size_t i, double *high, double *low)
{
    *high = sums.acc ? sums.acc[i] : 0.0;
    *low = sums.acc ? sums.acc[n + i] : 0.0;
    if (sums.last)
        dp_exact_add_value(sums.last[i], high, low, sums.acc == NULL);
}

/* out[i] = the float of element i's exact sum (out may be sums.last: each thread reads its
 * element first). */
static inline DP_HD void dp_exact_to_floats_thread(dp_exact_sums sums, size_t n, float *out, dp_span s)
{
    for (size_t i = s.first; i < n; i += s.step) {
        double high, low, whole, fraction;
        dp_exact_sum_at(sums, n, i, &high, &low);
        dp_exact_accumulated_sum(high, low, &whole, &fraction);
        out[i] = dp_exact_to_float(whole, fraction);
    }
}

/* Digits [first, digits) of the DP_EXACT_DIGITS of b bits of each element's sum into out (digit
 * k at out + k n), as exact_sum.c's chunk pass makes them, the sums only read; from digit 0 the
 * largest size's bits (dp_exact_size_bits) are returned. */
static inline DP_HD uint64_t dp_exact_digits_thread(dp_exact_sums sums, size_t n, int b, int first, int digits,
                                                   int64_t *out, dp_span s)
{
    uint64_t largest = 0;
    double next0 = dp_exact_digit_unit(b, 0), next1 = dp_exact_digit_unit(b, 1);
    for (size_t i = s.first; i < n; i += s.step) {
        double rest, high, low;
        dp_exact_sum_at(sums, n, i, &high, &low);
        int64_t d0 = dp_exact_first_digit(high, low, next0, &rest);
        if (first == 0) {
            uint64_t size = dp_exact_size_bits(high, low);
            largest = size > largest ? size : largest;
            out[i] = d0;
        }
        if (digits > 1)
            out[n + i] = dp_exact_next_digit(&rest, next0, next1);
    }
    return largest;
}

/* out[i] = the float of the exact sum that element i's `count` summed digits of b bits hold. */
static inline DP_HD void dp_exact_from_digits_thread(const int64_t *digits, size_t n, int b, int count, float *out,
                                                     dp_span s)
{
    for (size_t i = s.first; i < n; i += s.step) {
        if (count == 1) { /* the usual step: the host loops' short path */
            out[i] = (float)dp_exact_single_digit_sum(digits[i]);
            continue;
        }
        double whole = 0.0, fraction = 0.0;
        for (int k = 0; k < count; k++)
            dp_exact_take_digit(digits[(size_t)k * n + i], k > 0 ? dp_exact_digit_unit(b, k - 1) : 0.0, k, &whole,
                                &fraction);
        dp_exact_canonical(&whole, &fraction);
        out[i] = dp_exact_to_float(whole, fraction);
    }
}

#endif
