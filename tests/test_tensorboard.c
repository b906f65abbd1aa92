/* --tensorboard's event files (src/train/tensorboard.c) read back by an independent reader:
 * CRC-32C against its published check value, every record's framing and both masked CRCs, the
 * Event protocol buffers decoded field by field (the file version first, then each summary's
 * tags, float values, steps and wall times), and a file cut anywhere keeping every whole
 * record before the cut readable. tests/controls.sh reads the same files with TensorBoard's
 * own EventAccumulator where the tensorboard package is installed. */
#include "src/train/tensorboard.h"
#include "dp/error.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Bit by bit, apart from the writer's table: CRC-32C (reflected polynomial 0x82F63B78). */
static uint32_t crc32c_bitwise(const unsigned char *p, size_t n)
{
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static uint32_t masked(const unsigned char *p, size_t n)
{
    uint32_t crc = crc32c_bitwise(p, n);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static uint64_t little(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

START_TEST(crc32c_has_its_check_value)
{
    ck_assert_uint_eq(dp_crc32c("123456789", 9), 0xe3069283u);
    ck_assert_uint_eq(crc32c_bitwise((const unsigned char *)"123456789", 9), 0xe3069283u);
    unsigned char bytes[300];
    for (int i = 0; i < 300; i++)
        bytes[i] = (unsigned char)(i * 37 + 11);
    ck_assert_uint_eq(dp_crc32c_masked(bytes, 300), masked(bytes, 300));
}
END_TEST

/* A decoded event. */
typedef struct event {
    double wall_time;
    long step;
    char version[32];
    int values;
    char tags[8][64];
    float value[8];
} event;

static uint64_t varint(const unsigned char **p, const unsigned char *end)
{
    uint64_t v = 0;
    for (int shift = 0; *p < end; shift += 7) {
        unsigned char b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    ck_abort_msg("varint runs past its message");
    return 0;
}

static void decode_value(const unsigned char *p, const unsigned char *end, event *e)
{
    ck_assert_int_lt(e->values, 8);
    while (p < end) {
        uint64_t key = varint(&p, end);
        if (key == (1 << 3 | 2)) {
            uint64_t n = varint(&p, end);
            ck_assert(n < 64 && p + n <= end);
            memcpy(e->tags[e->values], p, n);
            e->tags[e->values][n] = '\0';
            p += n;
        } else {
            ck_assert_uint_eq(key, 2 << 3 | 5); /* simple_value, fixed32 */
            uint32_t bits = (uint32_t)little(p, 4);
            memcpy(&e->value[e->values], &bits, 4);
            p += 4;
        }
    }
    e->values++;
}

static void decode_event(const unsigned char *p, size_t n, event *e)
{
    const unsigned char *end = p + n;
    memset(e, 0, sizeof *e);
    while (p < end) {
        uint64_t key = varint(&p, end);
        if (key == (1 << 3 | 1)) {
            uint64_t bits = little(p, 8);
            memcpy(&e->wall_time, &bits, 8);
            p += 8;
        } else if (key == (2 << 3 | 0)) {
            e->step = (long)varint(&p, end);
        } else if (key == (3 << 3 | 2)) {
            uint64_t len = varint(&p, end);
            ck_assert(len < sizeof e->version && p + len <= end);
            memcpy(e->version, p, len);
            p += len;
        } else {
            ck_assert_uint_eq(key, 5 << 3 | 2); /* summary */
            uint64_t len = varint(&p, end);
            const unsigned char *summary_end = p + len;
            ck_assert(summary_end <= end);
            while (p < summary_end) {
                ck_assert_uint_eq(varint(&p, summary_end), 1 << 3 | 2); /* Summary.value */
                uint64_t value_len = varint(&p, summary_end);
                decode_value(p, p + value_len, e);
                p += value_len;
            }
        }
    }
}

/* The whole records of bytes[0, n): decoded into events (at most max); returns their count. */
static int read_records(const unsigned char *bytes, size_t n, event *events, int max)
{
    int count = 0;
    size_t at = 0;
    while (at + 12 <= n) {
        uint64_t length = little(bytes + at, 8);
        ck_assert_uint_eq(little(bytes + at + 8, 4), masked(bytes + at, 8));
        if (at + 12 + length + 4 > n)
            break; /* cut short: a crash's last record */
        ck_assert_uint_eq(little(bytes + at + 12 + length, 4), masked(bytes + at + 12, length));
        ck_assert_int_lt(count, max);
        decode_event(bytes + at + 12, length, &events[count++]);
        at += 12 + length + 4;
    }
    return count;
}

static unsigned char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static unsigned char bytes[1 << 16];
    *n = fread(bytes, 1, sizeof bytes, f);
    fclose(f);
    return bytes;
}

START_TEST(events_are_framed_and_decoded)
{
    char dir[] = "/tmp/dptrain-tb-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    dp_tensorboard tb;
    ck_assert_int_eq(dp_tensorboard_open(&tb, dir, 1795000000.25), 0);
    ck_assert_ptr_nonnull(strstr(tb.path, "/events.out.tfevents.1795000000."));
    for (long step = 10; step <= 30; step += 10) {
        dp_tensorboard_add(&tb, "train/loss", 1.0 / (double)step);
        dp_tensorboard_add(&tb, "train/lr", 0.05);
        ck_assert_int_eq(dp_tensorboard_write(&tb, step, 1795000001.0 + (double)step), 0);
    }
    dp_tensorboard_add(&tb, "test/accuracy", 0.875);
    ck_assert_int_eq(dp_tensorboard_write(&tb, 123456789012L, 1795000100.5), 0);
    ck_assert_int_eq(dp_tensorboard_write(&tb, 7, 0.0), 0); /* nothing added: no event */
    char path[sizeof tb.path];
    snprintf(path, sizeof path, "%s", tb.path);
    ck_assert_int_eq(dp_tensorboard_close(&tb), 0);
    size_t n;
    unsigned char *bytes = read_all(path, &n);
    event events[8];
    ck_assert_int_eq(read_records(bytes, n, events, 8), 5);
    ck_assert_str_eq(events[0].version, "brain.Event:2");
    ck_assert(events[0].wall_time == 1795000000.25 && events[0].values == 0);
    for (int i = 1; i <= 3; i++) {
        ck_assert_int_eq(events[i].step, 10L * i);
        ck_assert(events[i].wall_time == 1795000001.0 + 10.0 * i);
        ck_assert_int_eq(events[i].values, 2);
        ck_assert_str_eq(events[i].tags[0], "train/loss");
        ck_assert(events[i].value[0] == (float)(1.0 / (10.0 * i)));
        ck_assert_str_eq(events[i].tags[1], "train/lr");
        ck_assert(events[i].value[1] == 0.05f);
    }
    ck_assert_int_eq(events[4].step, 123456789012L);
    ck_assert_str_eq(events[4].tags[0], "test/accuracy");
    ck_assert(events[4].value[0] == 0.875f);
    /* A crash mid-write: every cut leaves the whole records before it readable. */
    for (size_t cut = 0; cut < n; cut++) {
        int whole = read_records(bytes, cut, events, 8);
        ck_assert_int_le(whole, 5);
    }
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(an_unwritable_directory_is_named)
{
    dp_tensorboard tb;
    ck_assert_int_eq(dp_tensorboard_open(&tb, "/proc/no-such-dir/tb", 1.0), DP_EIO);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "--tensorboard /proc/no-such-dir/tb"));
    char dir[] = "/tmp/dptrain-tb-XXXXXX", nested[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(nested, sizeof nested, "%s/runs/demo", dir);
    ck_assert_int_eq(dp_tensorboard_open(&tb, nested, 2.0), 0); /* parents made too */
    char path[sizeof tb.path];
    snprintf(path, sizeof path, "%s", tb.path);
    ck_assert_int_eq(dp_tensorboard_close(&tb), 0);
    unlink(path);
    rmdir(nested);
    snprintf(nested, sizeof nested, "%s/runs", dir);
    rmdir(nested);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tensorboard");
    TCase *tc = tcase_create("events");
    tcase_add_test(tc, crc32c_has_its_check_value);
    tcase_add_test(tc, events_are_framed_and_decoded);
    tcase_add_test(tc, an_unwritable_directory_is_named);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
