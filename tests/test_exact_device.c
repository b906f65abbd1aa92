/* --exact's accumulator in device memory (the CUDA backend's exact_* operations: on a GPU, and
 * in the fake-CUDA build on the host through the kernels' own per-thread code; exits 77 where
 * no GPU is visible or CUDA was not built): the floats and the digits from 0 and from a later
 * digit (of the accumulator, with a pending shard, and of a pending shard alone; the
 * accumulator left as it was) and the floats of summed digits are bitwise the host loops'
 * (src/strategy/exact_sum.c) on the same values; the device's accumulator (always in pieces)
 * after each shard added and the magnitude from the 8 bytes it leaves are those of
 * exact_math.h's arithmetic per element, looped on the host. Values span 2^-60 to 2^20 (or to
 * 2^-8, which the host keeps in units), with zeros, infinities, NaN and values past the 2^32
 * limit. */
#include "src/strategy/exact_sum.h"
#include "src/backend/exact_grid.h"
#include "dp/backend.h"
#include "dp/error.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SHARDS = 5 };

/* A float of random sign and magnitude between 2^-60 and 2^20 (zero sometimes), or below 2^-8
 * when `small`; with `specials`, now and then inf, NaN or a value too large for the grid. */
static float random_value(uint64_t *state, int specials, int small)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    unsigned r = (unsigned)(*state >> 33);
    if (specials && r % 997 == 0)
        return (const float[]){INFINITY, -INFINITY, NAN, 0x1p33f}[(r >> 10) % 4];
    if (r % 17 == 0)
        return 0.0f;
    float v = ldexpf(1.0f + (float)(r % 1000003) / 1000003.0f, (int)(r >> 20) % 81 - (small ? 88 : 60));
    return (r & 1) ? -v : v;
}

typedef struct device_sums {
    const dp_backend *be;
    size_t n;
    double *acc;            /* the device's accumulator */
    double *reference;      /* its pieces by exact_math.h's arithmetic, looped on the host */
    dp_exact_acc host;      /* the host loops' accumulator */
    float *values;          /* the last shard added; after add_shards, a shard left pending */
    float *pending;         /* the host's copy of that pending shard */
    int64_t *digits;
    uint64_t *largest;
} device_sums;

static device_sums open_sums(size_t n, int max_digits)
{
    device_sums s = {.n = n};
    dp_backend_request request = {.device = DP_DEVICE_CUDA, .local_size = 1};
    ck_assert_msg(dp_backend_open(&request, &s.be) == 0, "%s", dp_last_error());
    s.acc = s.be->alloc(s.be, DP_EXACT_PIECES * n * sizeof *s.acc, DP_MEM_OTHER, "acc");
    s.values = s.be->alloc(s.be, n * sizeof *s.values, DP_MEM_OTHER, "values");
    s.digits = s.be->alloc(s.be, (size_t)max_digits * n * sizeof *s.digits, DP_MEM_OTHER, "digits");
    s.largest = s.be->alloc(s.be, sizeof *s.largest, DP_MEM_OTHER, "largest");
    s.reference = calloc(DP_EXACT_PIECES * n, sizeof *s.reference);
    s.pending = malloc(n * sizeof *s.pending);
    ck_assert(s.acc && s.values && s.digits && s.largest && s.reference && s.pending);
    ck_assert_int_eq(dp_exact_acc_open(&s.host, n), 0);
    return s;
}

static void close_sums(device_sums *s)
{
    s->be->free(s->be, s->acc);
    s->be->free(s->be, s->values);
    s->be->free(s->be, s->digits);
    s->be->free(s->be, s->largest);
    free(s->reference);
    dp_exact_acc_close(&s->host);
    free(s->pending);
    dp_backend_close(s->be);
}

