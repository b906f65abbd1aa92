/* The command line: defaults, values, and errors that name the option. */
#include "dp/comm.h"
#include "dp/error.h"
#include "dp/options.h"
#include "src/train/limits.h"
#include "src/train/option_table.h"
#include "src/train/preempt.h"
#include "tests/testutil.h"

#include <stddef.h>
#include <stdint.h>
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
    ck_assert_int_eq(o.model.from_layers, 1);
    ck_assert_int_eq(o.model.inputs, 784);
    ck_assert_int_eq(o.model.count, 5); /* linear, relu, linear, relu, linear */
    ck_assert_int_eq(o.model.modules[4].options.out_features, 10);
    ck_assert_int_eq(o.optimizer, DP_OPTIMIZER_SGD);
    ck_assert_float_eq(o.lr, 0.05f);
    ck_assert_float_eq(o.weight_decay, 0.0f);
    ck_assert_int_eq(o.batch, 256);
    ck_assert_int_eq(o.accum, 1);
    ck_assert_str_eq(o.allreduce, "auto");
    ck_assert_int_eq(o.threads, 0); /* the cores available to the rank */
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

/* What dp_options_parse prints for args (which ask for --help) into text. */
static void help_of(const char *const *args, char *text, size_t size)
{
    char *path = dp_test_path("help.txt");
    FILE *f = fopen(path, "w+");
    char *argv[8] = {"dp_worker"};
    int argc = 1;
    while (args[argc - 1])
        argv[argc] = (char *)args[argc - 1], argc++;
    dp_options o;
    ck_assert_int_eq(dp_options_parse(&o, argc, argv, 1, f), DP_OPTIONS_EXIT);
    rewind(f);
    size_t length = fread(text, 1, size - 1, f);
    text[length] = '\0';
    fclose(f);
    free(path);
}

/* The line of --help that lists --name (NULL where none does), up to its end. */
static const char *help_line(const char *text, const char *name, char *line, size_t size)
{
    char start[64];
    snprintf(start, sizeof start, "\n  --%s ", name);
    const char *found = strstr(text, start);
    if (!found)
        return NULL;
    snprintf(line, size, "%.*s", (int)strcspn(found + 1, "\n"), found + 1);
    return line;
}

/* --help shows every row under its group's heading, with the default it reads (or its note). */
START_TEST(help_lists_every_option_with_its_default)
{
    static char text[1 << 16];
    const char *args[] = {"--help", NULL};
    help_of(args, text, sizeof text);
    ck_assert_ptr_nonnull(strstr(text, "\nData:\n  --data SPEC"));
    ck_assert_ptr_nonnull(strstr(text, "\nReliability:\n"));
    ck_assert_ptr_nonnull(strstr(text, "Strategies (--strategy NAME[:KEY=VALUE,...]):"));
    for (int i = 0; i < dp_option_row_count; i++) {
        const dp_option_row *r = &dp_option_rows[i];
        char line[2048], expected[256];
        ck_assert_msg(help_line(text, r->name, line, sizeof line), "--help lacks --%s", r->name);
        if (r->kind == DP_OPTION_HELP || r->kind == DP_OPTION_VERSION)
            continue;
        snprintf(expected, sizeof expected, "[default: %s", r->fallback ? r->fallback : r->note ? r->note
                                                            : r->kind == DP_OPTION_STRATEGY && r->size ? "ddp"
                                                            : r->kind == DP_OPTION_STRATEGY_KEY ? "the strategy's :" : "off");
        ck_assert_msg(strstr(line, expected), "--%s's help lacks '%s': %s", r->name, expected, line);
        if (r->depends.option) {
            snprintf(expected, sizeof expected, "%s with --%s %s", r->depends.fallback, r->depends.option, r->depends.values);
            ck_assert_msg(strstr(line, expected), "--%s's help lacks '%s': %s", r->name, expected, line);
        }
    }
}
END_TEST

