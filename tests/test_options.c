/* The command line: defaults, values, and errors that name the option. */
#include "dp/comm.h"
#include "dp/error.h"
#include "dp/options.h"
#include "tests/testutil.h"

#include <stdlib.h>
#include <string.h>

/* Parses a NULL-terminated list of arguments after the program name. */
static int parse(dp_options *o, int world, const char *const *args)
{
    char *argv[32] = {"dp_worker"};
    int argc = 1;
    while (args[argc - 1])
        argv[argc] = (char *)args[argc - 1], argc++;
    FILE *sink = fopen("/dev/null", "w");
    int status = dp_options_parse(o, argc, argv, world, sink);
    fclose(sink);
    return status;
}

START_TEST(defaults_train_the_demo_model)
{
    dp_options o;
    const char *args[] = {NULL};
    ck_assert_int_eq(parse(&o, 2, args), DP_OPTIONS_RUN);
    ck_assert_str_eq(o.data, "fashion-mnist");
    ck_assert_int_eq(o.nwidths, 4);
    ck_assert_int_eq(o.widths[0], 784);
    ck_assert_int_eq(o.widths[3], 10);
    ck_assert_int_eq(o.batch, 256);
    ck_assert_int_eq(o.accum, 1);
    ck_assert_str_eq(o.allreduce, "mpi");
    ck_assert_int_eq(o.threads, 1);
}
END_TEST

START_TEST(values_are_applied)
{
    dp_options o;
    const char *args[] = {"--data", "synthetic:100,8,3", "--layers", "8,16,3", "--batch", "33",
                          "--accum", "2", "--lr", "0.2", "--momentum", "0", "--weight-decay",
                          "1e-4", "--steps", "20", "--drop-last", "--seed", "9", "--quiet",
                          "--save", "out.safetensors", "--init", "in.safetensors",
                          "--lr-schedule", "cosine", "--loss", "xent", NULL};
    ck_assert_int_eq(parse(&o, 3, args), DP_OPTIONS_RUN);
    ck_assert_int_eq(o.batch, 33);
    ck_assert_int_eq(o.accum, 2);
    ck_assert_float_eq(o.lr, 0.2f);
    ck_assert_float_eq(o.momentum, 0.0f);
    ck_assert_float_eq_tol(o.weight_decay, 1e-4f, 1e-10f);
    ck_assert_int_eq(o.steps, 20);
    ck_assert_int_eq(o.drop_last, 1);
    ck_assert_uint_eq(o.seed, 9);
    ck_assert_int_eq(o.quiet, 1);
    ck_assert_str_eq(o.save_path, "out.safetensors");
    ck_assert_str_eq(o.init_path, "in.safetensors");
    ck_assert_int_eq(o.lr_schedule, DP_LR_COSINE);
    ck_assert_int_eq(o.loss, DP_LOSS_CHOICE_XENT);
}
END_TEST

START_TEST(help_and_version_ask_to_exit)
{
    dp_options o;
    const char *help[] = {"--help", NULL}, *version[] = {"--version", NULL};
    ck_assert_int_eq(parse(&o, 1, help), DP_OPTIONS_EXIT);
    ck_assert_int_eq(parse(&o, 1, version), DP_OPTIONS_EXIT);
}
END_TEST

START_TEST(help_lists_every_option_with_its_default)
{
    char *path = dp_test_path("help.txt");
    FILE *f = fopen(path, "w+");
    dp_options_print_help(f);
    rewind(f);
    char text[8192] = {0};
    ck_assert_uint_gt(fread(text, 1, sizeof text - 1, f), 0);
    fclose(f);
    static const char *const expected[] = {"--data", "--test-data", "--layers", "--loss", "--batch",
        "--accum", "--lr", "--lr-schedule", "--momentum", "--weight-decay", "--epochs", "--steps", "--drop-last",
        "--seed", "--allreduce", "--segment-bytes", "--log-every", "--quiet", "--threads", "--save", "--init",
        "--help", "--version", "[default: 256]", "[default: 784,256,256,10]", "mpi"};
    for (size_t i = 0; i < sizeof expected / sizeof *expected; i++)
        ck_assert_msg(strstr(text, expected[i]) != NULL, "help lacks %s", expected[i]);
    free(path);
}
END_TEST

static void expect_error(int world, const char *const *args, const char *phrase)
{
    dp_options o;
    ck_assert_int_eq(parse(&o, world, args), DP_EINVAL);
    ck_assert_msg(strstr(dp_last_error(), phrase) != NULL, "message '%s' lacks '%s'",
                  dp_last_error(), phrase);
}

START_TEST(bad_values_are_rejected_naming_the_option)
{
    const char *batch0[] = {"--batch", "0", NULL};
    expect_error(1, batch0, "--batch '0'");
    const char *negative_lr[] = {"--lr", "-0.1", NULL};
    expect_error(1, negative_lr, "--lr '-0.1'");
    const char *zero_lr[] = {"--lr", "0", NULL};
    expect_error(1, zero_lr, "--lr '0'");
    const char *nan_lr[] = {"--lr", "nan", NULL};
    expect_error(1, nan_lr, "--lr 'nan'");
    const char *small_batch[] = {"--batch", "3", NULL};
    expect_error(4, small_batch, "smaller than the world size 4");
    const char *momentum[] = {"--momentum", "1.5", NULL};
    expect_error(1, momentum, "--momentum");
    const char *text_epochs[] = {"--epochs", "ten", NULL};
    expect_error(1, text_epochs, "--epochs 'ten'");
    const char *loss[] = {"--loss", "hinge", NULL};
    expect_error(1, loss, "--loss 'hinge': must be one of auto, xent, mse");
    const char *schedule[] = {"--lr-schedule", "linear", NULL};
    expect_error(1, schedule, "--lr-schedule 'linear': must be one of constant, cosine");
    const char *layers[] = {"--layers", "784", NULL};
    expect_error(1, layers, "--layers '784'");
    const char *unknown[] = {"--bacth", "3", NULL};
    expect_error(1, unknown, "--bacth");
    const char *missing[] = {"--batch", NULL};
    expect_error(1, missing, "--batch");
    const char *stray[] = {"data.npy", NULL};
    expect_error(1, stray, "'data.npy': unexpected argument");
}
END_TEST

START_TEST(segment_bytes_takes_any_size_from_one_float)
{
    dp_options o;
    const char *none[] = {NULL}, *odd[] = {"--segment-bytes", "4102", NULL};
    ck_assert_int_eq(parse(&o, 2, none), DP_OPTIONS_RUN);
    ck_assert_int_eq(o.segment_bytes, (long)DP_SEGMENT_BYTES_DEFAULT);
    ck_assert_int_eq(parse(&o, 2, odd), DP_OPTIONS_RUN);
    ck_assert_int_eq(o.segment_bytes, 4102);
    const char *too_small[] = {"--segment-bytes", "3", NULL};
    expect_error(1, too_small, "--segment-bytes '3': must be an integer >= 4");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("options");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, defaults_train_the_demo_model);
    tcase_add_test(tc, segment_bytes_takes_any_size_from_one_float);
    tcase_add_test(tc, values_are_applied);
    tcase_add_test(tc, help_and_version_ask_to_exit);
    tcase_add_test(tc, help_lists_every_option_with_its_default);
    tcase_add_test(tc, bad_values_are_rejected_naming_the_option);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