/* The device's accumulator equals the reference, byte for byte. */
static void same_accumulators(const device_sums *s, const char *when)
{
    double *copy = malloc(DP_EXACT_PIECES * s->n * sizeof *copy);
    s->be->download(s->be, copy, s->acc, DP_EXACT_PIECES * s->n * sizeof *copy);
    ck_assert_msg(memcmp(copy, s->reference, DP_EXACT_PIECES * s->n * sizeof *copy) == 0,
                  "the accumulators differ %s (n %zu)", when, s->n);
    free(copy);
}

/* SHARDS random shards added on the device, the reference and the host, and one more left
 * pending (s->values on the device, s->pending on the host); seed picks the values. */
static void add_shards(device_sums *s, uint64_t seed, int specials, int small)
{
    for (int shard = 0; shard <= SHARDS; shard++) {
        for (size_t i = 0; i < s->n; i++)
            s->pending[i] = random_value(&seed, specials, small);
        s->be->upload(s->be, s->values, s->pending, s->n * sizeof *s->pending);
        if (shard == SHARDS)
            break;
        s->be->exact_add(s->be, s->acc, s->values, s->n, shard == 0);
        dp_exact_add_thread(s->reference, s->pending, s->n, shard == 0, (dp_span){.first = 0, .step = 1});
        dp_exact_add(&s->host, s->pending, shard == 0);
        same_accumulators(s, "after a shard");
    }
}

/* The three ways the sums are read: the accumulator alone, with the pending shard, the pending
 * shard alone (a rank's only shard). */
enum { ACC, ACC_AND_PENDING, PENDING_ALONE, READS };
static dp_exact_host_sums host_sums(const device_sums *s, int read)
{
    return (dp_exact_host_sums){.acc = read == PENDING_ALONE ? NULL : &s->host, .last = read == ACC ? NULL : s->pending};
}
static dp_exact_sums reference_sums(const device_sums *s, int read)
{
    return (dp_exact_sums){.acc = read == PENDING_ALONE ? NULL : s->reference, .last = read == ACC ? NULL : s->pending};
}
static const double *device_acc(const device_sums *s, int read)
{
    return read == PENDING_ALONE ? NULL : s->acc;
}
static const float *device_pending(const device_sums *s, int read)
{
    return read == ACC ? NULL : s->values;
}

/* The magnitude of the reference's sums, as the device's 8 bytes should give it. */
static int reference_magnitude(const device_sums *s, int read)
{
    uint64_t largest = 0;
    for (size_t i = 0; i < s->n; i++) {
        double high, low;
        dp_exact_sum_at(reference_sums(s, read), s->n, i, &high, &low);
        uint64_t size = dp_exact_size_bits(high, low);
        largest = size > largest ? size : largest;
    }
    return dp_exact_magnitude_of(largest);
}

/* bytes from the device equal the host's. */
static void same_bytes(const dp_backend *be, const void *device, const void *host, size_t bytes, const char *what)
{
    char *copy = malloc(bytes);
    be->download(be, copy, device, bytes);
    ck_assert_msg(memcmp(copy, host, bytes) == 0, "%s differ (%zu bytes)", what, bytes);
    free(copy);
}

static const size_t SIZES[] = {1, 3, 255, 1000, 70001};

START_TEST(the_sum_to_floats_is_the_host_loops)
{
    for (size_t t = 0; t < sizeof SIZES / sizeof *SIZES; t++)
        for (int read = 0; read < READS; read++) {
            device_sums s = open_sums(SIZES[t], 1);
            add_shards(&s, 11 + t, 1, (int)t % 2);
            float *host = malloc(s.n * sizeof *host);
            dp_exact_to_floats(host_sums(&s, read), s.n, host);
            /* in place over the pending shard, as finish writes the gradient buffer */
            s.be->exact_to_floats(s.be, device_acc(&s, read), device_pending(&s, read), s.n, s.values);
            same_bytes(s.be, s.values, host, s.n * sizeof *host, "the floats");
            same_accumulators(&s, "after the floats");
            free(host);
            close_sums(&s);
        }
}
END_TEST

