/* dp_worker's command lines read through the option rows (option_table.h): the program its
 * first argument names, each option's text into its field, the defaults, then the strategy
 * composed, the "applies to" rules and the combinations checked. */
#include "config.h"

#include "dp/options.h"

#include "dp/error.h"
#include "dp/strategy.h"
#include "src/train/option_checks.h"
#include "src/train/option_table.h"
#include "src/train/option_values.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

/* A word's number ("auto") into the field of a row of a number kind. */
static void store_word(const dp_option_row *r, void *field)
{
    if (r->kind == DP_OPTION_LONG)
        *(long *)field = (long)r->word_value;
    else
        *(double *)field = r->word_value;
}

static int apply_integer(const dp_option_row *r, const char *text, void *field)
{
    long max = r->range.max ? r->range.max : r->kind == DP_OPTION_INT ? INT_MAX : LONG_MAX;
    long value;
    int status = dp_option_long(r->name, text, r->range.min, max, r->range.why ? r->range.why : "a 64-bit integer",
                                &value);
    if (!status && r->kind == DP_OPTION_INT)
        *(int *)field = (int)value;
    else if (!status)
        *(long *)field = value;
    return status;
}

int dp_option_apply(const dp_option_row *r, const char *text, dp_options *o)
{
    void *field = (char *)o + r->field;
    if (r->word && strcmp(text, r->word) == 0) {
        store_word(r, field);
        return 0;
    }
    int choice, status;
    switch (r->kind) {
    case DP_OPTION_FLAG: *(int *)field = 1; return 0;
    case DP_OPTION_TEXT: return dp_option_text(r->name, text, field, r->size);
    case DP_OPTION_LONG: case DP_OPTION_INT: return apply_integer(r, text, field);
    case DP_OPTION_FLOAT: return dp_option_float(r->name, text, r->range.positive, r->range.below, field);
    case DP_OPTION_DOUBLE: return dp_option_double(r->name, text, field);
    case DP_OPTION_MIB: return dp_option_mib(r->name, text, (size_t)r->range.min, r->range.why, field);
    case DP_OPTION_COUNT: return dp_option_count(r->name, text, field);
    case DP_OPTION_SEED: return dp_option_seed(r->name, text, field);
    case DP_OPTION_CHOICE:
        /* Copied as an int's bytes: a choice field is an int or an enum of int's size. A row with
         * a parser takes NAME:ARGUMENTS too, the name a choice and the whole text its parser's. */
        if (r->parse && strchr(text, ':')) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)strcspn(text, ":"), text);
            status = dp_option_choice(r->name, name, r->choices, r->choice_count, &choice);
        } else {
            status = dp_option_choice(r->name, text, r->choices, r->choice_count, &choice);
        }
        if (!status)
            memcpy(field, &choice, sizeof choice);
        return status || !r->parse ? status : r->parse(text, o);
    case DP_OPTION_ALIAS: return dp_option_apply(dp_option_find(r->alias.option), r->alias.value, o);
    case DP_OPTION_CUSTOM: return r->parse(text, o);
    default: return 0; /* the strategy's, composed after parsing; --help and --version, the parse loop's */
    }
}

void dp_options_defaults(dp_options *o)
{
    memset(o, 0, sizeof *o);
    /* Every default reads as a given value does (tests/test_options.c applies each alone). */
    for (int i = 0; i < dp_option_row_count; i++)
        if (dp_option_rows[i].fallback)
            dp_option_apply(&dp_option_rows[i], dp_option_rows[i].fallback, o);
    /* The strategy is composed from its options after parsing; without any, it is DDP. */
    dp_strategy_choice_default(&o->strategy);
}

/* The defaults that depend on another option's value (per optimizer), for the options not given. */
static void apply_dependent_defaults(const dp_option_line *line, dp_options *o)
{
    for (int i = 0; i < dp_option_row_count; i++) {
        const dp_option_row *r = &dp_option_rows[i];
        if (r->depends.option && !line->text[i] &&
            dp_option_in_list(dp_option_value_text(dp_option_find(r->depends.option), o), r->depends.values))
            dp_option_apply(r, r->depends.fallback, o);
    }
}

/* The program argv runs: the one its first argument names, else training. */
static const dp_option_program *program_of(int argc, char **argv)
{
    const dp_option_program *named = argc > 1 ? dp_option_program_named(argv[1]) : NULL;
    return named ? named : dp_option_program_named(NULL);
}

/* "" or "predict ": how messages name the program after "dp_worker ". */
static const char *program_words(const dp_option_program *p, char *text, size_t size)
{
    snprintf(text, size, "%s%s", p->name ? p->name : "", p->name ? " " : "");
    return text;
}

