/* Inside train/: every option of dp_worker's command lines, declared once as a row of
 * dp_option_rows (option_rows.c): its name, value, field, default, range, group, the programs
 * that take it, where it applies and what a resume makes of it. Parsing (options.c), --help
 * (option_help.c) and the "applies to" checks (option_rules.c) read the rows. */
#ifndef DP_TRAIN_OPTION_TABLE_H
#define DP_TRAIN_OPTION_TABLE_H

#include "dp/options.h"

#include <stddef.h>

/* What an option's value is, and so how its text is read into its field. */
typedef enum dp_option_kind {
    DP_OPTION_FLAG,         /* takes no value: stores 1 in its int field */
    DP_OPTION_TEXT,         /* a non-empty text that fits its char array: a path, a spec, a name */
    DP_OPTION_LONG,         /* an integer in the row's range, in a long */
    DP_OPTION_INT,          /* the same, in an int */
    DP_OPTION_FLOAT,        /* a finite number that float32 holds as given */
    DP_OPTION_DOUBLE,       /* a finite number >= 0 */
    DP_OPTION_MIB,          /* a size in MiB, fractions allowed, at most 1e6 */
    DP_OPTION_COUNT,        /* a whole number from 1 to 1e15, 70e9 allowed */
    DP_OPTION_SEED,         /* any 64-bit unsigned integer */
    DP_OPTION_CHOICE,       /* one of the row's names: its index, in an int-sized field (with a parser,
                             * NAME:ARGUMENTS too) */
    DP_OPTION_ALIAS,        /* another option with a value: --tf32 is --precision tf32 */
    DP_OPTION_CUSTOM,       /* read by the row's own parser */
    DP_OPTION_STRATEGY,     /* names the strategy; composed once every option is read */
    DP_OPTION_STRATEGY_KEY, /* sets a key of the strategy named; composed likewise */
    DP_OPTION_HELP,         /* prints the program's --help and exits */
    DP_OPTION_VERSION       /* prints the version and exits */
} dp_option_kind;

/* --help's headings, in their order. */
typedef enum dp_option_group {
    DP_GROUP_DATA, DP_GROUP_MODEL, DP_GROUP_OPTIMIZER, DP_GROUP_STRATEGY, DP_GROUP_DEVICE,
    DP_GROUP_CHECKPOINTS, DP_GROUP_OUTPUT, DP_GROUP_RELIABILITY, DP_GROUPS
} dp_option_group;

/* The programs of dp_worker, as a row's mask of those that take the option: training (no
 * subcommand, and the old flags --predict and --memory-plan), dp_worker predict, dp_worker plan. */
enum { DP_PROGRAM_TRAIN = 1u << 0, DP_PROGRAM_PREDICT = 1u << 1, DP_PROGRAM_PLAN = 1u << 2 };

/* What a resume makes of the option where it differs from the checkpoint's (src/train/state.c's
 * roles of the fields it records; batch and accum are also one identity field, their product). */
typedef enum dp_option_resume {
    DP_RESUME_UNRECORDED, /* checkpoints do not record it */
    DP_RESUME_IDENTITY,   /* fixes the tensors or the sample order: the resume is refused */
    DP_RESUME_BITS        /* changes the arithmetic: the run continues, no longer bit-exactly */
} dp_option_resume;

/* A file the option names: its checks at start-up that no output overwrites another output or an
 * input (src/train/outputs.c). */
typedef enum dp_option_file { DP_FILE_NONE, DP_FILE_READ, DP_FILE_WRITTEN } dp_option_file;

/* A test of another option of the run: that it was given (values NULL) or that its value is one
 * of values ("ring-pipelined|auto"); unless: the opposite. A value is read from the option's
 * field, so it is the default where the option was not given. */
typedef struct dp_option_test {
    const char *option;
    const char *values;
    int unless;
} dp_option_test;

/* Where an option applies: once it is given (with one of the values `when` lists, or with any
 * but those after a '!'; NULL: any), one of the tests must hold, or the run is refused naming
 * both options. */
