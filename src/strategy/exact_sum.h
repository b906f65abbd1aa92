/* Inside strategy/: --exact's order-independent sums (docs/STRATEGIES.md, "--exact").
 *
 * A value v (a group's gradient element) is rounded once, by a rule that depends on v alone, to
 * a multiple of 2^-DP_EXACT_FRACTION_BITS and split into two pieces, each added into its own
 * double: a multiple of 2^-8 (|v| < 2^DP_EXACT_INTEGER_BITS) and a multiple of 2^-48 (at most
 * 2^-9). Each piece's sum stays an exactly representable double for up to DP_EXACT_MAX_TERMS
 * terms (2^45 in steps of 2^-8; 2^4 in steps of 2^-48), so the accumulator holds the exact sum
 * of the rounded values in any order. Between ranks the exact sum travels as K int64 digits of b
 * bits (digit k counts units of 2^(bk - 48)), b = 63 - ceil(log2 W) (55 at W = 256): a rank's
 * digit 0 is at most 2^(b-1) + 2^47 and every other at most 2^(95-b) <= 2^40, so any partial
 * sum of W of them stays inside int64 (W 2^(b-1) = 2^62) and the all-reduce adds integers,
 * exactly, in any order, with any algorithm; two digits hold any sum (below 2^46, 94 bits and a
 * sign), one holds sums below 2^(b-50) (2^12 at W = 2). The summed digits are brought to one
 * canonical form (an integer and a fraction in (-1/2, 1/2]) and rounded to float once from there
 * (through double), so the result depends on the exact sum alone. tests/test_exact.c proves
 * these bounds for every W up to DP_EXACT_MAX_RANKS. */
#ifndef DP_EXACT_SUM_H
#define DP_EXACT_SUM_H

#include "src/backend/exact_math.h" /* the grid's constants and the arithmetic per element */

#include <stddef.h>
#include <stdint.h>

/* Terms one step may add, over all ranks: 2^32 x 2^13 = 2^45 in steps of 2^-8 is 53 bits. */
#define DP_EXACT_MAX_TERMS ((size_t)1 << 13)

/* The host's accumulator of n sums, chunk by chunk (DP_EXACT_CHUNK elements). While a chunk's
 * sums stay below DP_EXACT_UNITS_LIMIT (by an upper bound: its groups' largest |v| summed),
 * each element is one int64 count of 2^-48, the group's value rounded to the grid as above and
 * added as an integer: 8 bytes read and written an element, where the two pieces take 16 and
 * two more additions. A group that would take a chunk past the limit, or brings an infinity or
 * a NaN, turns that chunk into the two pieces for the rest of the step. Both hold the same
 * exact sum, so the digits and floats do not depend on which a chunk is in. */
typedef struct dp_exact_acc {
    double *pieces; /* DP_EXACT_PIECES x n doubles; a chunk in units keeps its int64 in its high pieces' bytes */
    double *bound;  /* per chunk: an upper bound of its |sums| while in units; +inf once in pieces */
    size_t n;
    double beyond;  /* the largest finite |v| added beyond the sums' range (dp_exact_beyond); 0: none */
} dp_exact_acc;

/* The largest finite |v| of n values at or beyond 2^DP_EXACT_INTEGER_BITS, whose sums --exact
 * cannot hold (they come out NaN, as an infinity's do); 0 where there is none. */
double dp_exact_beyond(const float *values, size_t n);

enum { DP_EXACT_CHUNK = 512 }; /* elements whose working values stay in the L1 cache through a pass */
/* Sums below 2^13 count fewer than 2^61 units; with a pending group's (also below it), 2^62. */
#define DP_EXACT_UNITS_LIMIT 0x1p13

/* An accumulator of n sums (its memory allocated, every sum 0); 0 or DP_ENOMEM. */
int dp_exact_acc_open(dp_exact_acc *acc, size_t n);
void dp_exact_acc_close(dp_exact_acc *acc);
/* The memory of an accumulator of n sums (its pieces and its chunks' bounds, one block), and
 * an accumulator in such a block the caller holds (whoever counts its memory). */
size_t dp_exact_acc_bytes(size_t n);
void dp_exact_acc_place(dp_exact_acc *acc, size_t n, void *memory);
/* Every sum 0, in units. */
void dp_exact_clear(dp_exact_acc *acc);
/* A group's values added in; first: they are the first term (no zeroing needed). */
void dp_exact_add(dp_exact_acc *acc, const float *values, int first);

/* The sums a host pass reads: the accumulator's (NULL: none) plus, element by element, a group's
 * gradient never added into it (last; NULL: none), as exact_math.h's dp_exact_sums on a device. */
typedef struct dp_exact_host_sums {
    const dp_exact_acc *acc;
    const float *last;
} dp_exact_host_sums;

/* The digit width for a world of ranks: W digits of |d| <= 2^(b-1) + 2^47 add within int64. */
int dp_exact_digit_bits(int ranks);
/* The most digits a world of ranks needs for any accumulator: DP_EXACT_DIGITS. */
int dp_exact_max_digits(int ranks);
/* The bits of the largest |sum| (an upper bound: 0 when all are 0; -1 when one is not finite)
 * from the largest dp_exact_size_bits of the elements (a device backend's exact_to_digits
 * leaves it in backend memory). */
int dp_exact_magnitude_of(uint64_t largest_size_bits);
/* Digits needed for sums of at most `bits` bits on a world of ranks. */
int dp_exact_digits_for(int bits, int ranks);

/* The exact sums as arrays of n int64 digits of dp_exact_digit_bits(ranks) bits, the lowest
 * first (digit k at out + k n): digits [first, digits) of the DP_EXACT_DIGITS, so a call from 0
 * to K and one from K on give what one call from 0 gives; a sum that is not finite becomes
 * DP_EXACT_MARK in every digit. */
void dp_exact_to_digits(dp_exact_host_sums sums, size_t n, int ranks, int first, int digits, int64_t *out);
/* dp_exact_to_digits from 0 to `digits`, and the sums' magnitude in bits (dp_exact_magnitude_of)
 * returned, in one pass over the sums. */
int dp_exact_first_digits(dp_exact_host_sums sums, size_t n, int ranks, int digits, int64_t *out);
/* A rank's own marks of sums that are not finite, from digits [first, digits) to flags (1
 * there), the digits set to 0: summed over the ranks, the flags say which sums any rank lost. */
void dp_exact_take_marks(int64_t *digits_in, size_t n, int first, int digits, int64_t *flags);
/* The summed flags back as marks in digit 0. */
void dp_exact_put_marks(int64_t *digit0, size_t n, const int64_t *flags);
/* Digits summed over the ranks back to values: each the exact sum's float (canonical form), NaN
 * where digit 0 is DP_EXACT_MARK. */
void dp_exact_from_digits(const int64_t *digits_in, size_t n, int ranks, int digits, float *out);
/* One rank's sums straight to values, bitwise what the digits would give; out may be sums.last. */
void dp_exact_to_floats(dp_exact_host_sums sums, size_t n, float *out);

/* A group's loss sum rounded to a multiple of 2^-24: such values add exactly in doubles, in
 * any order, while the total stays below 2^29. */
double dp_exact_round_total(double value);

#endif
