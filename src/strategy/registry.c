/* The strategies by name: one table, so a new strategy is its file and a row here. */
#include "src/strategy/strategy_type.h"

#include <stdio.h>
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

unsigned dp_strategy_model_owns(const dp_strategy_choice *choice)
{
    const dp_strategy_type *type = dp_strategy_find(choice->name);
    if (!type)
        return 3u;
    return (type->shards_params ? 0u : 1u) | (type->shards_grads ? 0u : 2u);
}