typedef struct dp_option_rule {
    const char *when;
    dp_option_test to[3]; /* any one suffices; an unused one has no option */
    const char *what;     /* what it applies to in the message ("GPUs"); NULL: the tests */
    const char *why;      /* the reason the message ends with, if any */
} dp_option_rule;

/* One option, all there is to it. */
typedef struct dp_option_row {
    const char *name;    /* --NAME */
    const char *metavar; /* its value in --help; NULL: it takes none */
    dp_option_kind kind;
    size_t field, size;  /* its field in dp_options (offsetof, sizeof); size 0: it has none of its own */
    const char *const *choices; /* CHOICE: the names, by the value each stores */
    int choice_count;
    int (*parse)(const char *text, dp_options *o); /* CUSTOM; CHOICE: reads NAME:ARGUMENTS after the name */
    struct {
        const char *option, *value;
    } alias;             /* ALIAS: the option and value it stands for */
    struct {
        const char *name, *key;
    } strategy;          /* STRATEGY: the strategy it names (NULL: its value names one), the key its
                          * value sets; STRATEGY_KEY: the key */
    const char *word;    /* a word that stands for a number ("auto"), and that number */
    double word_value;
    struct {
        long min, max;   /* LONG, INT: from min to max (max 0: LONG_MAX); MIB: at least min bytes */
        int positive;    /* FLOAT: 0 refused */
        double below;    /* FLOAT: an exclusive bound (0: none but float32's) */
        const char *why; /* why max (LONG, INT) or min (MIB) is the bound, for the message */
    } range;
    const char *fallback; /* the default, written as the option's value: read into the field by the
                           * same parser as a given one, and --help shows it; NULL: the field's 0 */
    struct {
        const char *option, *values, *fallback;
    } depends;           /* the default instead where `option` has one of `values` and this is not given */
    const char *note;    /* --help: what the default means, or what it is where it has no value */
    dp_option_group group;
    unsigned programs;   /* DP_PROGRAM_* that take it */
    dp_option_rule applies[2];
    dp_option_resume resume;
    dp_option_file file; /* TEXT: a file it names */
    const char *help;
} dp_option_row;

extern const dp_option_row dp_option_rows[];
extern const int dp_option_row_count;

/* The row of --name; NULL where there is none. */
const dp_option_row *dp_option_find(const char *name);

/* A program of dp_worker: its subcommand (NULL: training, with none), the row it stands for
 * (--predict, --memory-plan: what the old flag sets) and the operand it takes as that row's value. */
typedef struct dp_option_program {
    const char *name;
    unsigned mask;
    const char *runs;
    const char *operand;
    const char *usage; /* --help's first lines */
} dp_option_program;

extern const dp_option_program dp_option_programs[];
extern const int dp_option_program_count;

/* The program of subcommand name (NULL: training). */
const dp_option_program *dp_option_program_named(const char *name);

#define DP_OPTION_ROWS_MAX 112

/* What one command line gave: per row (by index in dp_option_rows), the text given ("" for an
 * option that takes none), NULL where the option was not given. */
typedef struct dp_option_line {
    const dp_option_program *program;
    const char *text[DP_OPTION_ROWS_MAX];
} dp_option_line;

/* The text line gave --name, or NULL. */
const char *dp_option_given(const dp_option_line *line, const char *name);

/* Reads text into o as row r says (its kind, field and range); errors name the option. */
int dp_option_apply(const dp_option_row *r, const char *text, dp_options *o);

/* Row r's value in o as text (CHOICE, TEXT, STRATEGY rows with a field), what rules test; NULL
 * for other kinds. */
const char *dp_option_value_text(const dp_option_row *r, const dp_options *o);

/* Whether value is one of the '|'-separated names in list. */
int dp_option_in_list(const char *value, const char *list);

/* The rows' "applies to" rules over every option line gave (o: its values, the strategy composed). */
int dp_options_check_rules(const dp_options *o, const dp_option_line *line);

/* The program's --help: its usage, its options under the groups' headings, and what follows. */
void dp_options_print_program_help(const dp_option_program *p, FILE *out);

#endif
