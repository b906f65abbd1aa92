/* auto's table (parse, pick, write), byte counts, and dp_bench's options; single process. */
#include "dp/auto_table.h"
#include "dp/bench.h"
#include "dp/error.h"
#include "dp/units.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char good_table[] =
    "# measured somewhere\n"
    "\n"
    "2   4K    mpi      # small: latency\n"
    "4   1K    rhd\r\n"
    "2   1M    ring\n"
    "   2 inf  rhd\n"
    "4   inf   ring-pipelined\n";

static void parse_good(dp_auto_table *t)
{
    ck_assert_msg(dp_auto_table_parse(good_table, "good.table", t) == 0, "%s", dp_last_error());
}

static const char *pick(const dp_auto_table *t, int world, size_t bytes)
{
    const dp_auto_rule *rule = dp_auto_table_pick(t, world, bytes);
    ck_assert_ptr_nonnull(rule);
    return dp_auto_rule_algorithm(rule);
}

START_TEST(good_table_picks_by_world_and_size)
{
    dp_auto_table t;
    parse_good(&t);
    ck_assert_uint_eq(t.count, 5);
    ck_assert_str_eq(pick(&t, 2, 4), "mpi");
    ck_assert_str_eq(pick(&t, 2, 4096), "mpi");
    ck_assert_str_eq(pick(&t, 2, 4097), "ring");
    ck_assert_str_eq(pick(&t, 2, (size_t)1 << 20), "ring");
    ck_assert_str_eq(pick(&t, 2, ((size_t)1 << 20) + 4), "rhd");
    ck_assert_str_eq(pick(&t, 2, SIZE_MAX), "rhd");
    ck_assert_str_eq(pick(&t, 4, 1024), "rhd");
    ck_assert_str_eq(pick(&t, 4, 1028), "ring-pipelined");
    ck_assert_int_eq(dp_auto_table_pick(&t, 4, 1028)->line, 7);
    dp_auto_table_free(&t);
}
END_TEST

START_TEST(unlisted_world_uses_the_nearest_listed_below)
{
    dp_auto_table t;
    parse_good(&t);
    ck_assert_str_eq(pick(&t, 3, 8192), "ring");      /* W=2's rules */
    ck_assert_str_eq(pick(&t, 64, 8192), "ring-pipelined"); /* W=4's rules */
    ck_assert_str_eq(pick(&t, 1, 8192), "ring");      /* below all: the smallest, W=2 */
    char text[256];
    dp_auto_table_describe(&t, 3, text, sizeof text);
    ck_assert_str_eq(text, "rules of W=2: mpi up to 4K, ring up to 1M, rhd above");
    dp_auto_table_free(&t);
}
END_TEST

/* Parses text from a file named NAME and expects an error message naming NAME:LINE. */
static void expect_malformed(const char *text, int line, const char *problem)
{
    char *path = dp_test_write_file("bad.table", text, strlen(text), 0);
    dp_auto_table t = {0};
    ck_assert_int_eq(dp_auto_table_read(path, &t), DP_EFORMAT);
    char where[1100];
    snprintf(where, sizeof where, "%s:%d: ", path, line);
    const char *message = dp_last_error();
    ck_assert_msg(strncmp(message, where, strlen(where)) == 0, "'%s' does not start with '%s'", message, where);
    ck_assert_msg(strstr(message, problem), "'%s' lacks '%s'", message, problem);
    ck_assert_ptr_null(t.rules);
    free(path);
}

START_TEST(malformed_lines_are_named_by_file_and_line)
{
    expect_malformed("2 4K\n", 1, "expected 'WORLD MAX_BYTES ALGORITHM', found 2 fields");
    expect_malformed("# c\n2 4K mpi extra\n2 inf mpi\n", 2, "found more than 3 fields");
    expect_malformed("0 inf mpi\n", 1, "world size '0'");
    expect_malformed("two inf mpi\n", 1, "world size 'two'");
    expect_malformed("2 4Q mpi\n2 inf mpi\n", 1, "MAX_BYTES '4Q'");
    expect_malformed("2 -4 mpi\n2 inf mpi\n", 1, "MAX_BYTES '-4'");
    expect_malformed("\n\n2 inf bogus\n", 3, "unknown algorithm 'bogus' (valid: mpi ");
    expect_malformed("2 inf auto\n", 1, "'auto' cannot choose itself");
    expect_malformed("2 4K mpi\n3 inf mpi\n2 4K ring\n2 inf ring\n", 3, "MAX_BYTES must increase");
    expect_malformed("2 inf mpi\n2 4K ring\n", 2, "MAX_BYTES must increase");
    expect_malformed("2 4K mpi\n2 1M ring\n4 inf mpi\n", 2, "last rule of world 2 must have MAX_BYTES inf");
}
END_TEST

