/* The strategies by name: one table, so a new strategy is its file and a row here. */
#include "src/strategy/strategy_type.h"

#include "dp/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every strategy, by name: a new one is a file and a row here (its declaration and its entry). */
extern const dp_strategy_type dp_strategy_ddp, dp_strategy_zero1, dp_strategy_zero2, dp_strategy_zero3;
extern const dp_strategy_type dp_strategy_local_sgd, dp_strategy_exact;
extern const dp_strategy_type dp_strategy_bf16_compress;
static const dp_strategy_type *const strategies[] = {
    &dp_strategy_ddp, &dp_strategy_zero1, &dp_strategy_zero2, &dp_strategy_zero3, &dp_strategy_local_sgd,
    &dp_strategy_exact, &dp_strategy_bf16_compress,
};

const dp_strategy_type *dp_strategy_at(int i)
{
    return i >= 0 && (size_t)i < sizeof strategies / sizeof *strategies ? strategies[i] : NULL;
}

const dp_strategy_type *dp_strategy_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof strategies / sizeof *strategies; i++)
        if (strcmp(strategies[i]->name, name) == 0)
            return strategies[i];
    return NULL;
}

const char *dp_strategy_names(void)
{
    static char names[128];
    size_t used = 0;
    for (size_t i = 0; i < sizeof strategies / sizeof *strategies && used < sizeof names; i++)
        used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", strategies[i]->name);
    return names;
}

const char *dp_strategy_name_for_zero(int stage)
{
    static const char *const names[DP_ZERO_STAGES] = {"ddp", "zero-1", "zero-2", "zero-3"};
    return stage >= 0 && stage < DP_ZERO_STAGES ? names[stage] : NULL;
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

unsigned dp_strategy_model_owns(const dp_strategy_choice *choice)
{
    const dp_strategy_type *type = dp_strategy_find(choice->name);
    if (!type)
        return 3u;
    return (type->shards_params ? 0u : 1u) | (type->shards_grads ? 0u : 2u);
}
