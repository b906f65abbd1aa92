/* --model and --layers: text into a list of module specs, with errors that name the spec,
 * the module and the problem. */
#include "src/nn/module.h"

#include "dp/error.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What --model may name (a residual's shortcut and add are written by its braces). */
static const dp_module_type *const module_types[] = {
    &dp_module_linear, &dp_module_relu, &dp_module_batchnorm, &dp_module_dropout, &dp_module_conv2d,
    &dp_module_maxpool, &dp_module_avgpool, &dp_module_globalavgpool, &dp_module_flatten, &dp_module_residual,
};
#define TYPE_COUNT (sizeof module_types / sizeof module_types[0])

const char *dp_model_module_names(void)
{
    static char names[128];
    if (!names[0])
        for (size_t i = 0; i < TYPE_COUNT; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     module_types[i]->name);
    return names;
}

static const dp_module_type *find_type(const char *name, size_t len)
{
    for (size_t i = 0; i < TYPE_COUNT; i++)
        if (strlen(module_types[i]->name) == len && strncmp(module_types[i]->name, name, len) == 0)
            return module_types[i];
    return NULL;
}

/* The text between begin and end without surrounding blanks, as a C string in out; text
 * longer than out holds is refused, never cut (a cut "bias=000...01" would read as 0). */
static int trimmed(const char *spec, const char *begin, const char *end, char *out, size_t size)
{
    while (begin < end && isspace((unsigned char)*begin))
        begin++;
    while (end > begin && isspace((unsigned char)end[-1]))
        end--;
    size_t len = (size_t)(end - begin);
    if (len >= size)
        return dp_fail(DP_EINVAL, "--model '%s': '%.*s...' is %zu characters long, more than the %zu a module, "
                       "option or value may have", spec, 24, begin, len, size - 1);
    memcpy(out, begin, len);
    out[len] = '\0';
    return 0;
}

static const dp_module_arg *find_arg(const dp_module_type *type, const char *name)
{
    for (int i = 0; i < type->nargs; i++)
        if (strcmp(type->args[i].name, name) == 0)
            return &type->args[i];
    return NULL;
}

static void describe_arg_range(const dp_module_arg *a, char *text, size_t size)
{
    if (a->kind == DP_ARG_BOOL)
        snprintf(text, size, "0 or 1");
    else if (a->max == HUGE_VAL)
        snprintf(text, size, "%s >= %.9g", a->kind == DP_ARG_INT ? "an integer" : "a number", a->min);
    else /* %.9g: an int's bounds in full (2147483647, not 2.14748e+09), a float's as float32 reads back */
        snprintf(text, size, "%s in [%.9g, %.10g%c", a->kind == DP_ARG_INT ? "an integer" : "a number",
                 a->min, a->max, a->max_open ? ')' : ']');
}

/* Parses value into the option a names, checking kind and range. */
static int set_arg(const char *spec, int position, const dp_module_type *type, const dp_module_arg *a,
                   const char *value, dp_module_options *options)
{
    char *end;
    errno = 0;
    double v = a->kind == DP_ARG_FLOAT ? strtod(value, &end) : (double)strtol(value, &end, 10);
    int in_range = *value && !*end && !errno && isfinite(v) && v >= a->min &&
                   (a->max_open ? v < a->max : v <= a->max);
    if (!in_range) {
        char range[64];
        describe_arg_range(a, range, sizeof range);
        return dp_fail(DP_EINVAL, "--model '%s': module %d (%s): %s='%s' must be %s (%s)", spec,
                       position, type->name, a->name, value, range, a->meaning);
    }
    char *field = (char *)options + a->offset;
    float stored = (float)v;
    /* Checked again as stored: 0.99999999 is 1 in float32, 1e39 infinity, 1e-50 zero. */
    int stays = isfinite(stored) && stored >= a->min && (a->max_open ? stored < a->max : stored <= a->max) &&
                (v == 0.0 || stored != 0.0f);
    if (a->kind == DP_ARG_FLOAT && !stays) {
        char range[64];
        describe_arg_range(a, range, sizeof range);
        return dp_fail(DP_EINVAL, "--model '%s': module %d (%s): %s='%s' must be %s (%s), but it rounds to %.9g "
                       "in float32", spec, position, type->name, a->name, value, range, a->meaning, (double)stored);
    }
    if (a->kind == DP_ARG_FLOAT)
        *(float *)field = stored;
    else
        *(int *)field = (int)v;
    return 0;
}

/* "conv2d(4, 3)": the module with each option it needs, as given or else an example (those it
 * needs are ints). */