START_TEST(empty_and_missing_files_are_errors_naming_them)
{
    char *path = dp_test_write_file("empty.table", "# nothing\n", 10, 0);
    dp_auto_table t = {0};
    ck_assert_int_eq(dp_auto_table_read(path, &t), DP_EFORMAT);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), path));
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "no rules"));
    free(path);
    path = dp_test_path("missing.table");
    ck_assert_int_eq(dp_auto_table_read(path, &t), DP_EIO);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), path));
    free(path);
}
END_TEST

START_TEST(written_table_reads_back_and_keeps_other_worlds)
{
    dp_auto_table t;
    parse_good(&t);
    const size_t max_bytes[] = {64, 16 << 20, SIZE_MAX};
    const char *const names[] = {"naive", "rhd", "ring"};
    ck_assert_int_eq(dp_auto_table_set_world(&t, 3, max_bytes, names, 3), 0);
    char *path = dp_test_path("written.table");
    ck_assert_msg(dp_auto_table_write(path, &t, "test table") == 0, "%s", dp_last_error());
    char temp[1100];
    snprintf(temp, sizeof temp, "%s.tmp.%ld", path, (long)getpid());
    ck_assert_int_ne(access(temp, F_OK), 0);
    dp_auto_table back;
    ck_assert_msg(dp_auto_table_read(path, &back) == 0, "%s", dp_last_error());
    ck_assert_uint_eq(back.count, 8);
    ck_assert_str_eq(pick(&back, 3, 64), "naive");
    ck_assert_str_eq(pick(&back, 3, 68), "rhd");
    ck_assert_str_eq(pick(&back, 3, (size_t)32 << 20), "ring");
    ck_assert_str_eq(pick(&back, 2, 4096), "mpi");
    ck_assert_str_eq(pick(&back, 4, 4096), "ring-pipelined");
    for (size_t i = 1; i < back.count; i++) /* written grouped by world */
        ck_assert_int_le(back.rules[i - 1].world, back.rules[i].world);
    const char *const bad[] = {"auto"};
    const size_t inf[] = {SIZE_MAX};
    ck_assert_int_eq(dp_auto_table_set_world(&back, 2, inf, bad, 1), DP_EINVAL);
    dp_auto_table_free(&back);
    dp_auto_table_free(&t);
    free(path);
}
END_TEST

START_TEST(default_table_covers_every_world_and_size)
{
    dp_auto_table t;
    ck_assert_msg(dp_auto_table_default(&t) == 0, "%s", dp_last_error());
    for (int world = 1; world <= 64; world++)
        for (size_t bytes = 4; bytes <= ((size_t)1 << 30); bytes *= 2)
            ck_assert_str_ne(pick(&t, world, bytes), "auto");
    dp_auto_table_free(&t);
}
END_TEST

