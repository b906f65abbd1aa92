/* --exact's sums (exact_sum.h): values rounded to a fixed grid by a rule of their own, pieces
 * that add exactly in doubles, int64 digits that add exactly as integers, one canonical form
 * of the exact sum and one rounding back. Only additions of doubles that are exact, and the
 * roundings of dp_exact_round_to, which depend on their argument alone. The arithmetic per
 * element is src/backend/exact_math.h's, which the GPU's kernels share. */
#include "config.h"

#include "src/strategy/exact_sum.h"

#include "dp/error.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The passes over every gradient built for AVX-512 (x86-64-v4: F, DQ, BW, VL), AVX2 and the
 * baseline, the widest this CPU runs chosen when the program loads (function multiversioning):
 * their additions are exact, so every build gives the same bits. */
#ifdef HAVE_CPU_LOOPS_X86
#define WIDEST_VECTORS __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
/* AVX-512DQ converts doubles to int64 as vectors: the x86-64-v4 build, the one chosen where it runs. */
#define CONVERTS_INT64_VECTORS() __builtin_cpu_supports("avx512dq")
#else
#define WIDEST_VECTORS
#define CONVERTS_INT64_VECTORS() 0
#endif
/* The chunk passes inside each build: a call per chunk would stop the vectoriser. */
#define PER_CHUNK static inline __attribute__((always_inline))

enum { CHUNK = DP_EXACT_CHUNK };

static size_t chunks_of(size_t n)
{
    return (n + CHUNK - 1) / CHUNK;
}

size_t dp_exact_acc_bytes(size_t n)
{
    size_t elements = n ? n : 1;
    return (DP_EXACT_PIECES * elements + chunks_of(elements)) * sizeof(double);
}

void dp_exact_acc_place(dp_exact_acc *acc, size_t n, void *memory)
{
    size_t elements = n ? n : 1;
    memset(memory, 0, dp_exact_acc_bytes(n));
    acc->n = n;
    acc->pieces = memory;
    acc->bound = acc->pieces + DP_EXACT_PIECES * elements;
    acc->beyond = 0.0;
}

int dp_exact_acc_open(dp_exact_acc *acc, size_t n)
{
    void *memory = dp_alloc(dp_exact_acc_bytes(n), "the exact accumulator");
    if (!memory)
        return DP_ENOMEM;
    dp_exact_acc_place(acc, n, memory);
    return 0;
}

void dp_exact_acc_close(dp_exact_acc *acc)
{
    free(acc->pieces);
}

void dp_exact_clear(dp_exact_acc *acc)
{
    memset(acc->pieces, 0, acc->n * sizeof(int64_t)); /* zero units */
    memset(acc->bound, 0, chunks_of(acc->n) * sizeof *acc->bound);
}

/* A chunk's int64 units, in its high pieces' bytes (allocated memory: its type is the last
 * store's, and each pass reads a chunk as what was last stored there). */
static int64_t *units_at(const dp_exact_acc *acc, size_t begin)
{
    return (int64_t *)(void *)(acc->pieces + begin);
}

/* out = from (NULL: 0) + each value's units; out may be from. Inlined with a constant converts,
 * so each loop vectorises with one way. */
PER_CHUNK void add_units_as(int64_t *out, const int64_t *from, const float *restrict values, size_t n, int converts)
{
    if (from)
        for (size_t i = 0; i < n; i++)
            out[i] = from[i] + dp_exact_value_units(values[i], converts);
    else
        for (size_t i = 0; i < n; i++)
            out[i] = dp_exact_value_units(values[i], converts);
}
PER_CHUNK void add_units(int64_t *out, const int64_t *from, const float *restrict values, size_t n)
{
    if (CONVERTS_INT64_VECTORS())
        add_units_as(out, from, values, n, 1);
    else
        add_units_as(out, from, values, n, 0);
}

/* A count of 2^-48 (below 2^62) as the two pieces: high the nearest multiple of 2^-8, low the
 * rest (at most 2^-9), as one term's are. */
PER_CHUNK void units_to_pieces(int64_t units, double *high, double *low)
{
    /* floor((units + 2^39) / 2^40) by a logical shift of units + 2^63 (no signed shift) */
    const uint64_t offset = (uint64_t)1 << 63, half = (uint64_t)1 << 39;
    int64_t upper = (int64_t)(((uint64_t)units + offset + half) >> 40) - ((int64_t)1 << 23);
    *high = dp_exact_from_units(upper, 0x1p-8);
    *low = dp_exact_from_units(units - upper * ((int64_t)1 << 40), 0x1p-48);
}