static void example_call(const dp_module_type *type, const int *given, const dp_module_options *options, char *text,
                         size_t size)
{
    int used = snprintf(text, size, "%s(", type->name);
    const char *sep = "";
    for (int i = 0; i < type->nargs && used > 0 && (size_t)used < size; i++) {
        const dp_module_arg *a = &type->args[i];
        if (a->example && given[i] && a->kind == DP_ARG_INT)
            used += snprintf(text + used, size - (size_t)used, "%s%d", sep, *(const int *)((const char *)options + a->offset));
        else if (a->example)
            used += snprintf(text + used, size - (size_t)used, "%s%s", sep, a->example);
        sep = a->example ? ", " : sep;
    }
    if (used > 0 && (size_t)used < size)
        snprintf(text + used, size - (size_t)used, ")");
}

/* "known: out, k, stride, padding, bias", or that it takes none. */
static void arg_names(const dp_module_type *type, char *text, size_t size)
{
    int used = snprintf(text, size, "%s", type->nargs ? "known:" : "it takes no options");
    for (int i = 0; i < type->nargs && used > 0 && (size_t)used < size; i++)
        used += snprintf(text + used, size - (size_t)used, "%s %s", i ? "," : "", type->args[i].name);
}

/* Parses "a, name=b, ..." (the text inside the parentheses) into options. */
static int parse_args(const char *spec, int position, const dp_module_type *type, const char *args,
                      dp_module_options *options)
{
    int given[16] = {0}, named = 0;
    const char *p = args;
    for (int n = 0; *p; n++) {
        const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p);
        char item[128], name[64];
        int status = trimmed(spec, p, end, item, sizeof item);
        if (status)
            return status;
        char *equals = strchr(item, '=');
        const dp_module_arg *a;
        const char *value;
        if (equals) {
            named = 1;
            if ((status = trimmed(spec, item, equals, name, sizeof name)))
                return status;
            value = equals + 1;
            while (isspace((unsigned char)*value))
                value++;
            a = find_arg(type, name);
        } else {
            /* Options without name= come first, in the table's order (conv2d(32, 3)). */
            if (named || n >= type->nargs)
                return dp_fail(DP_EINVAL, "--model '%s': module %d (%s): '%s': %s", spec, position,
                               type->name, item,
                               type->nargs == 0 ? "takes no options"
                               : named ? "options without name= must come before those with it"
                                       : "more options without name= than the module has");
            snprintf(name, sizeof name, "%s", type->args[n].name);
            value = item;
            a = &type->args[n];
        }
        if (!a) {
            char known[256];
            arg_names(type, known, sizeof known);
            return dp_fail(DP_EINVAL, "--model '%s': module %d (%s): unknown option '%s' (%s)", spec,
                           position, type->name, name, known);
        }
        if (given[a - type->args]++)
            return dp_fail(DP_EINVAL, "--model '%s': module %d (%s): %s given twice", spec, position,
                           type->name, a->name);
        if ((status = set_arg(spec, position, type, a, value, options)))
            return status;
        p = comma ? comma + 1 : end;
        if (comma && !*p)
            return dp_fail(DP_EINVAL, "--model '%s': module %d (%s): trailing comma in its options", spec,
                           position, type->name);
    }
    for (int i = 0; i < type->nargs; i++)
        if (type->args[i].example && !given[i]) {
            char example[128];
            example_call(type, given, options, example, sizeof example);
            return dp_fail(DP_EINVAL, "--model '%s': module %d (%s) needs %s (%s), e.g. %s", spec, position,
                           type->name, type->args[i].name, type->args[i].meaning, example);
        }
    return 0;
}

/* One module "name" or "name(args)" (no label, no outer) into out. */
static int parse_item(const char *spec, int position, const char *item, dp_module_spec *out)
{
    const char *open = strchr(item, '(');
    char name[64];
    int status = trimmed(spec, item, open ? open : item + strlen(item), name, sizeof name);
    if (status)
        return status;
    const dp_module_type *type = find_type(name, strlen(name));
    if (!type && dp_model_preset_find(name))
        return dp_fail(DP_EINVAL, "--model '%s': module %d '%s' is a preset, a whole model: give it alone "
                       "(--model %s)", spec, position, name, name);
    if (!type)
        return dp_fail(DP_EINVAL, "--model '%s': module %d '%s': unknown module (known: %s; or a preset: %s)", spec,
                       position, name, dp_model_module_names(), dp_model_preset_names());
    out->type = type;
    out->options = type->defaults;
    char args[256] = "";
    if (open) {
        const char *close = strrchr(item, ')');
        if (close && close[1]) /* "linear(8)relu": text after the options */
            return dp_fail(DP_EINVAL, "--model '%s': module %d (%s): '%s' follows its ')': modules are "
                           "separated by commas", spec, position, name, close + 1);
        if (!close || strchr(open + 1, '('))
            return dp_fail(DP_EINVAL, "--model '%s': module %d (%s): unbalanced parentheses in '%s'", spec,
                           position, name, item);
        if ((status = trimmed(spec, open + 1, close, args, sizeof args)))
            return status;
    }
    return parse_args(spec, position, type, args, &out->options);
}