START_TEST(byte_counts_take_binary_suffixes)
{
    size_t bytes = 0;
    ck_assert(dp_parse_bytes("4", &bytes) && bytes == 4);
    ck_assert(dp_parse_bytes("4K", &bytes) && bytes == 4096);
    ck_assert(dp_parse_bytes("64m", &bytes) && bytes == (size_t)64 << 20);
    ck_assert(dp_parse_bytes("1G", &bytes) && bytes == (size_t)1 << 30);
    const char *bad[] = {"", "K", "-4", "+4", " 4", "4KB", "4.5K", "99999999999999999999", "17179869184G"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(!dp_parse_bytes(bad[i], &bytes), "'%s' accepted", bad[i]);
}
END_TEST

static int parse_bench(dp_bench_options *o, const char *const *args)
{
    char *argv[32] = {"dp_bench"};
    int argc = 1;
    while (args[argc - 1])
        argv[argc] = (char *)args[argc - 1], argc++;
    return dp_bench_options_parse(o, argc, argv, NULL);
}

START_TEST(bench_options_default_to_all_algorithms_4_bytes_to_64_mib)
{
    dp_bench_options o;
    const char *none[] = {NULL};
    ck_assert_int_eq(parse_bench(&o, none), DP_OPTIONS_RUN);
    ck_assert_uint_eq(o.min_bytes, 4);
    ck_assert_uint_eq(o.max_bytes, (size_t)64 << 20);
    ck_assert_int_eq(o.factor, 2);
    ck_assert_int_eq(o.check, 1);
    ck_assert_int_eq(o.rounds, 1);
    ck_assert_str_eq(o.algorithms[0], "mpi");
    ck_assert_str_eq(o.algorithms[o.algorithm_count - 1], "auto");
    const char *some[] = {"-b", "1K", "-e", "16M", "-f", "4", "-w", "0", "-n", "3", "-r", "2", "-a", "ring,mpi", "-c", "0", NULL};
    ck_assert_int_eq(parse_bench(&o, some), DP_OPTIONS_RUN);
    ck_assert_uint_eq(o.min_bytes, 1024);
    ck_assert_uint_eq(o.max_bytes, (size_t)16 << 20);
    ck_assert_int_eq(o.algorithm_count, 2);
    ck_assert_str_eq(o.algorithms[1], "mpi");
    ck_assert_int_eq(o.check, 0);
    ck_assert_int_eq(o.rounds, 2);
    ck_assert_int_eq(o.iters, 3);
    const char *tune[] = {"--tune", "t.table", NULL}; /* auto is what tuning is for, not a candidate */
    ck_assert_int_eq(parse_bench(&o, tune), DP_OPTIONS_RUN);
    for (int i = 0; i < o.algorithm_count; i++)
        ck_assert_str_ne(o.algorithms[i], "auto");
}
END_TEST

static void expect_bench_error(const char *const *args, const char *phrase)
{
    dp_bench_options o;
    ck_assert_int_eq(parse_bench(&o, args), DP_EINVAL);
    ck_assert_msg(strstr(dp_last_error(), phrase), "'%s' lacks '%s'", dp_last_error(), phrase);
}

START_TEST(bench_options_reject_bad_values_naming_them)
{
    const char *a[] = {"-a", "ring,bogus", NULL};
    expect_bench_error(a, "unknown algorithm 'bogus' (valid: mpi ");
    const char *b[] = {"-b", "2", NULL};
    expect_bench_error(b, "-b '2'");
    const char *e[] = {"-b", "1M", "-e", "1K", NULL};
    expect_bench_error(e, "-e 1024 is below -b 1048576");
    const char *f[] = {"-f", "1", NULL};
    expect_bench_error(f, "-f '1'");
    const char *n[] = {"-n", "0", NULL};
    expect_bench_error(n, "-n '0'");
    const char *r[] = {"-r", "0", NULL};
    expect_bench_error(r, "-r '0'");
    const char *c[] = {"-c", "yes", NULL};
    expect_bench_error(c, "-c 'yes'");
    const char *missing[] = {"-b", NULL};
    expect_bench_error(missing, "-b: missing value");
    const char *unknown[] = {"--bogus", NULL};
    expect_bench_error(unknown, "--bogus: unknown option");
    const char *tune_auto[] = {"-a", "auto", "--tune", "t.table", NULL};
    expect_bench_error(tune_auto, "--tune needs algorithms other than auto");
}
END_TEST

START_TEST(bench_inputs_sum_exactly_and_busbw_follows_nccl)
{
    for (size_t i = 0; i < 1000; i++) {
        ck_assert(dp_bench_value(0, i) != dp_bench_value(1, i));
        ck_assert(dp_bench_value(0, i) == (float)(int)dp_bench_value(0, i));
        ck_assert(dp_bench_value(3, i) >= -5.0f && dp_bench_value(3, i) <= 5.0f);
    }
    ck_assert(dp_bench_value(0, 0) != dp_bench_value(0, 1));
    enum { COUNT = 1000, WORLD = 3 };
    float sums[COUNT];
    for (size_t i = 0; i < COUNT; i++)
        sums[i] = dp_bench_value(0, i) + dp_bench_value(1, i) + dp_bench_value(2, i);
    ck_assert_int_eq(dp_bench_count_wrong(sums, COUNT, WORLD), 0);
    sums[0] += 1.0f;
    sums[500] = -sums[500] + 0.5f;
    sums[COUNT - 1] = NAN;
    ck_assert_int_eq(dp_bench_count_wrong(sums, COUNT, WORLD), 3);
    ck_assert_int_gt(dp_bench_count_wrong(sums, COUNT, WORLD - 1), 500);
    /* 1 GB in 1 s on 4 ranks: algbw 1 GB/s, busbw 2 * 3 / 4 = 1.5 GB/s. */
    ck_assert_double_eq_tol(dp_bench_busbw(1000000000, 1.0, 4), 1.5, 1e-12);
    ck_assert_double_eq_tol(dp_bench_busbw(1000000000, 1.0, 1), 0.0, 1e-12);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bench");
    TCase *table = tcase_create("auto table");
    tcase_add_test(table, good_table_picks_by_world_and_size);
    tcase_add_test(table, unlisted_world_uses_the_nearest_listed_below);
    tcase_add_test(table, malformed_lines_are_named_by_file_and_line);
    tcase_add_test(table, empty_and_missing_files_are_errors_naming_them);
    tcase_add_test(table, written_table_reads_back_and_keeps_other_worlds);
    tcase_add_test(table, default_table_covers_every_world_and_size);
    suite_add_tcase(s, table);
    TCase *options = tcase_create("dp_bench options");
    tcase_add_test(options, byte_counts_take_binary_suffixes);
    tcase_add_test(options, bench_options_default_to_all_algorithms_4_bytes_to_64_mib);
    tcase_add_test(options, bench_options_reject_bad_values_naming_them);
    tcase_add_test(options, bench_inputs_sum_exactly_and_busbw_follows_nccl);
    suite_add_tcase(s, options);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