/* The largest |v| of n values; +inf where one is an infinity or a NaN. Their bit patterns without
 * the sign order as the magnitudes do (an integer maximum, which vectorises). */
PER_CHUNK double largest_magnitude(const float *values, size_t n)
{
    uint32_t largest = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &values[i], sizeof bits);
        bits &= 0x7fffffffu;
        largest = bits > largest ? bits : largest;
    }
    float value;
    memcpy(&value, &largest, sizeof value);
    return isfinite(value) ? value : INFINITY;
}

double dp_exact_beyond(const float *values, size_t n)
{
    double largest = 0.0, limit = ldexp(1.0, DP_EXACT_INTEGER_BITS);
    for (size_t begin = 0; begin < n; begin += CHUNK) {
        size_t count = begin + CHUNK < n ? CHUNK : n - begin;
        if (largest_magnitude(values + begin, count) < limit) /* the usual chunk: one vector pass */
            continue;
        for (size_t i = begin; i < begin + count; i++) {
            double v = fabs((double)values[i]);
            largest = isfinite(v) && v >= limit && v > largest ? v : largest;
        }
    }
    return largest;
}

/* One chunk of values added into its pieces (first: they start from them). */
PER_CHUNK void add_pieces(double *restrict high, double *restrict low, const float *restrict values, size_t n, int first)
{
    for (size_t i = 0; i < n; i++)
        dp_exact_add_value(values[i], &high[i], &low[i], first);
}

/* A chunk's units turned into its pieces, in place, for the rest of the step. */
static void chunk_to_pieces(dp_exact_acc *acc, size_t begin, size_t n)
{
    int64_t units[CHUNK];
    memcpy(units, units_at(acc, begin), n * sizeof *units);
    for (size_t i = 0; i < n; i++)
        units_to_pieces(units[i], &acc->pieces[begin + i], &acc->pieces[acc->n + begin + i]);
}

WIDEST_VECTORS void dp_exact_add(dp_exact_acc *acc, const float *values, int first)
{
    for (size_t begin = 0, c = 0; begin < acc->n; begin += CHUNK, c++) {
        size_t n = begin + CHUNK < acc->n ? CHUNK : acc->n - begin;
        const float *restrict v = values + begin;
        double bound = (first ? 0.0 : acc->bound[c]) + largest_magnitude(v, n);
        if (bound < DP_EXACT_UNITS_LIMIT) {
            int64_t *units = units_at(acc, begin);
            add_units(units, first ? NULL : units, v, n);
        } else {
            if (!first && acc->bound[c] < INFINITY)
                chunk_to_pieces(acc, begin, n);
            add_pieces(acc->pieces + begin, acc->pieces + acc->n + begin, v, n, first);
            double beyond = dp_exact_beyond(v, n); /* a chunk this large is rare: name what it held */
            acc->beyond = beyond > acc->beyond ? beyond : acc->beyond;
        }
        acc->bound[c] = bound < DP_EXACT_UNITS_LIMIT ? bound : INFINITY;
    }
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

/* Chunk c of the sums (elements [begin, begin + n)). Where they are units below `limit` with the
 * pending group's added, their units go to units_out and 1 is returned. Otherwise their pieces:
 * the accumulator's own where nothing is pending, else made in the chunk's L1 locals (high_at,
 * low_at) from its units or pieces and the pending group's values; the accumulator is only read. */
PER_CHUNK int chunk_sums(dp_exact_host_sums sums, size_t c, size_t begin, size_t n, double limit,
                         int64_t *restrict units_out, double *restrict high_at, double *restrict low_at,
                         const double **high, const double **low)
{
    const dp_exact_acc *acc = sums.acc;
    const float *restrict last = sums.last ? sums.last + begin : NULL;
    const int64_t *restrict units = acc ? units_at(acc, begin) : NULL;
    double bound = acc ? acc->bound[c] : 0.0;
    if (bound < INFINITY && bound + (last ? largest_magnitude(last, n) : 0.0) < limit) {
        if (last)
            add_units(units_out, units, last, n);
        else if (units)
            memcpy(units_out, units, n * sizeof *units_out);
        else
            memset(units_out, 0, n * sizeof *units_out);
        return 1;
    }
    *high = high_at;
    *low = low_at;
    if (acc && bound == INFINITY) {
        const double *restrict from_high = acc->pieces + begin, *restrict from_low = acc->pieces + acc->n + begin;
        if (!last) {
            *high = from_high;
            *low = from_low;
            return 0;
        }
        memcpy(high_at, from_high, n * sizeof *high_at);
        memcpy(low_at, from_low, n * sizeof *low_at);
    } else if (acc) {
        for (size_t i = 0; i < n; i++)
            units_to_pieces(units[i], &high_at[i], &low_at[i]);
    }
    if (last)
        add_pieces(high_at, low_at, last, n, acc == NULL);
    return 0;
}

/* The largest dp_exact_size_bits of units' sums and `largest`. */
PER_CHUNK uint64_t largest_units_size(const int64_t *units, size_t n, uint64_t largest)
{
    uint64_t most = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t size = units[i] < 0 ? -(uint64_t)units[i] : (uint64_t)units[i];
        most = size > most ? size : most;
    }
    double size = dp_dmul((double)most, 0x1p-48);
    uint64_t bits;
    memcpy(&bits, &size, sizeof bits);
    return bits > largest ? bits : largest;
}

