/* The strategy a run chose, from --strategy NAME[:KEY=VALUE,...] or the options that name one:
 * the name found in the registry, each key read by the strategy's own table (its range, its
 * words, whether it changes the bits). */
#include "src/strategy/strategy_type.h"

#include "dp/error.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const dp_strategy_type *type_of(const dp_strategy_choice *c)
{
    return dp_strategy_find(c->name);
}

static void set_defaults(dp_strategy_choice *c, const dp_strategy_type *type)
{
    for (int k = 0; k < DP_STRATEGY_KEYS_MAX; k++)
        c->value[k] = k < type->key_count ? type->keys[k].fallback : 0.0;
}

void dp_strategy_choice_default(dp_strategy_choice *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "ddp");
    snprintf(c->label, sizeof c->label, "the default strategy ddp");
}

/* The strategies that take `key`, for messages: "zero-2, zero-3". */
static void takers(const char *key, char *text, size_t size)
{
    size_t used = 0;
    text[0] = '\0';
    for (int i = 0; dp_strategy_at(i); i++)
        for (int k = 0; k < dp_strategy_at(i)->key_count && used < size; k++)
            if (strcmp(dp_strategy_at(i)->keys[k].name, key) == 0)
                used += (size_t)snprintf(text + used, size - used, "%s%s", used ? ", " : "", dp_strategy_at(i)->name);
}

/* A key's value from text: one of its words, or a number in its range. */
static int read_value(const dp_strategy_key *key, const char *text, const char *label, double *value)
{
    for (int w = 0; w < 2 && key->words[w]; w++)
        if (strcmp(text, key->words[w]) == 0) {
            *value = key->word_values[w];
            return 0;
        }
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno || !isfinite(v) || (key->whole && v != floor(v)) || v > key->most ||
        v < key->least)
        return dp_fail(DP_EINVAL, "%s '%s': must be %s from %.17g to %.17g%s%s%s%s%s", label, text,
                       key->whole ? "a whole number" : "a number", key->least, key->most,
                       key->least_why ? " (" : "", key->least_why ? key->least_why : "", key->least_why ? ")" : "",
                       key->words[0] ? ", or " : "", key->words[0] ? key->metavar : "");
    *value = v;
    return 0;
}

int dp_strategy_set_key(dp_strategy_choice *c, const char *key, const char *text, const char *label)
{
    const dp_strategy_type *type = type_of(c);
    for (int k = 0; type && k < type->key_count; k++)
        if (strcmp(type->keys[k].name, key) == 0)
            return read_value(&type->keys[k], text, label, &c->value[k]);
    char names[128];
    takers(key, names, sizeof names);
    if (names[0])
        return dp_fail(DP_EINVAL, "%s applies to the strategies %s, but the run's is %s (%s)", label, names, c->name,
                       c->label);
    return dp_fail(DP_EINVAL, "%s: the strategy %s takes no key '%s'", label, c->name, key);
}

int dp_strategy_choose(dp_strategy_choice *c, const char *text, const char *label)
{
    char copy[256];
    if (snprintf(copy, sizeof copy, "%s", text) >= (int)sizeof copy)
        return dp_fail(DP_EINVAL, "%s '%.40s...': too long", label, text);
    char *keys = strchr(copy, ':');
    if (keys)
        *keys++ = '\0';
    const dp_strategy_type *type = dp_strategy_find(copy);
    if (!type)
        return dp_fail(DP_EINVAL, "%s '%s': no strategy '%s' (known: %s)", label, text, copy, dp_strategy_names());
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", type->name);
    snprintf(c->label, sizeof c->label, "%s %s", label, text);
    set_defaults(c, type);
    if (keys && !*keys)
        return dp_fail(DP_EINVAL, "%s '%s': keys follow the ':' as KEY=VALUE,...", label, text);
    char *rest;
    for (char *pair = keys ? strtok_r(keys, ",", &rest) : NULL; pair; pair = strtok_r(NULL, ",", &rest)) {
        char *value = strchr(pair, '=');
        if (!value || value == pair || !value[1])
            return dp_fail(DP_EINVAL, "%s '%s': '%s' is not KEY=VALUE", label, text, pair);
        *value++ = '\0';
        char key_label[160];
        snprintf(key_label, sizeof key_label, "%s %s:%s", label, type->name, pair);
        int status = dp_strategy_set_key(c, pair, value, key_label);
        if (status)
            return status;
    }
    return 0;
}

double dp_strategy_key_value(const dp_strategy_choice *c, const char *key)
{
    const dp_strategy_type *type = type_of(c);
    for (int k = 0; type && k < type->key_count; k++)
        if (strcmp(type->keys[k].name, key) == 0)
            return c->value[k];
    return NAN;
}

const char *dp_strategy_any_world(const dp_strategy_choice *c)
{
    const dp_strategy_type *type = type_of(c);
    return type ? type->any_world : NULL;
}

int dp_strategy_capturable(const dp_strategy_choice *c, char *why, size_t size)
{
    const dp_strategy_type *type = type_of(c);
    if (type && type->captured)
        return 1;
    snprintf(why, size, "the %s strategy (graphs replay plain DDP steps)", c->name);
    return 0;
}

