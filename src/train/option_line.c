/* The questions the rules and the checks ask of a parsed command line: the text an option was
 * given, and a row's value as text. Kept apart from the parser, which calls them. */
#include "src/train/option_table.h"

#include "dp/strategy.h"

#include <string.h>

const char *dp_option_given(const dp_option_line *line, const char *name)
{
    const dp_option_row *r = dp_option_find(name);
    return r ? line->text[r - dp_option_rows] : NULL;
}

const char *dp_option_value_text(const dp_option_row *r, const dp_options *o)
{
    const char *field = (const char *)o + r->field;
    int choice;
    switch (r->kind) {
    case DP_OPTION_TEXT: return field;
    case DP_OPTION_CHOICE:
        memcpy(&choice, field, sizeof choice);
        return choice >= 0 && choice < r->choice_count ? r->choices[choice] : NULL;
    case DP_OPTION_STRATEGY: return r->size ? ((const dp_strategy_choice *)field)->name : NULL;
    default: return NULL;
    }
}