/* Sums below this, as their units, are digit 0 whole, and digit 1 is 0 (exact_sum.h). */
static double one_digit_limit(int b)
{
    return ldexp(1.0, b - 50);
}

WIDEST_VECTORS void dp_exact_to_digits(dp_exact_host_sums sums, size_t n, int ranks, int first, int digits,
                                       int64_t *out)
{
    int b = dp_exact_digit_bits(ranks);
    double high_at[CHUNK], low_at[CHUNK];
    int64_t units[CHUNK];
    for (size_t begin = 0, c = 0; begin < n; begin += CHUNK, c++) {
        size_t count = begin + CHUNK < n ? CHUNK : n - begin;
        const double *high, *low;
        if (!chunk_sums(sums, c, begin, count, one_digit_limit(b), units, high_at, low_at, &high, &low)) {
            chunk_digits_from(high, low, begin, count, n, b, first, digits, out);
            continue;
        }
        for (int k = first; k < digits; k++) {
            if (k == 0)
                memcpy(out + begin, units, count * sizeof *out);
            else
                memset(out + (size_t)k * n + begin, 0, count * sizeof *out);
        }
    }
}

WIDEST_VECTORS int dp_exact_first_digits(dp_exact_host_sums sums, size_t n, int ranks, int digits, int64_t *out)
{
    int b = dp_exact_digit_bits(ranks);
    uint64_t largest = 0;
    double high_at[CHUNK], low_at[CHUNK];
    for (size_t begin = 0, c = 0; begin < n; begin += CHUNK, c++) {
        size_t count = begin + CHUNK < n ? CHUNK : n - begin;
        const double *high, *low; /* the chunk stays in the L1 cache through both passes */
        if (chunk_sums(sums, c, begin, count, one_digit_limit(b), out + begin, high_at, low_at, &high, &low)) {
            largest = largest_units_size(out + begin, count, largest);
            if (digits > 1)
                memset(out + n + begin, 0, count * sizeof *out);
            continue;
        }
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

WIDEST_VECTORS void dp_exact_to_floats(dp_exact_host_sums sums, size_t n, float *out)
{
    double high_at[CHUNK], low_at[CHUNK], sum_at[CHUNK];
    int64_t units[CHUNK];
    for (size_t begin = 0, c = 0; begin < n; begin += CHUNK, c++) {
        size_t count = begin + CHUNK < n ? CHUNK : n - begin;
        const double *high, *low; /* read before out is written: out may be sums.last */
        if (chunk_sums(sums, c, begin, count, DP_EXACT_UNITS_LIMIT, units, high_at, low_at, &high, &low)) {
            for (size_t i = 0; i < count; i++) /* one rank's sums are one digit's (to double, then float: each vectorises) */
                sum_at[i] = dp_exact_single_digit_sum(units[i]);
            for (size_t i = 0; i < count; i++)
                out[begin + i] = (float)sum_at[i];
            continue;
        }
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