/* dp_worker predict --help and dp_worker plan --help list their own options and no other. */
START_TEST(subcommands_list_only_their_options)
{
    static char text[1 << 16];
    static const struct {
        const char *name, *usage;
        unsigned mask;
    } programs[] = {{"predict", "Usage: mpirun -np W dp_worker predict INPUTS.npy", DP_PROGRAM_PREDICT},
                    {"plan", "Usage: dp_worker plan", DP_PROGRAM_PLAN}};
    for (size_t p = 0; p < sizeof programs / sizeof *programs; p++) {
        const char *args[] = {programs[p].name, "--help", NULL};
        help_of(args, text, sizeof text);
        ck_assert_msg(strstr(text, programs[p].usage) == text, "%s --help: %.80s", programs[p].name, text);
        for (int i = 0; i < dp_option_row_count; i++) {
            char line[2048];
            int listed = help_line(text, dp_option_rows[i].name, line, sizeof line) != NULL;
            ck_assert_msg(listed == !!(dp_option_rows[i].programs & programs[p].mask), "dp_worker %s --help %s --%s",
                          programs[p].name, listed ? "lists" : "lacks", dp_option_rows[i].name);
        }
    }
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
    const char *schedule[] = {"--lr-schedule", "exponential", NULL};
    expect_error(1, schedule, "--lr-schedule 'exponential': must be one of constant, cosine, linear, step");
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

/* Issue 35's options: each refuses negative, zero, NaN, huge and malformed values and the
 * combinations it has no meaning in, naming itself; good values land in their fields. */
START_TEST(training_controls_refuse_bad_values)
{
    static const struct {
        const char *args[7];
        const char *phrase;
    } refused[] = {
        {{"--warmup-steps", "-5"}, "--warmup-steps '-5': must be an integer >= 1"},
        {{"--warmup-steps", "0"}, "--warmup-steps '0': must be an integer >= 1"},
        {{"--warmup-steps", "nan"}, "--warmup-steps 'nan'"},
        {{"--warmup-steps", "1e30"}, "--warmup-steps '1e30'"},
        {{"--warmup-steps", "99999999999999999999"}, "--warmup-steps '99999999999999999999': too large"},
        {{"--warmup-start-factor", "0.5"}, "--warmup-start-factor applies to --warmup-steps"},
        {{"--warmup-steps", "5", "--warmup-start-factor", "0"}, "--warmup-start-factor '0': must be a number in (0, 1]"},
        {{"--warmup-steps", "5", "--warmup-start-factor", "-0.1"}, "--warmup-start-factor '-0.1'"},
        {{"--warmup-steps", "5", "--warmup-start-factor", "nan"}, "--warmup-start-factor 'nan'"},
        {{"--warmup-steps", "5", "--warmup-start-factor", "1.5"}, "--warmup-start-factor '1.5'"},
        {{"--warmup-steps", "5", "--warmup-start-factor", "1e-50"}, "--warmup-start-factor '1e-50'"},
        {{"--lr-schedule", "step"}, "--lr-schedule 'step': must be step:EVERY,GAMMA"},
        {{"--lr-schedule", "step:0,0.5"}, "--lr-schedule 'step:0,0.5': must be step:EVERY,GAMMA"},
        {{"--lr-schedule", "step:-3,0.5"}, "--lr-schedule 'step:-3,0.5'"},
        {{"--lr-schedule", "step:10,nan"}, "--lr-schedule 'step:10,nan'"},
        {{"--lr-schedule", "step:10,0"}, "--lr-schedule 'step:10,0'"},
        {{"--lr-schedule", "step:10,2"}, "--lr-schedule 'step:10,2'"},
        {{"--lr-schedule", "step:1e99,0.5"}, "--lr-schedule 'step:1e99,0.5'"},
        {{"--lr-schedule", "step:10"}, "--lr-schedule 'step:10'"},
        {{"--lr-schedule", "cosine:5"}, "--lr-schedule 'cosine:5': only step takes arguments"},
        {{"--lr-min", "0.001"}, "--lr-min applies to --lr-schedule cosine or linear, but --lr-schedule is constant"},
        {{"--lr-min", "-1", "--lr-schedule", "cosine"}, "--lr-min '-1'"},
        {{"--lr-min", "nan", "--lr-schedule", "cosine"}, "--lr-min 'nan'"},
        {{"--lr-min", "1e39", "--lr-schedule", "cosine"}, "--lr-min '1e39': too large"},
        {{"--lr-min", "0.5", "--lr-schedule", "linear"}, "--lr-min 0.5 is above --lr 0.05"},
        {{"--clip-grad-norm", "0"}, "--clip-grad-norm '0': must be a finite number > 0"},
        {{"--clip-grad-norm", "-1"}, "--clip-grad-norm '-1'"},
        {{"--clip-grad-norm", "nan"}, "--clip-grad-norm 'nan'"},
        {{"--clip-grad-norm", "inf"}, "--clip-grad-norm 'inf'"},
        {{"--clip-grad-norm", "1e39"}, "--clip-grad-norm '1e39': too large for float32"},
        {{"--eval-every", "0"}, "--eval-every '0': must be an integer >= 1"},
        {{"--eval-every", "-1"}, "--eval-every '-1'"},
        {{"--eval-every", "nan"}, "--eval-every 'nan'"},
        {{"--eval-every", "1e19"}, "--eval-every '1e19'"},
        {{"--keep-best", "2"}, "--keep-best applies to --checkpoint-dir, but --checkpoint-dir is not given"},
        {{"--keep-best", "0", "--checkpoint-dir", "d"}, "--keep-best '0': must be an integer >= 1"},
        {{"--keep-best", "-2", "--checkpoint-dir", "d"}, "--keep-best '-2'"},
        {{"--keep-best", "21", "--checkpoint-dir", "d"}, "--keep-best '21': too large: at most 20"},
        {{"--best-metric", "test_acc"}, "--best-metric applies to --keep-best, or --early-stop"},
        {{"--best-metric", "accuracy", "--early-stop", "3"}, "--best-metric 'accuracy': must be one of test_loss, test_acc"},
        {{"--early-stop", "0"}, "--early-stop '0': must be an integer >= 1"},
        {{"--early-stop", "-4"}, "--early-stop '-4'"},
        {{"--early-stop", "nan"}, "--early-stop 'nan'"},
        {{"--early-stop", "99999999999999999999"}, "--early-stop '99999999999999999999': too large"},
        {{"--tensorboard", ""}, "--tensorboard: empty value"},
        {{"--csv", ""}, "--csv: empty value"},
        {{"--predict", "x.npy", "--tensorboard", "tb"}, "--tensorboard does not apply to --predict"},
        {{"--predict", "x.npy", "--csv", "m.csv"}, "--csv does not apply to --predict"},
        {{"--debug-straggle", "1"}, "--debug-straggle '1': must be RANK:MS"},
        {{"--debug-straggle", "-1:5"}, "--debug-straggle '-1:5'"},
        {{"--debug-straggle", "1:0"}, "--debug-straggle '1:0'"},
        {{"--debug-straggle", "1:99999999"}, "--debug-straggle '1:99999999'"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        int n = 0;
        while (n < 7 && refused[i].args[n])
            n++;
        const char *args[8];
        memcpy(args, refused[i].args, (size_t)n * sizeof *args);
        args[n] = NULL;
        expect_error(1, args, refused[i].phrase);
    }
    dp_options o;
    const char *good[] = {"--lr-schedule", "step:30,0.1", "--warmup-steps", "5", "--warmup-start-factor", "0.25",
                          "--clip-grad-norm", "1.5", "--eval-every", "7", "--checkpoint-dir", "d", "--keep-best", "3",
                          "--best-metric", "test_acc", "--early-stop", "4", "--tensorboard", "tb", "--csv", "m.csv", NULL};
    ck_assert_int_eq(parse(&o, 1, good), DP_OPTIONS_RUN);
    ck_assert_int_eq(o.lr_schedule, DP_LR_STEP);
    ck_assert_int_eq(o.lr_step_every, 30);
    ck_assert_float_eq(o.lr_step_gamma, 0.1f);
    ck_assert_int_eq(o.warmup_steps, 5);
    ck_assert_float_eq(o.warmup_start_factor, 0.25f);
    ck_assert_float_eq(o.clip_grad_norm, 1.5f);
    ck_assert_int_eq(o.eval_every, 7);
    ck_assert_int_eq(o.keep_best, 3);
    ck_assert_int_eq(o.best_metric, DP_BEST_TEST_ACC);
    ck_assert_int_eq(o.early_stop, 4);
    ck_assert_str_eq(o.tensorboard_dir, "tb");
    ck_assert_str_eq(o.csv_path, "m.csv");
    const char *none[] = {NULL};
    ck_assert_int_eq(parse(&o, 1, none), DP_OPTIONS_RUN);
    ck_assert(o.warmup_steps == 0 && o.clip_grad_norm == 0.0f && o.eval_every == 0 && o.keep_best == 0 &&
              o.early_stop == 0 && o.lr_min == 0.0f && o.straggle_rank == -1);
}
END_TEST

/* --cuda-graph: auto by default, off, on; a GPU option, so on with --device cpu is refused. */
START_TEST(cuda_graph_is_applied_and_checked)
{
    dp_options o;
    const char *none[] = {NULL}, *off[] = {"--cuda-graph", "off", NULL}, *on[] = {"--cuda-graph", "on", NULL};
    ck_assert_int_eq(parse(&o, 1, none), DP_OPTIONS_RUN);
    ck_assert_int_eq(o.cuda_graph, DP_GRAPH_AUTO);
    ck_assert_int_eq(parse(&o, 1, off), DP_OPTIONS_RUN);
    ck_assert_int_eq(o.cuda_graph, DP_GRAPH_OFF);
    ck_assert_int_eq(parse(&o, 1, on), DP_OPTIONS_RUN);
    ck_assert_int_eq(o.cuda_graph, DP_GRAPH_ON);
    const char *bad[] = {"--cuda-graph", "sometimes", NULL};
    expect_error(1, bad, "--cuda-graph 'sometimes': must be one of off, on, auto");
    const char *cpu[] = {"--cuda-graph", "on", "--device", "cpu", NULL};
    expect_error(1, cpu, "--cuda-graph on applies to GPUs, but --device is cpu");
}
END_TEST

/* Every name of every option that picks one of a list sets its field to that name's value
 * (the choices are one table in options.c: a row's list or field out of step shows here). */
START_TEST(every_choice_sets_its_field)
{
#define ROW(option, name, member, value) {option, name, offsetof(dp_options, member), value}
    static const struct {
        const char *option, *name;
        size_t field;
        int value;
    } rows[] = {
        ROW("--loss", "auto", loss, DP_LOSS_AUTO), ROW("--loss", "xent", loss, DP_LOSS_CHOICE_XENT),
        ROW("--loss", "mse", loss, DP_LOSS_CHOICE_MSE),
        ROW("--optimizer", "sgd", optimizer, DP_OPTIMIZER_SGD), ROW("--optimizer", "adamw", optimizer, DP_OPTIMIZER_ADAMW),
        ROW("--lr-schedule", "constant", lr_schedule, DP_LR_CONSTANT),
        ROW("--lr-schedule", "cosine", lr_schedule, DP_LR_COSINE),
        ROW("--precision", "fp32", precision, DP_PRECISION_FP32), ROW("--precision", "tf32", precision, DP_PRECISION_TF32),
        ROW("--precision", "bf16", precision, DP_PRECISION_BF16), ROW("--precision", "fp16", precision, DP_PRECISION_FP16),
        ROW("--precision", "mixed", precision, DP_PRECISION_MIXED),
        ROW("--on-nan", "abort", skip_nonfinite, 0), ROW("--on-nan", "skip", skip_nonfinite, 1),
        ROW("--device", "cpu", device, DP_DEVICE_CPU), ROW("--device", "cuda", device, DP_DEVICE_CUDA),
        ROW("--device", "auto", device, DP_DEVICE_AUTO),
        ROW("--cuda-aware", "auto", cuda_aware, DP_CUDA_AWARE_AUTO), ROW("--cuda-aware", "on", cuda_aware, DP_CUDA_AWARE_ON),
        ROW("--cuda-aware", "off", cuda_aware, DP_CUDA_AWARE_OFF),
        ROW("--fuse", "auto", unfused, 0), ROW("--fuse", "off", unfused, 1),
        ROW("--cuda-graph", "off", cuda_graph, DP_GRAPH_OFF), ROW("--cuda-graph", "on", cuda_graph, DP_GRAPH_ON),
        ROW("--cuda-graph", "auto", cuda_graph, DP_GRAPH_AUTO),
        ROW("--data-on-device", "off", data_on_device, DP_DATA_OFF),
        ROW("--data-on-device", "on", data_on_device, DP_DATA_ON),
        ROW("--data-on-device", "auto", data_on_device, DP_DATA_AUTO),
    };
#undef ROW
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        dp_options o;
        /* --memory-plan: fp16 and mixed are its precisions only. */
        int plan = strcmp(rows[i].name, "fp16") == 0 || strcmp(rows[i].name, "mixed") == 0;
        const char *args[] = {rows[i].option, rows[i].name, plan ? "--memory-plan" : NULL, NULL};
        ck_assert_msg(parse(&o, 2, args) == DP_OPTIONS_RUN, "%s %s: %s", rows[i].option, rows[i].name, dp_last_error());
        int value;
        memcpy(&value, (const char *)&o + rows[i].field, sizeof value);
        ck_assert_msg(value == rows[i].value, "%s %s set %d, want %d", rows[i].option, rows[i].name, value,
                      rows[i].value);
    }
}
END_TEST

/* --zero and the memory options; --memory-plan's own options only with it. */
/* --strategy and the options that name one: each --zero stage is its strategy; keys from the
 * text or their options; two names, a key of another strategy, a bad key refused. */
START_TEST(strategy_options_name_one_strategy)
{
    static const char *const stages[] = {"ddp", "zero-1", "zero-2", "zero-3"};
    for (int stage = 0; stage < 4; stage++) {
        dp_options o;
        char text[2] = {(char)('0' + stage), 0};
        const char *args[] = {"--zero", text, NULL};
        ck_assert_int_eq(parse(&o, 2, args), DP_OPTIONS_RUN);
        ck_assert_str_eq(o.strategy.name, stages[stage]);
    }
    dp_options o;
    const char *keyed[] = {"--strategy", "zero-3:live-mb=64", NULL};
    ck_assert_int_eq(parse(&o, 2, keyed), DP_OPTIONS_RUN);
    ck_assert(dp_strategy_key_value(&o.strategy, "live-mb") == 64.0);
    const char *alias[] = {"--zero-live-mb", "unlimited", "--zero", "2", NULL}; /* in any order */
    ck_assert_int_eq(parse(&o, 2, alias), DP_OPTIONS_RUN);
    ck_assert(dp_strategy_key_value(&o.strategy, "live-mb") == 0.0);
    const char *exact[] = {"--exact", "--exact-shard", "8", NULL};
    ck_assert_int_eq(parse(&o, 2, exact), DP_OPTIONS_RUN);
    char text[64];
    dp_strategy_choice_text(&o.strategy, 0, text, sizeof text);
    ck_assert_str_eq(text, "exact:rows=8");
    const char *both[] = {"--strategy", "zero-1", "--exact", NULL};
    expect_error(2, both, "--strategy zero-1 and --exact both choose how the ranks' work is combined");
    const char *foreign[] = {"--zero", "1", "--zero-live-mb", "4", NULL};
    expect_error(2, foreign, "--zero-live-mb applies to the strategies zero-2, zero-3, but the run's is zero-1");
    const char *unknown[] = {"--strategy", "zero-4", NULL};
    expect_error(2, unknown, "--strategy 'zero-4': no strategy 'zero-4' (known: ddp, zero-1, zero-2, zero-3");
    const char *bad_key[] = {"--strategy", "exact:row=8", NULL};
    expect_error(2, bad_key, "the strategy exact takes no key 'row'");
    const char *bad_value[] = {"--strategy", "local-sgd:every=0", NULL};
    expect_error(2, bad_value, "--strategy local-sgd:every '0': must be a whole number from 1");
    const char *no_pair[] = {"--strategy", "exact:32", NULL};
    expect_error(2, no_pair, "'32' is not KEY=VALUE");
}
END_TEST

START_TEST(zero_and_memory_options_are_applied_and_checked)
{
    dp_options o;
    const char *args[] = {"--zero", "3", "--max-memory-mb", "512.5", "--checkpoint-dir", "ck", "--checkpoint-shards", NULL};
    ck_assert_int_eq(parse(&o, 2, args), DP_OPTIONS_RUN);
    ck_assert_str_eq(o.strategy.name, "zero-3");
    ck_assert(o.max_memory_mb == 512.5);
    ck_assert_int_eq(o.checkpoint_shards, 1);
    const char *plan[] = {"--memory-plan", "--params", "70e9", "--world", "8", "--precision", "mixed", NULL};
    ck_assert_int_eq(parse(&o, 1, plan), DP_OPTIONS_RUN);
    ck_assert(o.plan_params == 70e9);
    ck_assert_int_eq(o.plan_world, 8);
    ck_assert_int_eq(o.precision, DP_PRECISION_MIXED);
    const char *stage[] = {"--zero", "4", NULL};
    expect_error(1, stage, "--zero '4': must be one of 0, 1, 2, 3");
    const char *fraction[] = {"--memory-plan", "--params", "1.5", NULL};
    expect_error(1, fraction, "--params '1.5': must be a whole number");
    const char *world[] = {"--world", "8", NULL};
    expect_error(1, world, "--world applies to --memory-plan");
    const char *shards[] = {"--checkpoint-shards", NULL};
    expect_error(1, shards, "--checkpoint-shards applies to --checkpoint-dir, but --checkpoint-dir is not given");
}
END_TEST

/* --preempt-signal's names (SIG prefix and case optional), its default, none, and --resume auto. */
START_TEST(preemption_options_are_applied_and_checked)
{
    dp_options o;
    char names[128];
    const char *defaults[] = {"--checkpoint-dir", "ck", NULL};
    ck_assert_int_eq(parse(&o, 2, defaults), DP_OPTIONS_RUN);
    dp_preempt_signal_names(o.preempt_signals, names, sizeof names);
    ck_assert_str_eq(names, "SIGUSR1,SIGTERM");
    const char *given[] = {"--checkpoint-dir", "ck", "--preempt-signal", "sigterm,HUP,usr2", "--resume", "auto", NULL};
    ck_assert_int_eq(parse(&o, 2, given), DP_OPTIONS_RUN);
    dp_preempt_signal_names(o.preempt_signals, names, sizeof names);
    ck_assert_str_eq(names, "SIGUSR2,SIGTERM,SIGHUP");
    ck_assert(dp_options_resume_auto(&o));
    const char *none[] = {"--preempt-signal", "none", NULL}; /* turning it off needs no directory */
    ck_assert_int_eq(parse(&o, 2, none), DP_OPTIONS_RUN);
    ck_assert_uint_eq(o.preempt_signals, 0);
    const char *with_init[] = {"--checkpoint-dir", "ck", "--resume", "auto", "--init", "m.safetensors", NULL};
    ck_assert_int_eq(parse(&o, 2, with_init), DP_OPTIONS_RUN);
    static const struct {
        const char *args[7];
        const char *phrase;
    } refused[] = {
        {{"--checkpoint-dir", "ck", "--preempt-signal", "USR1,KILL"}, "--preempt-signal 'USR1,KILL': 'KILL' is not a signal it handles"},
        {{"--checkpoint-dir", "ck", "--preempt-signal", "USR1,"}, "'' is not a signal it handles"},
        {{"--preempt-signal", "USR1"}, "--preempt-signal USR1 applies to --checkpoint-dir, but --checkpoint-dir is not given"},
        {{"--resume", "auto"}, "--resume auto applies to --checkpoint-dir, but --checkpoint-dir is not given"},
        {{"--resume", "ck", "--init", "m.safetensors"}, "--init and --resume both give the starting point"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        expect_error(1, refused[i].args, refused[i].phrase);
}
END_TEST

/* --average-every: refused with ZeRO and SyncBatchNorm, and with checkpoints or replica checks
 * between averagings. */
START_TEST(average_every_is_applied_and_checked)
{
    dp_options o;
    const char *args[] = {"--average-every", "4", "--checkpoint-dir", "ck", "--checkpoint-every", "8",
                          "--check-replicas", "12", NULL};
    ck_assert_int_eq(parse(&o, 2, args), DP_OPTIONS_RUN);
    ck_assert_str_eq(o.strategy.name, "local-sgd");
    ck_assert(dp_strategy_key_value(&o.strategy, "every") == 4.0);
    const char *none[] = {"--average-every", "0", NULL};
    expect_error(1, none, "--average-every '0'");
    const char *zero[] = {"--average-every", "4", "--zero", "1", NULL};
    expect_error(2, zero, "--average-every 4 and --zero 1 both choose how the ranks' work is combined");
    const char *sync[] = {"--average-every", "4", "--model", "linear(8),batchnorm(sync=1),relu,linear(10)", NULL};
    expect_error(2, sync, "--average-every 4 and SyncBatchNorm");
    const char *sync_all[] = {"--average-every", "4", "--sync-bn", "--model", "linear(8),batchnorm,linear(10)", NULL};
    expect_error(2, sync_all, "--average-every 4 and SyncBatchNorm");
    const char *checkpoints[] = {"--average-every", "4", "--checkpoint-dir", "ck", "--checkpoint-every", "6", NULL};
    expect_error(2, checkpoints, "--checkpoint-every 6 and --average-every 4: the ranks hold one model only right after");
    const char *checks[] = {"--average-every", "4", "--check-replicas", "2", NULL};
    expect_error(2, checks, "--check-replicas 2 and --average-every 4");
    const char *predict[] = {"--predict", "x.npy", "--init", "m.safetensors", "--output", "o.npy", "--average-every", "2", NULL};
    expect_error(2, predict, "--average-every does not apply to --predict");
}
END_TEST

/* --grad-dtype: fp32 by default, bf16 taken; refused by name where nothing reduces gradients
 * in it (--exact's exact digits, local SGD's float32 averages). */
START_TEST(grad_dtype_is_applied_and_checked)
{
    dp_options o;
    const char *none[] = {NULL};
    ck_assert_int_eq(parse(&o, 2, none), DP_OPTIONS_RUN);
    ck_assert_int_eq(o.grad_dtype, DP_DTYPE_F32);
    const char *bf16[] = {"--grad-dtype", "bf16", "--zero", "2", NULL};
    ck_assert_int_eq(parse(&o, 2, bf16), DP_OPTIONS_RUN);
    ck_assert_int_eq(o.grad_dtype, DP_DTYPE_BF16);
    const char *fp16[] = {"--grad-dtype", "fp16", NULL};
    expect_error(1, fp16, "--grad-dtype 'fp16': unknown (valid: fp32 bf16)");
    const char *exact[] = {"--grad-dtype", "bf16", "--exact", NULL};
    expect_error(2, exact, "--exact and --grad-dtype bf16: --exact all-reduces its sums as integer digits");
    const char *local[] = {"--grad-dtype", "bf16", "--average-every", "4", NULL};
    expect_error(2, local, "--average-every 4 and --grad-dtype bf16: local SGD reduces no gradients");
}
END_TEST

/* --model, --sync-bn, and AdamW with PyTorch's constructor defaults unless given. */
START_TEST(model_and_adamw_options_are_applied)
{
    dp_options o;
    const char *args[] = {"--model", "linear(64),batchnorm,relu,dropout(0.1),linear(10)", "--sync-bn",
                          "--optimizer", "adamw", "--betas", "0.8,0.99", "--eps", "1e-6", "--decay-all", NULL};
    ck_assert_int_eq(parse(&o, 2, args), DP_OPTIONS_RUN);
    ck_assert_int_eq(o.model.from_layers, 0);
    ck_assert_int_eq(o.model.count, 5);
    ck_assert_int_eq(o.model.modules[1].options.sync, 1);
    ck_assert_int_eq(o.optimizer, DP_OPTIMIZER_ADAMW);
    ck_assert_float_eq(o.lr, 1e-3f);
    ck_assert_float_eq(o.weight_decay, 1e-2f);
    ck_assert_float_eq(o.beta1, 0.8f);
    ck_assert_float_eq(o.beta2, 0.99f);
    ck_assert_float_eq(o.eps, 1e-6f);
    ck_assert_int_eq(o.decay_all, 1);
    const char *given[] = {"--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0", NULL};
    ck_assert_int_eq(parse(&o, 2, given), DP_OPTIONS_RUN);
    ck_assert_float_eq(o.lr, 0.01f);
    ck_assert_float_eq(o.weight_decay, 0.0f);
    const char *predict[] = {"--predict", "x.npy", "--init", "m.safetensors", "--output", "y.npy",
                             "--predict-classes", NULL};
    ck_assert_int_eq(parse(&o, 2, predict), DP_OPTIONS_RUN);
    ck_assert_str_eq(o.predict_path, "x.npy");
    ck_assert_int_eq(o.predict_classes, 1);
}
END_TEST

START_TEST(model_optimizer_and_predict_mistakes_are_named)
{
    const char *both[] = {"--model", "linear(10)", "--layers", "784,10", NULL};
    expect_error(1, both, "--model and --layers both describe the model");
    const char *bad_model[] = {"--model", "linear(10),tanh", NULL};
    expect_error(1, bad_model, "--model 'linear(10),tanh': module 1 'tanh': unknown module");
    const char *dropout[] = {"--model", "linear(10),dropout(1.5)", NULL};
    expect_error(1, dropout, "p='1.5' must be a number in [0, 1)");
    const char *momentum[] = {"--optimizer", "adamw", "--momentum", "0.9", NULL};
    expect_error(1, momentum, "--momentum applies to --optimizer sgd, but --optimizer is adamw");
    const char *betas[] = {"--betas", "0.9,0.99", NULL};
    expect_error(1, betas, "--betas applies to --optimizer adamw, but --optimizer is sgd");
    const char *bad_betas[] = {"--optimizer", "adamw", "--betas", "0.9", NULL};
    expect_error(1, bad_betas, "--betas '0.9': must be two numbers in [0, 1)");
    const char *optimizer[] = {"--optimizer", "adam", NULL};
    expect_error(1, optimizer, "--optimizer 'adam': must be one of sgd, adamw");
    const char *no_init[] = {"--predict", "x.npy", "--output", "y.npy", NULL};
    expect_error(1, no_init, "--predict x.npy needs --init");
    const char *no_output[] = {"--predict", "x.npy", "--init", "m.safetensors", NULL};
    expect_error(1, no_output, "--predict x.npy needs --output");
    const char *stray_output[] = {"--output", "y.npy", NULL};
    expect_error(1, stray_output, "--output applies to --predict");
}
END_TEST

START_TEST(segment_bytes_takes_any_size_from_one_float)
{
    dp_options o;
    const char *none[] = {NULL}, *odd[] = {"--segment-bytes", "4102", "--allreduce", "ring-pipelined", NULL};
    ck_assert_int_eq(parse(&o, 2, none), DP_OPTIONS_RUN);
    ck_assert_int_eq(o.segment_bytes, (long)DP_SEGMENT_BYTES_DEFAULT);
    ck_assert_int_eq(parse(&o, 2, odd), DP_OPTIONS_RUN);
    ck_assert_int_eq(o.segment_bytes, 4102);
    const char *too_small[] = {"--segment-bytes", "3", NULL};
    expect_error(1, too_small, "--segment-bytes '3': must be an integer >= 4");
    /* Larger than the ring's largest message: refused, not silently cut down. */
    const char *too_large[] = {"--segment-bytes", "4294967300", NULL};
    expect_error(1, too_large, "--segment-bytes '4294967300': too large: at most 4294967296");
}
END_TEST

/* Options that size buffers and loops, and their products: refused with the options named,
 * never wrapped around (the crashes of issue 11: a per-rank slice cast to int, a step batch
 * of batch x accum wrapped to 0, epochs x steps gone negative) or clamped. */
START_TEST(sizes_from_options_are_range_checked_not_wrapped)
{
    const char *slice[] = {"--batch", "8589934592", NULL};
    expect_error(2, slice, "--batch 8589934592 over 2 ranks puts 4294967296 samples on a rank");
    const char *step[] = {"--batch", "4", "--accum", "4611686018427387904", NULL};
    expect_error(2, step, "--batch 4 x --accum 4611686018427387904: more than");
    const char *epochs[] = {"--epochs", "9223372036854775807", NULL};
    expect_error(1, epochs, "--epochs '9223372036854775807': too large: at most 999999999999999999");
    const char *beyond_long[] = {"--steps", "99999999999999999999", NULL};
    expect_error(1, beyond_long, "--steps '99999999999999999999': too large");
    const char *threads[] = {"--threads", "2000", NULL};
    expect_error(1, threads, "--threads '2000': too large: at most 1024");
    const char *params[] = {"--layers", "2147483647,2147483647,2147483647", NULL};
    expect_error(1, params, "--layers 2147483647,2147483647,2147483647: the parameters' size overflows");
    dp_options o;
    const char *ok[] = {"--threads", "1024", "--batch", "4294967294", NULL};
    ck_assert_int_eq(parse(&o, 2, ok), DP_OPTIONS_RUN);
    ck_assert_int_eq(o.threads, 1024);
    /* epochs x steps per epoch, known once the data is: checked before multiplying. */
    long total = 0;
    o.steps = 0;
    o.epochs = 999999999999999999L;
    ck_assert_int_eq(dp_plan_total_steps(&o, 2, &total), DP_EINVAL);
    ck_assert_msg(strstr(dp_last_error(), "--epochs 999999999999999999 x 2 steps per epoch"), "%s",
                  dp_last_error());
    o.epochs = 3;
    ck_assert_int_eq(dp_plan_total_steps(&o, 235, &total), 0);
    ck_assert_int_eq(total, 705);
    /* An allocation that fails says which options sized it, with sizes that did not wrap. */
    dp_fail(DP_ENOMEM, "out of memory allocating 20000000000000 bytes for activations");
    ck_assert_int_eq(dp_explain_memory_failure(DP_ENOMEM, &o, 2, 50000000, 79500010, &(dp_dims){.ndim = 1, .dim = {784}}), DP_ENOMEM);
    ck_assert_msg(strstr(dp_last_error(), "20000000000000 bytes for activations") &&
                  strstr(dp_last_error(), "--batch 4294967294 over 2 ranks = 50000000 rows per rank"),
                  "%s", dp_last_error());
}
END_TEST

/* Floats are parsed in double and must keep their meaning in float32; --timeout takes
 * fractions; a seed is any 64-bit unsigned integer. */
START_TEST(numbers_keep_the_meaning_they_were_given)
{
    const char *momentum[] = {"--momentum", "0.99999999", NULL};
    expect_error(1, momentum, "--momentum '0.99999999': must be below 1, but it rounds to 1 in float32");
    const char *huge_lr[] = {"--lr", "1e39", NULL};
    expect_error(1, huge_lr, "--lr '1e39': too large for float32");
    const char *tiny_lr[] = {"--lr", "1e-50", NULL};
    expect_error(1, tiny_lr, "--lr '1e-50': too small for float32");
    const char *negative_seed[] = {"--seed", "-1", NULL};
    expect_error(1, negative_seed, "--seed '-1': must be an integer from 0 to 18446744073709551615");
    const char *big_seed[] = {"--seed", "18446744073709551616", NULL};
    expect_error(1, big_seed, "--seed '18446744073709551616'");
    dp_options o;
    const char *ok[] = {"--momentum", "0.9999999", "--timeout", "0.4", "--seed",
                        "18446744073709551615", NULL};
    ck_assert_int_eq(parse(&o, 1, ok), DP_OPTIONS_RUN);
    ck_assert(o.momentum < 1.0f);
    ck_assert(o.timeout > 0.39 && o.timeout < 0.41);
    ck_assert(o.seed == UINT64_MAX);
}
END_TEST

/* The bytes a row's kind stores in its field (0: the kind has no field of a fixed type). */
static size_t field_size(dp_option_kind kind)
{
    switch (kind) {
    case DP_OPTION_FLAG: case DP_OPTION_INT: case DP_OPTION_CHOICE: return sizeof(int);
    case DP_OPTION_LONG: return sizeof(long);
    case DP_OPTION_FLOAT: return sizeof(float);
    case DP_OPTION_DOUBLE: case DP_OPTION_MIB: case DP_OPTION_COUNT: return sizeof(double);
    case DP_OPTION_SEED: return sizeof(uint64_t);
    default: return 0;
    }
}

/* Whether a rule's or a default's test can read the named option's value. */
static int has_value_text(const char *name)
{
    const dp_option_row *r = dp_option_find(name);
    return r && (r->kind == DP_OPTION_TEXT || r->kind == DP_OPTION_CHOICE || (r->kind == DP_OPTION_STRATEGY && r->size));
}

/* Every row is whole: a unique name, help, a group, training among its programs (the old flags
 * included), a field of its kind's type, and rules, aliases and dependent defaults that name
 * options whose values they can read. Each default reads as the same option given would. */
START_TEST(rows_are_whole_and_their_defaults_read)
{
    for (int i = 0; i < dp_option_row_count; i++) {
        const dp_option_row *r = &dp_option_rows[i];
        ck_assert_msg(dp_option_find(r->name) == r, "--%s is declared twice", r->name);
        ck_assert_msg(r->help && r->group < DP_GROUPS && (r->programs & DP_PROGRAM_TRAIN), "--%s", r->name);
        ck_assert_msg(!field_size(r->kind) || r->size == field_size(r->kind), "--%s: field of %zu bytes", r->name, r->size);
        ck_assert_msg(r->kind != DP_OPTION_TEXT || r->size > 1, "--%s", r->name);
        ck_assert_msg(r->file == DP_FILE_NONE || r->kind == DP_OPTION_TEXT, "--%s names a file in a text", r->name);
        ck_assert_msg(r->kind != DP_OPTION_CHOICE || (r->choices && r->choice_count > 0), "--%s", r->name);
        ck_assert_msg(r->kind != DP_OPTION_CUSTOM || r->parse, "--%s", r->name);
        ck_assert_msg(!r->word || r->kind == DP_OPTION_LONG || r->kind == DP_OPTION_MIB, "--%s", r->name);
        ck_assert_msg(r->kind != DP_OPTION_ALIAS || dp_option_find(r->alias.option), "--%s", r->name);
        ck_assert_msg(!r->depends.option || has_value_text(r->depends.option), "--%s", r->name);
        for (size_t k = 0; k < sizeof r->applies / sizeof *r->applies; k++)
            for (size_t t = 0; t < sizeof r->applies[k].to / sizeof *r->applies[k].to && r->applies[k].to[t].option; t++) {
                const dp_option_test *test = &r->applies[k].to[t];
                ck_assert_msg(test->values ? has_value_text(test->option) : dp_option_find(test->option) != NULL,
                              "--%s's rule tests --%s", r->name, test->option);
            }
        const char *defaults[] = {r->fallback, r->depends.fallback};
        for (size_t d = 0; d < 2; d++) {
            dp_options o;
            dp_options_defaults(&o);
            ck_assert_msg(!defaults[d] || dp_option_apply(r, defaults[d], &o) == 0, "--%s's default '%s': %s", r->name,
                          defaults[d], dp_last_error());
        }
    }
}
END_TEST

/* A value row r takes (NULL: it takes none). */
static const char *sample_value(const dp_option_row *r)
{
    if (!r->metavar)
        return NULL;
    if (r->fallback)
        return r->fallback;
    if (r->kind == DP_OPTION_CHOICE || (r->kind == DP_OPTION_STRATEGY && r->choices))
        return r->choices[r->choice_count - 1]; /* any of its names */
    if (r->kind == DP_OPTION_STRATEGY)
        return r->strategy.key ? "4" : "zero-1";
    return r->kind == DP_OPTION_TEXT ? "x.npy" : "8";
}

/* The first name of a '|' list ("fp16|mixed": fp16), into text. */
static const char *first_of(const char *list, char *text, size_t size)
{
    snprintf(text, size, "%.*s", (int)strcspn(list, "|"), list);
    return text;
}

/* Whether rule is for the value own (its `when`). */
static int rule_is_for(const dp_option_rule *rule, const char *own)
{
    if (!rule->when)
        return 1;
    int but = rule->when[0] == '!';
    return dp_option_in_list(own, rule->when + but) != but;
}

/* A value of row r that rule k is for and its other rules are not. */
static const char *value_for_rule(const dp_option_row *r, size_t k, char *text, size_t size)
{
    const dp_option_rule *rule = &r->applies[k];
    if (rule->when && rule->when[0] != '!')
        return first_of(rule->when, text, size);
    for (size_t other = 0; other < sizeof r->applies / sizeof *r->applies; other++) {
        const dp_option_rule *o = &r->applies[other];
        if (other != k && o->to[0].option && rule_is_for(o, sample_value(r)) && o->when && o->when[0] == '!')
            return first_of(o->when + 1, text, size);
    }
    return sample_value(r);
}

/* The command line that breaks rule k of row r, into args: the option with a value the rule is
 * for, and each of the rule's tests made to fail (the options it must lack given, the values
 * it asks for changed where the default has one of them). */
static void breaking_rule(const dp_option_row *r, size_t k, const char **args, char (*texts)[64])
{
    const dp_option_rule *rule = &r->applies[k];
    int n = 0, t_text = 0;
    snprintf(texts[t_text], 64, "--%s", r->name);
    args[n++] = texts[t_text++];
    if (r->metavar)
        args[n++] = value_for_rule(r, k, texts[t_text++], 64);
    dp_options defaults;
    dp_options_defaults(&defaults);
    for (size_t t = 0; t < sizeof rule->to / sizeof *rule->to && rule->to[t].option; t++) {
        const dp_option_test *test = &rule->to[t];
        const dp_option_row *target = dp_option_find(test->option);
        const char *value = test->unless && test->values ? first_of(test->values, texts[t_text++], 64)
                          : test->unless ? sample_value(target) : NULL;
        int passes = test->values && dp_option_in_list(dp_option_value_text(target, &defaults), test->values);
        for (int c = 0; !test->unless && passes && !value && c < target->choice_count; c++)
            if (!dp_option_in_list(target->choices[c], test->values))
                value = target->choices[c];
        /* A text the default passes (--allreduce auto): any other word breaks it (the names
         * are checked when the run starts, not here). */
        if (!test->unless && passes && !value && target->kind == DP_OPTION_TEXT)
            value = "another";
        if (!test->unless && !value)
            continue;
        snprintf(texts[t_text], 64, "--%s", test->option);
        args[n++] = texts[t_text++];
        if (target->metavar)
            args[n++] = value;
    }
    args[n] = NULL;
}

/* Every "applies to" rule of every row: the option given where none of the rule's tests holds is
 * refused, the message naming it and what it applies to. */
START_TEST(every_applies_to_rule_is_refused_naming_both_options)
{
    int rules = 0;
    for (int i = 0; i < dp_option_row_count; i++) {
        const dp_option_row *r = &dp_option_rows[i];
        for (size_t k = 0; k < sizeof r->applies / sizeof *r->applies && r->applies[k].to[0].option; k++, rules++) {
            const char *args[16];
            char texts[8][64], flag[64], target[96];
            breaking_rule(r, k, args, texts);
            snprintf(flag, sizeof flag, "--%s", r->name);
            if (r->applies[k].what)
                snprintf(target, sizeof target, "%s", r->applies[k].what);
            else
                snprintf(target, sizeof target, "--%s", r->applies[k].to[0].option);
            dp_options o;
            ck_assert_msg(parse(&o, 1, args) == DP_EINVAL, "--%s's rule %zu was not refused", r->name, k);
            ck_assert_msg(strncmp(dp_last_error(), flag, strlen(flag)) == 0 && strstr(dp_last_error(), target),
                          "--%s's rule %zu: '%s' does not name %s and %s", r->name, k, dp_last_error(), flag, target);
        }
    }
    ck_assert_int_ge(rules, 30);
}
END_TEST

/* The rules of issue 37 one by one, as a user meets them. */
START_TEST(options_of_another_mode_are_refused)
{
    static const struct {
        const char *args[6];
        const char *phrase;
    } refused[] = {
        {{"--hier-inner", "rhd"}, "--hier-inner applies to --allreduce hier, but --allreduce is auto"},
        {{"--segment-bytes", "4096", "--allreduce", "ring"},
         "--segment-bytes applies to --allreduce ring-pipelined or auto, or --hier-inner ring-pipelined, but --allreduce is ring"},
        {{"--segment-bytes", "4096", "--allreduce", "hier"}, "--segment-bytes applies to --allreduce ring-pipelined"},
        {{"--keep", "2"}, "--keep applies to --checkpoint-dir, but --checkpoint-dir is not given"},
        {{"--checkpoint-every", "0"}, "--checkpoint-every applies to --checkpoint-dir"},
        {{"--sync-bn"}, "--sync-bn applies to a model with batchnorm, but --layers '784,256,256,10' has none"},
        {{"--sync-bn", "--model", "linear(8),relu,linear(10)"}, "--sync-bn applies to a model with batchnorm, but --model"},
        {{"--bucket-mb", "4", "--no-overlap"}, "--bucket-mb applies to buckets reduced during backward, but --no-overlap is given"},
        {{"--bucket-mb", "4", "--no-overlap", "--zero", "1"}, "--bucket-mb applies to buckets reduced during backward"},
        {{"--auto-table", "t.table", "--allreduce", "mpi"}, "--auto-table applies to --allreduce auto, but --allreduce is mpi"},
        {{"--tf32", "--precision", "fp32"}, "--tf32 is --precision tf32: it contradicts --precision fp32"},
        {{"--precision", "fp32", "--tf32"}, "--tf32 is --precision tf32: it contradicts --precision fp32"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        expect_error(2, refused[i].args, refused[i].phrase);
    static const struct {
        const char *args[8];
    } taken[] = {
        {{"--hier-inner", "rhd", "--allreduce", "hier"}},
        {{"--segment-bytes", "4096", "--allreduce", "auto"}},
        {{"--segment-bytes", "4096", "--allreduce", "hier", "--hier-inner", "ring-pipelined"}},
        {{"--keep", "2", "--checkpoint-dir", "ck"}},
        {{"--bucket-mb", "4", "--no-overlap", "--zero", "2"}},
        {{"--bucket-mb", "4", "--no-overlap", "--strategy", "zero-3:live-mb=8"}},
        {{"--bucket-mb", "4", "--no-overlap", "--memory-plan"}},
        {{"--auto-table", "t.table", "--allreduce", "auto"}},
        {{"--sync-bn", "--model", "linear(8),batchnorm,relu,linear(10)"}},
    };
    for (size_t i = 0; i < sizeof taken / sizeof *taken; i++) {
        dp_options o;
        ck_assert_msg(parse(&o, 2, taken[i].args) == DP_OPTIONS_RUN, "%s: %s", taken[i].args[0], dp_last_error());
    }
}
END_TEST

/* dp_worker predict INPUTS and dp_worker plan set what --predict INPUTS and --memory-plan set,
 * and refuse every option of another program, naming it. */
START_TEST(subcommands_run_what_the_old_flags_ran)
{
    static const struct {
        const char *subcommand[8], *flag[8];
    } same[] = {
        {{"predict", "in.npy", "--init", "m.safetensors", "--output", "out.npy", "--predict-classes"},
         {"--predict", "in.npy", "--init", "m.safetensors", "--output", "out.npy", "--predict-classes"}},
        {{"plan", "--params", "70e9", "--world", "8", "--precision", "mixed"},
         {"--memory-plan", "--params", "70e9", "--world", "8", "--precision", "mixed"}},
        {{"plan", "--zero-live-mb", "2", "--layers", "8,16,4"}, {"--memory-plan", "--zero-live-mb", "2", "--layers", "8,16,4"}},
    };
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        static dp_options a, b;
        ck_assert_msg(parse(&a, 2, same[i].subcommand) == DP_OPTIONS_RUN, "%s: %s", same[i].subcommand[0], dp_last_error());
        ck_assert_int_eq(parse(&b, 2, same[i].flag), DP_OPTIONS_RUN);
        ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "%s differs from %s", same[i].subcommand[0], same[i].flag[0]);
    }
    for (int i = 0; i < dp_option_row_count; i++) {
        const dp_option_row *r = &dp_option_rows[i];
        static const char *const programs[] = {"predict", "plan"};
        static const unsigned masks[] = {DP_PROGRAM_PREDICT, DP_PROGRAM_PLAN};
        for (size_t p = 0; p < 2; p++) {
            if (r->programs & masks[p])
                continue;
            char flag[64], phrase[160];
            snprintf(flag, sizeof flag, "--%s", r->name);
            snprintf(phrase, sizeof phrase, "--%s does not apply to dp_worker %s", r->name, programs[p]);
            const char *args[] = {programs[p], "in.npy", flag, sample_value(r), NULL};
            if (masks[p] == DP_PROGRAM_PLAN) /* plan takes no operand */
                args[1] = flag, args[2] = sample_value(r), args[3] = NULL;
            expect_error(1, args, phrase);
        }
    }
}
END_TEST

/* Hostile use of what the rows added: subcommands without their operand, with two, empty,
 * with numbers out of range; words that are not the option's; debug-corrupt off. */
START_TEST(subcommand_and_row_mistakes_are_named)
{
    static const struct {
        const char *args[12];
        const char *phrase;
    } refused[] = {
        {{"predict"}, "dp_worker predict needs INPUTS.npy"},
        {{"predict", "--init", "m.safetensors"}, "dp_worker predict needs INPUTS.npy"},
        {{"predict", "a.npy", "b.npy"}, "'b.npy': unexpected argument (options start with --; see dp_worker predict --help)"},
        {{"--init", "m.safetensors", "predict", "a.npy"}, "'predict': unexpected argument (options start with --; see dp_worker --help)"},
        {{"predict", ""}, "--predict: empty value"},
        {{"predict", "a.npy", "--predict", "b.npy"}, "--predict does not apply to dp_worker predict"},
        {{"predict", "a.npy", "--init", "m", "--output", "o.npy", "--precision", "fp16"}, "--precision fp16 applies to --memory-plan"},
        {{"predict", "a.npy", "--init", "m", "--output", "o.npy", "--device", "cpu", "--tf32"}, "--tf32 applies to GPUs, but --device is cpu"},
        {{"predict", "a.npy", "--output", "o.npy"}, "--predict a.npy needs --init"},
        {{"predict", "a.npy", "--threads", "0"}, "--threads '0': must be an integer >= 1"},
        {{"predict", "a.npy", "--bogus"}, "--bogus: unknown option or missing value (see dp_worker predict --help)"},
        {{"plan", "x"}, "'x': unexpected argument (options start with --; see dp_worker plan --help)"},
        {{"plan", "--memory-plan"}, "--memory-plan does not apply to dp_worker plan"},
        {{"plan", "--world", "0"}, "--world '0': must be an integer >= 1"},
        {{"plan", "--world", "-3"}, "--world '-3'"},
        {{"plan", "--params", "nan"}, "--params 'nan': must be a whole number"},
        {{"plan", "--params", "1e16"}, "--params '1e16'"},
        {{"plan", "--bucket-mb", "AUTO"}, "--bucket-mb 'AUTO'"},
        {{"plan", "--zero-live-mb", "-1"}, "--zero-live-mb '-1'"},
        {{"plan", "--batch", "99999999999999999999"}, "--batch '99999999999999999999': too large"},
        {{"plan", "--save", "m.safetensors"}, "--save does not apply to dp_worker plan"},
        {{"--progress-thread", "-1"}, "--progress-thread '-1': must be an integer >= 0"},
        {{"--timeout", "nan"}, "--timeout 'nan': must be a finite number >= 0"},
        {{"--timeout", "-1"}, "--timeout '-1'"},
        {{"--timeout", "1e400"}, "--timeout '1e400'"},
        {{"--debug-corrupt", "-1:2"}, "--debug-corrupt '-1:2': must be RANK:STEP"},
        {{"--data", ""}, "--data: empty value"},
        {{"--strategy", ""}, "--strategy '': no strategy ''"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        expect_error(1, refused[i].args, refused[i].phrase);
    dp_options o;
    const char *off[] = {"--debug-corrupt", "off", NULL};
    ck_assert_int_eq(parse(&o, 1, off), DP_OPTIONS_RUN);
    ck_assert_int_eq(o.corrupt_rank, -1);
    const char *none[] = {NULL};
    ck_assert_int_eq(parse(&o, 1, none), DP_OPTIONS_RUN);
    ck_assert_int_eq(o.corrupt_rank, -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("options");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, defaults_train_the_demo_model);
    tcase_add_test(tc, segment_bytes_takes_any_size_from_one_float);
    tcase_add_test(tc, values_are_applied);
    tcase_add_test(tc, model_and_adamw_options_are_applied);
    tcase_add_test(tc, strategy_options_name_one_strategy);
    tcase_add_test(tc, zero_and_memory_options_are_applied_and_checked);
    tcase_add_test(tc, cuda_graph_is_applied_and_checked);
    tcase_add_test(tc, every_choice_sets_its_field);
    tcase_add_test(tc, average_every_is_applied_and_checked);
    tcase_add_test(tc, grad_dtype_is_applied_and_checked);
    tcase_add_test(tc, model_optimizer_and_predict_mistakes_are_named);
    tcase_add_test(tc, help_and_version_ask_to_exit);
    tcase_add_test(tc, help_lists_every_option_with_its_default);
    tcase_add_test(tc, subcommands_list_only_their_options);
    tcase_add_test(tc, rows_are_whole_and_their_defaults_read);
    tcase_add_test(tc, every_applies_to_rule_is_refused_naming_both_options);
    tcase_add_test(tc, options_of_another_mode_are_refused);
    tcase_add_test(tc, subcommands_run_what_the_old_flags_ran);
    tcase_add_test(tc, subcommand_and_row_mistakes_are_named);
    tcase_add_test(tc, bad_values_are_rejected_naming_the_option);
    tcase_add_test(tc, training_controls_refuse_bad_values);
    tcase_add_test(tc, sizes_from_options_are_range_checked_not_wrapped);
    tcase_add_test(tc, numbers_keep_the_meaning_they_were_given);
    tcase_add_test(tc, preemption_options_are_applied_and_checked);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
