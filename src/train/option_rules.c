/* The rows' "applies to" rules (option_table.h) over the options one command line gave: an
 * option of another mode is refused naming both options, never accepted and ignored. */
#include "src/train/option_table.h"

#include "dp/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int dp_option_in_list(const char *value, const char *list)
{
    for (const char *p = list; value && *p;) {
        size_t length = strcspn(p, "|");
        if (strlen(value) == length && strncmp(p, value, length) == 0)
            return 1;
        p += length + (p[length] == '|');
    }
    return 0;
}

static int passes(const dp_option_test *t, const dp_options *o, const dp_option_line *line)
{
    int holds = t->values ? dp_option_in_list(dp_option_value_text(dp_option_find(t->option), o), t->values)
                          : dp_option_given(line, t->option) != NULL;
    return holds != t->unless;
}

/* Whether the rule is for the value the option was given. */
static int rule_for(const dp_option_rule *rule, const char *given)
{
    if (!rule->when)
        return 1;
    int but = rule->when[0] == '!';
    return dp_option_in_list(given, rule->when + but) != but;
}

static int holds(const dp_option_rule *rule, const dp_options *o, const dp_option_line *line)
{
    for (size_t t = 0; t < sizeof rule->to / sizeof *rule->to && rule->to[t].option; t++)
        if (passes(&rule->to[t], o, line))
            return 1;
    return 0;
}

/* Appends to text (size bytes, used of them taken) what format says, as far as it fits. */
static size_t append(char *text, size_t size, size_t used, const char *format, ...)
{
    if (used >= size)
        return used;
    va_list args;
    va_start(args, format);
    used += (size_t)vsnprintf(text + used, size - used, format, args);
    va_end(args);
    return used;
}

/* What the rule's tests ask for: "--allreduce ring-pipelined or auto, or --hier-inner
 * ring-pipelined", "--checkpoint-dir", "--device other than cpu", "no --no-overlap". */
static void describe(const dp_option_rule *rule, char *text, size_t size)
{
    size_t used = 0;
    for (size_t t = 0; t < sizeof rule->to / sizeof *rule->to && rule->to[t].option; t++) {
        const dp_option_test *test = &rule->to[t];
        used = append(text, size, used, "%s%s--%s%s", t ? ", or " : "", test->unless && !test->values ? "no " : "",
                      test->option, test->unless && test->values ? " other than" : "");
        for (const char *p = test->values; p && *p;) {
            size_t length = strcspn(p, "|");
            used = append(text, size, used, "%s%.*s", p == test->values ? " " : " or ", (int)length, p);
            p += length + (p[length] == '|');
        }
    }
}

/* "--X applies to Y, but --Z is V: why", or "--X does not apply to --Z: why". */
static int refuse(const dp_option_row *r, const char *given, const dp_option_rule *rule, const dp_options *o)
{
    const dp_option_test *first = &rule->to[0];
    char self[160], target[256] = "", state[160];
    snprintf(self, sizeof self, "--%s%s%s", r->name, rule->when ? " " : "", rule->when ? given : "");
    const char *colon = rule->why ? ": " : "", *why = rule->why ? rule->why : "";
    if (first->unless && !first->values && !rule->what)
        return dp_fail(DP_EINVAL, "%s does not apply to --%s%s%s", self, first->option, colon, why);
    if (rule->what)
        snprintf(target, sizeof target, "%s", rule->what);
    else
        describe(rule, target, sizeof target);
    if (first->values)
        snprintf(state, sizeof state, "--%s is %s", first->option, dp_option_value_text(dp_option_find(first->option), o));
    else
        snprintf(state, sizeof state, "--%s is %s", first->option, first->unless ? "given" : "not given");
    return dp_fail(DP_EINVAL, "%s applies to %s, but %s%s%s", self, target, state, colon, why);
}

int dp_options_check_rules(const dp_options *o, const dp_option_line *line)
{
    for (int i = 0; i < dp_option_row_count; i++) {
        const dp_option_row *r = &dp_option_rows[i];
        for (size_t k = 0; line->text[i] && k < sizeof r->applies / sizeof *r->applies; k++) {
            const dp_option_rule *rule = &r->applies[k];
            if (rule->to[0].option && rule_for(rule, line->text[i]) && !holds(rule, o, line))
                return refuse(r, line->text[i], rule, o);
        }
    }
    return 0;
}
