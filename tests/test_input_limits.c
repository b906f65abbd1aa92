/* Hostile headers: each reader gets a small file whose header announces far more data than the
 * file holds, with the process's address space capped just above what it already uses, so
 * the file must be rejected as malformed before any allocation the file cannot justify (an
 * attempted one fails under the cap and the reader would answer DP_ENOMEM instead). */
/* MAP_ANONYMOUS is outside strict POSIX 2008. */
#define _DEFAULT_SOURCE
#include "dp/data.h"
#include "dp/error.h"
#include "dp/safetensors.h"
#include "tests/testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

/* Below the smallest allocation these headers could ask for (the 1 MiB .npy header) and above
 * what opening and reading a file needs. */
#define HEADROOM_BYTES ((rlim_t)512 << 10)

static struct rlimit saved_limit;

static rlim_t address_space_in_use(void)
{
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%lu", &pages), 1);
    fclose(f);
    return (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE);
}

/* Only the soft limit moves, so the cap can be lifted again in the same process. */
static void cap_address_space(void)
{
    ck_assert_int_eq(getrlimit(RLIMIT_AS, &saved_limit), 0);
    struct rlimit cap = {address_space_in_use() + HEADROOM_BYTES, saved_limit.rlim_max};
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &cap), 0);
}

static void lift_cap(void)
{
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &saved_limit), 0);
}

/* Each reader as one call on a path; whatever it returns is freed, failure or not. */
static int read_idx_images(const char *path)
{
    dp_idx idx;
    int rc = dp_idx_read(path, 3, &idx);
    dp_idx_free(&idx);
    return rc;
}

static int read_npy(const char *path)
{
    dp_npy npy;
    int rc = dp_npy_read(path, &npy);
    dp_npy_free(&npy);
    return rc;
}

static int read_safetensors(const char *path)
{
    float w = 0.0f;
    dp_tensor_ref ref = {.name = "w", .ndim = 1, .shape = {1}, .data = &w};
    return dp_safetensors_read(path, &ref, 1);
}

/* Writes bytes to name (gzip-compressed when asked), reads the file with the address space
 * capped, and checks it was rejected as malformed with phrase and the path in the message. */
static void assert_rejected_under_cap(int (*read)(const char *path), const char *name,
                                      const void *bytes, size_t len, int gzip,
                                      const char *phrase)
{
    char *path = dp_test_write_file(name, bytes, len, gzip);
    cap_address_space();
    int rc = read(path);
    lift_cap();
    ck_assert_msg(rc == DP_EFORMAT, "%s: got %d (%s), expected DP_EFORMAT", path, rc,
                  dp_last_error());
    ck_assert_msg(strstr(dp_last_error(), phrase) && strstr(dp_last_error(), path),
                  "message \"%s\" lacks \"%s\" or the path", dp_last_error(), phrase);
    free(path);
}

/* The header of an idx3-ubyte file of 10^6 images of 1000 x 1000 pixels: 10^12 bytes. */
static const uint8_t TERABYTE_IDX_HEADER[16] = {0, 0, 0x08, 3, 0, 0x0F, 0x42, 0x40,
                                                0, 0, 0x03, 0xE8, 0, 0, 0x03, 0xE8};

START_TEST(test_raw_idx_announcing_a_terabyte)
{
    assert_rejected_under_cap(read_idx_images, "terabyte-idx3", TERABYTE_IDX_HEADER,
                              sizeof TERABYTE_IDX_HEADER, 0,
                              "truncated: expected 1000000000000 bytes of data, got 0");
}
END_TEST

START_TEST(test_gzip_idx_announcing_more_than_deflate_can_hold)
{
    uint8_t file[sizeof TERABYTE_IDX_HEADER + 12] = {0};
    memcpy(file, TERABYTE_IDX_HEADER, sizeof TERABYTE_IDX_HEADER);
    assert_rejected_under_cap(read_idx_images, "terabyte-idx3.gz", file, sizeof file, 1,
                              "truncated: expected 1000000000000 bytes of data, more than a");
}
END_TEST

START_TEST(test_npy_announcing_four_terabytes)
{
    /* A version 1.0 header (128 bytes with the preamble) for float32 (10^6, 10^6), no data. */
    static const char dict[] =
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }";
    char file[128];
    memset(file, ' ', sizeof file);
    memcpy(file, "\x93NUMPY\x01\x00", 8);
    file[8] = (char)(sizeof file - 10);
    file[9] = 0;
    memcpy(file + 10, dict, sizeof dict - 1);
    file[sizeof file - 1] = '\n';
    assert_rejected_under_cap(read_npy, "terabytes.npy", file, sizeof file, 0,
                              "truncated: expected 4000000000000 bytes of data, got 0");
}
END_TEST

START_TEST(test_npy_header_length_past_the_file)
{
    /* Version 2.0 with the largest header length the reader accepts (1 MiB), in 13 bytes. */
    static const uint8_t file[13] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0, 0, 0x10, 0, '{'};
    assert_rejected_under_cap(read_npy, "long-header.npy", file, sizeof file, 0,
                              "header length 1048576 extends past the end of the 13-byte");
}
END_TEST

START_TEST(test_safetensors_header_length_past_the_file)
{
    /* A prefix announcing a 99,999,999-byte JSON header (just under the format's limit). */
    static const uint8_t file[16] = {0xFF, 0xE0, 0xF5, 0x05, 0, 0, 0, 0, '{', '}'};
    assert_rejected_under_cap(read_safetensors, "long-header.safetensors", file, sizeof file,
                              0, "header length 99999999 extends past the end");
}
END_TEST

/* The cap itself must bite, or the tests above would pass however much the readers asked for;
 * mmap asks for address space as any large allocation does, and fails softly under ASan too. */
START_TEST(test_cap_refuses_address_space_above_the_headroom)
{
    size_t len = (size_t)HEADROOM_BYTES * 4;
    cap_address_space();
    void *block = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    lift_cap();
    int refused = block == MAP_FAILED;
    if (!refused)
        munmap(block, len);
    ck_assert_msg(refused, "mapping %zu bytes succeeded under the cap", len);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("input_limits");
    TCase *tc = tcase_create("announced_sizes");
    tcase_add_test(tc, test_cap_refuses_address_space_above_the_headroom);
    tcase_add_test(tc, test_raw_idx_announcing_a_terabyte);
    tcase_add_test(tc, test_gzip_idx_announcing_more_than_deflate_can_hold);
    tcase_add_test(tc, test_npy_announcing_four_terabytes);
    tcase_add_test(tc, test_npy_header_length_past_the_file);
    tcase_add_test(tc, test_safetensors_header_length_past_the_file);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