/* --help or --version, where there is somewhere to print it (rank 0). */
static void print_asked(const dp_option_row *r, const dp_option_program *p, FILE *out)
{
    if (out && r->kind == DP_OPTION_HELP)
        dp_options_print_program_help(p, out);
    else if (out)
        fprintf(out, "dp_worker (%s) %s\n", PACKAGE_NAME, PACKAGE_VERSION);
}

/* The options in argv into o and line; DP_OPTIONS_EXIT after --help or --version. */
static int read_options(dp_option_line *line, dp_options *o, int argc, char **argv, FILE *out)
{
    struct option longopts[DP_OPTION_ROWS_MAX + 1] = {{0}};
    for (int i = 0; i < dp_option_row_count; i++)
        longopts[i] = (struct option){dp_option_rows[i].name, dp_option_rows[i].metavar ? required_argument : no_argument,
                                      NULL, 0};
    opterr = 0; /* our own messages name the option; getopt's would print once per rank */
    optind = 0; /* GNU getopt: a full re-initialisation, so tests can parse repeatedly */
    char words[32];
    program_words(line->program, words, sizeof words);
    for (;;) {
        int index = -1;
        int id = getopt_long(argc, argv, "", longopts, &index);
        if (id == -1)
            return 0;
        if (id == '?' || id == ':')
            return dp_fail(DP_EINVAL, "%s: %s (see dp_worker %s--help)", argv[optind - 1],
                           id == ':' ? "missing value" : "unknown option or missing value", words);
        const dp_option_row *r = &dp_option_rows[index];
        if (r->kind == DP_OPTION_HELP || r->kind == DP_OPTION_VERSION) {
            print_asked(r, line->program, out);
            return DP_OPTIONS_EXIT;
        }
        /* A subcommand takes the options its rows' mask gives it. */
        if (!(r->programs & line->program->mask))
            return dp_fail(DP_EINVAL, "--%s does not apply to dp_worker %s (its options: dp_worker %s--help)", r->name,
                           line->program->name, words);
        int status = dp_option_apply(r, optarg ? optarg : "", o);
        if (status)
            return status;
        line->text[index] = optarg ? optarg : "";
    }
}

/* What follows the options: a subcommand's operand, which it gives the row it runs as its
 * value (dp_worker plan: --memory-plan, which takes none); nothing else. */
static int read_operands(dp_option_line *line, dp_options *o, int argc, char **argv)
{
    const dp_option_program *p = line->program;
    char words[32];
    if (p->runs) {
        const char *text = !p->operand ? "" : optind < argc ? argv[optind++] : NULL;
        if (!text)
            return dp_fail(DP_EINVAL, "dp_worker %s needs %s (see dp_worker %s --help)", p->name, p->operand, p->name);
        const dp_option_row *r = dp_option_find(p->runs);
        int status = dp_option_apply(r, text, o);
        if (status)
            return status;
        line->text[r - dp_option_rows] = text;
    }
    if (optind < argc)
        return dp_fail(DP_EINVAL, "'%s': unexpected argument (options start with --; see dp_worker %s--help)",
                       argv[optind], program_words(p, words, sizeof words));
    return 0;
}

int dp_options_parse(dp_options *o, int argc, char **argv, int world, FILE *out)
{
    dp_option_line line = {.program = program_of(argc, argv)};
    int skip = line.program->name != NULL; /* a subcommand is its options' argv[0] */
    dp_options_defaults(o);
    int status = read_options(&line, o, argc - skip, argv + skip, out);
    if (!status)
        status = read_operands(&line, o, argc - skip, argv + skip);
    if (status)
        return status;
    apply_dependent_defaults(&line, o);
    if (!(status = dp_options_choose_strategy(o, &line)) && !(status = dp_options_check_rules(o, &line)))
        status = dp_options_check_combination(o, world, &line);
    return status;
}

dp_optimizer_config dp_options_optimizer(const dp_options *o)
{
    return (dp_optimizer_config){.kind = o->optimizer, .momentum = o->momentum,
                                 .weight_decay = o->weight_decay, .beta1 = o->beta1, .beta2 = o->beta2,
                                 .eps = o->eps, .decay_all = o->decay_all};
}

dp_lr_plan dp_options_lr_plan(const dp_options *o, long total_steps)
{
    return (dp_lr_plan){.schedule = o->lr_schedule, .base = o->lr, .min = o->lr_min,
                        .warmup_steps = o->warmup_steps, .warmup_start = o->warmup_start_factor,
                        .step_every = o->lr_step_every, .step_gamma = o->lr_step_gamma, .total = total_steps};
}