const char *dp_strategy_sums_on_host(const dp_strategy_choice *c)
{
    const dp_strategy_type *type = type_of(c);
    return type ? type->sums_on_host : NULL;
}

double dp_strategy_working_bytes(const dp_strategy_choice *c, const dp_strategy_sizes *s)
{
    const dp_strategy_type *type = type_of(c);
    return type && type->working_bytes ? type->working_bytes(c, s) : 0.0;
}

int dp_strategy_memory_stage(const dp_strategy_choice *c)
{
    const dp_strategy_type *type = type_of(c);
    return type ? type->shards_state + type->shards_grads + type->shards_params : 0;
}

void dp_strategy_take_keys(dp_strategy_choice *to, const dp_strategy_choice *from)
{
    const dp_strategy_type *type = type_of(to);
    for (int k = 0; type && k < type->key_count; k++) {
        double value = dp_strategy_key_value(from, type->keys[k].name);
        to->value[k] = isnan(value) ? to->value[k] : value;
    }
}

/* A key's value as a command line writes it: its word, or the number. */
static void value_text(const dp_strategy_key *key, double value, char *text, size_t size)
{
    for (int w = 0; w < 2 && key->words[w]; w++)
        if (value == key->word_values[w]) {
            snprintf(text, size, "%s", key->words[w]);
            return;
        }
    snprintf(text, size, "%.10g", value);
}

void dp_strategy_choice_text(const dp_strategy_choice *c, int all, char *text, size_t size)
{
    const dp_strategy_type *type = type_of(c);
    size_t used = (size_t)snprintf(text, size, "%s", c->name);
    for (int k = 0, first = 1; type && k < type->key_count && used < size; k++) {
        if (!all && !type->keys[k].arithmetic)
            continue;
        char value[48];
        value_text(&type->keys[k], c->value[k], value, sizeof value);
        used += (size_t)snprintf(text + used, size - used, "%s%s=%s", first ? ":" : ",", type->keys[k].name, value);
        first = 0;
    }
}

int dp_strategy_check(const dp_strategy_choice *c, const dp_strategy_run *run)
{
    const dp_strategy_type *type = type_of(c);
    if (!type)
        return dp_fail(DP_EINVAL, "%s: no strategy '%s' (known: %s)", c->label, c->name, dp_strategy_names());
    int status = type->check ? type->check(c, run) : 0;
    if (status)
        return status;
    return type->check_groups ? type->check_groups(c, run) : dp_strategy_check_micro_rows(c, run);
}

size_t dp_strategy_group_rows(const dp_strategy_choice *c, size_t micro_batch, size_t step_batch, int world)
{
    const dp_strategy_type *type = type_of(c);
    return type && type->group_rows ? type->group_rows(c, micro_batch, step_batch, world)
                                    : dp_strategy_micro_rows(c, micro_batch, step_batch, world);
}

int dp_strategy_default_threads(const dp_strategy_choice *c, const char **why)
{
    const dp_strategy_type *type = type_of(c);
    *why = type ? type->blas_threads_why : NULL;
    return type ? type->blas_threads : 0;
}

/* Version 3 named the strategy by three fields: --exact's shard (0: not --exact), local SGD's K
 * (0: not local SGD), else the ZeRO stage. */
int dp_strategy_from_version_3(const char *zero, const char *average_every, const char *exact_shard, char *text,
                               size_t size)
{
    char *end_zero, *end_every, *end_shard, given[64];
    long stage = strtol(zero, &end_zero, 10), every = strtol(average_every, &end_every, 10);
    long shard = strtol(exact_shard, &end_shard, 10);
    if (*end_zero || *end_every || *end_shard || !dp_strategy_name_for_zero((int)stage) || every < 0 || shard < 0)
        return dp_fail(DP_EFORMAT, "version 3's fields zero=%s, average_every=%s, exact_shard=%s name no strategy",
                       zero, average_every, exact_shard);
    if (shard)
        snprintf(given, sizeof given, "exact:rows=%ld", shard);
    else if (every)
        snprintf(given, sizeof given, "local-sgd:every=%ld", every);
    else
        snprintf(given, sizeof given, "%s", dp_strategy_name_for_zero((int)stage));
    dp_strategy_choice c;
    int status = dp_strategy_choose(&c, given, "a version-3 checkpoint's strategy");
    if (!status)
        dp_strategy_choice_text(&c, 0, text, size);
    return status;
}

void dp_strategy_print_help(FILE *out)
{
    for (int i = 0; dp_strategy_at(i); i++) {
        const dp_strategy_type *type = dp_strategy_at(i);
        fprintf(out, "  %-28s %s\n", type->name, type->summary);
        for (int k = 0; k < type->key_count; k++) {
            const dp_strategy_key *key = &type->keys[k];
            char flag[64], fallback[48];
            snprintf(flag, sizeof flag, "  :%s=%s", key->name, key->metavar);
            value_text(key, key->fallback, fallback, sizeof fallback);
            fprintf(out, "  %-28s %s [default: %s]\n", flag, key->help, fallback);
        }
    }
}