/* The first of `stops` in [p, end) outside parentheses and braces, or end. */
static const char *find_outside(const char *p, const char *end, const char *stops)
{
    for (int depth = 0; p < end; p++) {
        if (depth == 0 && strchr(stops, *p))
            return p;
        depth += (*p == '(' || *p == '{') - (*p == ')' || *p == '}');
    }
    return end;
}

static int add_module(dp_model_spec *spec, const dp_module_spec *mod)
{
    if (spec->count == DP_MODEL_MAX_MODULES)
        return dp_fail(DP_EINVAL, "--model '%s': more than %d modules (a residual outer counts 3 more)", spec->text,
                       DP_MODEL_MAX_MODULES);
    spec->modules[spec->count++] = *mod;
    return 0;
}

/* A module's tensor prefix: its label under its residual's (outer), or its place in the list. */
static int module_name(const dp_model_spec *spec, const char *label, const char *outer, const char *part, int k,
                       char *name)
{
    for (const char *c = label; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '_' && *c != '.')
            return dp_fail(DP_EINVAL, "--model '%s': label '%s': letters, digits, '_' and '.' only", spec->text, label);
    int n = *label ? snprintf(name, DP_MODULE_NAME_MAX, "%s%s%s", outer, *outer ? "." : "", label)
            : *outer ? snprintf(name, DP_MODULE_NAME_MAX, "%s.%s.%d", outer, part, k)
                     : snprintf(name, DP_MODULE_NAME_MAX, "layers.%d", k);
    if (n < 0 || n >= DP_MODULE_NAME_MAX)
        return dp_fail(DP_EINVAL, "--model '%s': module name '%s%s%s' is longer than %d characters", spec->text, outer,
                       *outer ? "." : "", *label ? label : part, DP_MODULE_NAME_MAX - 1);
    return 0;
}

static int parse_list(dp_model_spec *spec, const char *p, const char *end, const char *outer, const char *part,
                      int depth);

/* A outer "residual(relu=0){body | shortcut}" (its head already parsed into open): its markers
 * around the body's modules and the shortcut's. */
static int parse_residual(dp_model_spec *spec, dp_module_spec *open, const char *brace, const char *end, int depth)
{
    int position = spec->count;
    if (depth == DP_RESIDUAL_DEPTH_MAX)
        return dp_fail(DP_EINVAL, "--model '%s': module %d (residual): residuals nest at most %d deep", spec->text,
                       position, DP_RESIDUAL_DEPTH_MAX);
    if (end[-1] != '}')
        return dp_fail(DP_EINVAL, "--model '%s': module %d (residual): '%.*s' follows its '}' or the '}' is missing: "
                       "modules are separated by commas", spec->text, position, (int)(end - brace), brace);
    const char *inner = brace + 1, *inner_end = end - 1, *bar = find_outside(inner, inner_end, "|");
    if (find_outside(bar < inner_end ? bar + 1 : inner_end, inner_end, "|") != inner_end)
        return dp_fail(DP_EINVAL, "--model '%s': module %d (residual): more than one '|' (body | shortcut)", spec->text,
                       position);
    dp_module_spec split = {.type = &dp_module_shortcut}, close = {.type = &dp_module_add, .options = open->options};
    snprintf(split.name, sizeof split.name, "%s", open->name);
    snprintf(close.name, sizeof close.name, "%s", open->name);
    int status = add_module(spec, open);
    if (!status)
        status = parse_list(spec, inner, bar, open->name, "body", depth + 1);
    if (!status)
        status = add_module(spec, &split);
    if (!status && bar < inner_end)
        status = parse_list(spec, bar + 1, inner_end, open->name, "shortcut", depth + 1);
    return status ? status : add_module(spec, &close);
}

/* One item of a list: "[label:]module" or "[label:]residual(...){...}". */
static int parse_entry(dp_model_spec *spec, const char *item, const char *outer, const char *part, int k, int depth)
{
    const char *head = item, *brace = strchr(item, '{'), *colon = strchr(item, ':');
    const char *head_end = brace ? brace : item + strlen(item), *paren = strchr(item, '(');
    char label[DP_MODULE_NAME_MAX] = "", text[256];
    int status = 0;
    if (colon && colon < head_end && (!paren || colon < paren)) {
        status = trimmed(spec->text, item, colon, label, sizeof label);
        if (!status && !label[0])
            status = dp_fail(DP_EINVAL, "--model '%s': module %d: empty label before ':'", spec->text, spec->count);
        head = colon + 1;
    }
    dp_module_spec mod = {0};
    if (!status)
        status = module_name(spec, label, outer, part, k, mod.name);
    if (!status)
        status = trimmed(spec->text, head, head_end, text, sizeof text);
    if (!status)
        status = parse_item(spec->text, spec->count, text, &mod);
    if (status)
        return status;
    if (mod.type == &dp_module_residual && !brace)
        return dp_fail(DP_EINVAL, "--model '%s': module %d (residual) needs its modules in braces: "
                       "residual{body} or residual{body | shortcut}, e.g. residual{conv2d(16, 3, padding=1), "
                       "batchnorm, relu, conv2d(16, 3, padding=1), batchnorm}", spec->text, spec->count);
    if (brace && mod.type != &dp_module_residual)
        return dp_fail(DP_EINVAL, "--model '%s': module %d (%s): only residual takes modules in braces", spec->text,
                       spec->count, mod.type->name);
    return brace ? parse_residual(spec, &mod, brace, item + strlen(item), depth) : add_module(spec, &mod);
}

