/* The combinations of values a run cannot honour, refused naming them, once every option is
 * parsed and the rows' "applies to" rules hold (option_rules.c): --model with --layers, --sync-bn
 * without a BatchNorm, --tf32 against --precision, --predict without its files, what the
 * strategy refuses of the run, a batch smaller than the world, two starting points; and the
 * strategy composed from the options that name it. */
#include "src/train/option_checks.h"

#include "dp/comm.h"
#include "dp/error.h"
#include "src/train/limits.h"
#include "src/train/option_values.h"

#include <stdio.h>
#include <string.h>

static int has_sync_batchnorm(const dp_model_spec *spec)
{
    for (int i = 0; i < spec->count; i++)
        if (spec->modules[i].options.sync)
            return 1;
    return 0;
}

static int check_model(dp_options *o, const dp_option_line *line)
{
    if (dp_option_given(line, "model") && dp_option_given(line, "layers"))
        return dp_fail(DP_EINVAL, "--model and --layers both describe the model: use one");
    int status = dp_option_given(line, "model") ? dp_model_spec_parse(o->model_text, &o->model)
                                                : dp_model_spec_from_layers(o->layers_spec, &o->model);
    if (status || !o->sync_bn)
        return status;
    dp_model_spec_sync_batchnorm(&o->model);
    if (!has_sync_batchnorm(&o->model))
        return dp_fail(DP_EINVAL, "--sync-bn applies to a model with batchnorm, but %s '%s' has none",
                       o->model.from_layers ? "--layers" : "--model", o->model.text);
    return 0;
}

/* --tf32 is --precision tf32; a --precision that says otherwise contradicts it. */
static int check_precision(const dp_option_line *line)
{
    const char *precision = dp_option_given(line, "precision");
    if (dp_option_given(line, "tf32") && precision && strcmp(precision, "tf32") != 0)
        return dp_fail(DP_EINVAL, "--tf32 is --precision tf32: it contradicts --precision %s", precision);
    return 0;
}

static int check_predict(const dp_options *o)
{
    if (!o->predict_path[0])
        return 0;
    if (!o->init_path[0])
        return dp_fail(DP_EINVAL, "--predict %s needs --init MODEL.safetensors: the trained model to run", o->predict_path);
    if (!o->output_path[0])
        return dp_fail(DP_EINVAL, "--predict %s needs --output FILE.npy: where the outputs go", o->predict_path);
    return 0;
}

/* The --strategy text row r names with the value it was given: its strategy, --zero's stage's,
 * or the value itself. */
static int named_strategy(const dp_option_row *r, const char *value, char *text, size_t size)
{
    if (r->choices) {
        int stage, status = dp_option_choice(r->name, value, r->choices, r->choice_count, &stage);
        snprintf(text, size, "%s", status ? "" : dp_strategy_name_for_zero(stage));
        return status;
    }
    snprintf(text, size, "%s", r->strategy.name ? r->strategy.name : value);
    return 0;
}

int dp_options_choose_strategy(dp_options *o, const dp_option_line *line)
{
    char first[96] = "";
    for (int i = 0; i < dp_option_row_count; i++) {
        const dp_option_row *r = &dp_option_rows[i];
        const char *value = line->text[i];
        if (r->kind != DP_OPTION_STRATEGY || !value)
            continue;
        char text[256], option[64], label[96];
        snprintf(option, sizeof option, "--%s", r->name);
        snprintf(label, sizeof label, "%s%s%s", option, value[0] ? " " : "", value);
        int status = named_strategy(r, value, text, sizeof text);
        if (!status && first[0])
            status = dp_fail(DP_EINVAL, "%s and %s both choose how the ranks' work is combined (the strategy): use one",
                             first, label);
        /* --strategy's keys are named in its own text; an alias's value in the option's. */
        int names_itself = !r->strategy.name && !r->choices;
        if (!status)
            status = dp_strategy_choose(&o->strategy, text, names_itself ? option : label);
        if (!status && r->strategy.key)
            status = dp_strategy_set_key(&o->strategy, r->strategy.key, value, option);
        if (status)
            return status;
        snprintf(o->strategy.label, sizeof o->strategy.label, "%s", label);
        snprintf(first, sizeof first, "%s", label);
    }
    /* The plan's table shows every stage: a budget given alone is its stages 2 and 3's. */
    int status = !first[0] && dp_option_given(line, "memory-plan") && dp_option_given(line, "zero-live-mb")
                     ? dp_strategy_choose(&o->strategy, "zero-3", "--memory-plan")
                     : 0;
    for (int i = 0; !status && i < dp_option_row_count; i++) {
        const dp_option_row *r = &dp_option_rows[i];
        char option[64];
        if (r->kind != DP_OPTION_STRATEGY_KEY || !line->text[i])
            continue;
        snprintf(option, sizeof option, "--%s", r->name);
        status = dp_strategy_set_key(&o->strategy, r->strategy.key, line->text[i], option);
    }
    return status;
}

/* What the strategy refuses of the run's other options (its own table's constraints). */
static int check_strategy(const dp_options *o)
{
    dp_strategy_run run = {.grad_dtype = o->grad_dtype, .sync_batchnorms = has_sync_batchnorm(&o->model),
                           .checkpoint_every = o->checkpoint_every, .check_replicas = o->check_replicas};
    return dp_strategy_check(&o->strategy, &run);
}

/* --debug-corrupt and --debug-straggle name a rank that must exist, or they would test nothing. */
static int check_debug_ranks(const dp_options *o, int world)
{
    const struct {
        const char *name;
        int rank;
    } ranks[] = {{"debug-corrupt", o->corrupt_rank}, {"debug-straggle", o->straggle_rank}};
    for (size_t i = 0; i < sizeof ranks / sizeof *ranks; i++)
        if (ranks[i].rank >= world)
            return dp_fail(DP_EINVAL, "--%s names rank %d, but the run has %d rank%s (0 to %d)", ranks[i].name,
                           ranks[i].rank, world, world == 1 ? "" : "s", world - 1);
    return 0;
}

int dp_options_check_combination(dp_options *o, int world, const dp_option_line *line)
{
    int status = check_model(o, line);
    if (!status)
        status = check_precision(line);
    if (!status)
        status = check_predict(o);
    if (!status)
        status = check_strategy(o);
    if (status)
        return status;
    if (o->lr_min > o->lr)
        return dp_fail(DP_EINVAL, "--lr-min %g is above --lr %g: the schedule decays to it", (double)o->lr_min,
                       (double)o->lr);
    if (o->batch < world)
        return dp_fail(DP_EINVAL, "--batch %ld is smaller than the world size %d: every rank needs at least one sample per batch",
                       o->batch, world);
    if ((status = check_debug_ranks(o, world)) != 0)
        return status;
    if (o->init_path[0] && o->resume[0] && !dp_options_resume_auto(o))
        return dp_fail(DP_EINVAL, "--init and --resume both give the starting point: use one (or --resume auto, "
                       "which starts from --init when --checkpoint-dir holds no checkpoint)");
    return dp_options_check_limits(o, world);
}

int dp_options_resume_auto(const dp_options *o)
{
    return strcmp(o->resume, "auto") == 0;
}