START_TEST(the_digits_and_magnitude_are_the_host_loops)
{
    static const int RANKS[] = {2, 3, 8, 256};
    for (size_t t = 0; t < sizeof SIZES / sizeof *SIZES; t++)
        for (size_t r = 0; r < sizeof RANKS / sizeof *RANKS; r++) {
            int ranks = RANKS[r], max_digits = dp_exact_max_digits(ranks), sent = 2, read = (int)((t + r) % READS);
            device_sums s = open_sums(SIZES[t], max_digits);
            add_shards(&s, 7 * t + r, t % 2, (int)r % 2); /* finite sums, or some not: every digit marked */
            int64_t *host = calloc((size_t)max_digits * s.n, sizeof *host);
            uint64_t largest = 0;
            dp_exact_first_digits(host_sums(&s, read), s.n, ranks, sent, host);
            s.be->exact_to_digits(s.be, device_acc(&s, read), device_pending(&s, read), s.n, dp_exact_digit_bits(ranks),
                                  0, sent, s.digits, s.largest);
            s.be->download(s.be, &largest, s.largest, sizeof largest);
            ck_assert_int_eq(dp_exact_magnitude_of(largest), reference_magnitude(&s, read));
            same_bytes(s.be, s.digits, host, (size_t)sent * s.n * sizeof *host, "the first digits");
            same_accumulators(&s, "after the first digits");
            dp_exact_to_digits(host_sums(&s, read), s.n, ranks, sent, max_digits, host);
            s.be->exact_to_digits(s.be, device_acc(&s, read), device_pending(&s, read), s.n, dp_exact_digit_bits(ranks),
                                  sent, max_digits, s.digits, s.largest);
            same_bytes(s.be, s.digits, host, (size_t)max_digits * s.n * sizeof *host, "the later digits");
            same_accumulators(&s, "after the later digits");
            free(host);
            close_sums(&s);
        }
}
END_TEST

START_TEST(summed_digits_to_floats_are_the_host_loops)
{
    int ranks = 3, max_digits = dp_exact_max_digits(ranks);
    for (size_t t = 0; t < sizeof SIZES / sizeof *SIZES; t++) {
        device_sums s = open_sums(SIZES[t], max_digits);
        size_t count = (size_t)max_digits * s.n;
        int64_t *summed = calloc(count, sizeof *summed), *digits = malloc(count * sizeof *digits);
        float *host = malloc(s.n * sizeof *host);
        for (int rank = 0; rank < ranks; rank++) { /* each rank's digits, added as integers (exact) */
            add_shards(&s, 100 * t + rank, 0, rank % 2);
            dp_exact_to_digits(host_sums(&s, ACC), s.n, ranks, 0, max_digits, digits);
            for (size_t i = 0; i < count; i++)
                summed[i] += digits[i];
        }
        dp_exact_from_digits(summed, s.n, ranks, max_digits, host);
        s.be->upload(s.be, s.digits, summed, count * sizeof *summed);
        s.be->exact_from_digits(s.be, s.digits, s.n, dp_exact_digit_bits(ranks), max_digits, s.values);
        same_bytes(s.be, s.values, host, s.n * sizeof *host, "the floats of summed digits");
        free(summed);
        free(digits);
        free(host);
        close_sums(&s);
    }
}
END_TEST

int main(void)
{
    setenv("FAKECUDA_DEVICES", "fakeA", 0); /* the fake runtime's one GPU; CUDA's ignores it */
    if (dp_backend_gpu_count() == 0) {
        printf("test_exact_device: no CUDA GPU visible (or dptrain built without CUDA): skipped\n");
        return 77;
    }
    Suite *s = suite_create("exact-device");
    TCase *tc = tcase_create("exact-device");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, the_sum_to_floats_is_the_host_loops);
    tcase_add_test(tc, the_digits_and_magnitude_are_the_host_loops);
    tcase_add_test(tc, summed_digits_to_floats_are_the_host_loops);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