/* The comma-separated items in [p, end): top level (outer "") or a residual's body or shortcut. */
static int parse_list(dp_model_spec *spec, const char *p, const char *end, const char *outer, const char *part,
                      int depth)
{
    for (int k = 0;; k++) {
        const char *stop = find_outside(p, end, ",");
        char item[DP_MODEL_SPEC_MAX];
        int status = trimmed(spec->text, p, stop, item, sizeof item);
        if (status)
            return status;
        if (!item[0])
            return dp_fail(DP_EINVAL, "--model '%s': empty module at position %d%s%s%s", spec->text, spec->count,
                           *outer ? " (in " : "", outer, *outer ? ")" : "");
        if ((status = parse_entry(spec, item, outer, part, k, depth)))
            return status;
        if (stop == end)
            return 0;
        p = stop + 1;
        if (p == end)
            return dp_fail(DP_EINVAL, "--model '%s': trailing comma%s%s%s", spec->text, *outer ? " (in " : "", outer,
                           *outer ? ")" : "");
    }
}

int dp_model_spec_parse(const char *text, dp_model_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    if (strlen(text) >= sizeof spec->text)
        return dp_fail(DP_EINVAL, "--model: longer than %zu characters", sizeof spec->text - 1);
    strcpy(spec->text, text);
    char name[DP_MODEL_SPEC_MAX];
    size_t begin = strspn(text, " \t\n"), len = strlen(text + begin);
    while (len > 0 && isspace((unsigned char)text[begin + len - 1]))
        len--;
    snprintf(name, sizeof name, "%.*s", (int)len, text + begin);
    spec->preset = dp_model_preset_find(name);
    if (!name[0])
        return dp_fail(DP_EINVAL, "--model '%s': no modules", text);
    if (!spec->preset)
        return parse_list(spec, text, text + strlen(text), "", "", 0);
    size_t size = (size_t)DP_MODEL_MAX_MODULES * 64; /* a preset's modules written out */
    char *written = dp_alloc(size, "a preset's modules");
    int status = written ? dp_model_preset_write(spec->preset, written, size) : DP_ENOMEM;
    if (!status)
        status = parse_list(spec, written, written + strlen(written), "", "", 0);
    free(written);
    return status;
}

int dp_model_spec_from_layers(const char *text, dp_model_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    snprintf(spec->text, sizeof spec->text, "%s", text);
    spec->from_layers = 1;
    const char *p = text;
    int widths = 0;
    while (*p) {
        char *end;
        errno = 0;
        long w = strtol(p, &end, 10);
        if (end == p || errno || w <= 0 || w > INT_MAX || (*end && *end != ','))
            return dp_fail(DP_EINVAL, "--layers '%s': widths must be positive integers separated by commas", text);
        if (spec->count + 2 > DP_MODEL_MAX_MODULES)
            return dp_fail(DP_EINVAL, "--layers '%s': at most %d layers", text, DP_MODEL_MAX_MODULES / 2);
        if (widths++ == 0) {
            spec->inputs = (int)w;
        } else {
            /* version 1's names: the k-th Linear is layers.{k} (its ReLU shares the next one's number) */
            if (spec->count > 0) {
                spec->modules[spec->count] = (dp_module_spec){&dp_module_relu, dp_module_relu.defaults, ""};
                snprintf(spec->modules[spec->count++].name, DP_MODULE_NAME_MAX, "layers.%d", widths - 2);
            }
            dp_module_spec *linear = &spec->modules[spec->count++];
            *linear = (dp_module_spec){&dp_module_linear, dp_module_linear.defaults, ""};
            linear->options.out_features = (int)w;
            snprintf(linear->name, DP_MODULE_NAME_MAX, "layers.%d", widths - 2);
        }
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return dp_fail(DP_EINVAL, "--layers '%s': trailing comma", text);
    }
    if (widths < 2)
        return dp_fail(DP_EINVAL, "--layers '%s': needs at least an input and an output width", text);
    return 0;
}
