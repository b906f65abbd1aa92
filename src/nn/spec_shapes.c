/* What a --model or --layers spec says before a model exists: whether it takes images, its
 * SyncBatchNorms, its canonical text (what a checkpoint records), a preset's class count, the
 * shape one sample leaves it in and its parameters module by module (a residual's shortcut
 * taking the residual's input again). */
#include "src/nn/module.h"

#include "dp/error.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int dp_model_spec_takes_images(const dp_model_spec *spec)
{
    for (int i = 0; i < spec->count; i++)
        if (spec->modules[i].type->spatial)
            return 1;
    return 0;
}

void dp_model_spec_sync_batchnorm(dp_model_spec *spec)
{
    for (int i = 0; i < spec->count; i++)
        if (spec->modules[i].type->normalizes)
            spec->modules[i].options.sync = 1;
}

/* Appends one module's text to the list in text: its name, then as name=value either the
 * options that decide which tensors exist (structural) or the others. */
static size_t append_module(char *text, size_t size, size_t used, const dp_module_spec *mod, int structural)
{
    const dp_module_type *type = mod->type;
    int shapes_tensors = type->structural, shown = 0;
    used += (size_t)snprintf(text + used, size - used, "%s%s", used ? "," : "", type->name);
    for (int i = 0; i < type->nargs && used < size && shapes_tensors == structural; i++) {
        const dp_module_arg *a = &type->args[i];
        const char *field = (const char *)&mod->options + a->offset;
        double value = a->kind == DP_ARG_FLOAT ? *(const float *)field : *(const int *)field;
        used += (size_t)snprintf(text + used, size - used, "%s%s=%.8g", shown++ ? "," : "(", a->name, value);
    }
    if (shown && used < size)
        used += (size_t)snprintf(text + used, size - used, ")");
    return used < size ? used : size - 1;
}

/* Whether an earlier module of spec has mod's type and options (a preset lists each kind once). */
static int seen_before(const dp_model_spec *spec, int i)
{
    for (int j = 0; j < i; j++)
        if (spec->modules[j].type == spec->modules[i].type &&
            memcmp(&spec->modules[j].options, &spec->modules[i].options, sizeof spec->modules[i].options) == 0)
            return 1;
    return 0;
}

void dp_model_spec_canonical(const dp_model_spec *spec, int inputs, int structural, char *text, size_t size)
{
    if (spec->preset && structural) { /* its name, inputs and classes decide every tensor */
        snprintf(text, size, "%s %d: %d classes", spec->text, inputs, spec->classes);
        return;
    }
    char modules[DP_MODEL_SPEC_MAX * 2] = "";
    size_t used = 0;
    for (int i = 0; i < spec->count; i++)
        if (!spec->preset || !seen_before(spec, i))
            used = append_module(modules, sizeof modules, used, &spec->modules[i], structural);
    snprintf(text, size, "%s %d: %s", spec->preset ? spec->text : spec->from_layers ? "layers" : "sequential", inputs,
             modules);
}

int dp_model_spec_needs_classes(const dp_model_spec *spec)
{
    return spec->preset && !spec->classes;
}

/* A preset's output layer is its last module with parameters: its Linear. */
void dp_model_spec_set_classes(dp_model_spec *spec, int classes)
{
    spec->classes = classes;
    for (int i = spec->count - 1; i >= 0; i--)
        if (spec->modules[i].type == &dp_module_linear) {
            spec->modules[i].options.out_features = classes;
            return;
        }
}

/* The shape module mod makes of `in`, a residual's shortcut taking the residual's input again
 * (inputs: those of the residuals open around mod). */
static dp_dims residual_shape(const dp_module_spec *mod, const dp_dims *in, dp_dims *inputs, int *depth)
{
    int role = mod->type->residual;
    if (role == DP_RESIDUAL_OPEN && *depth < DP_RESIDUAL_DEPTH_MAX)
        inputs[(*depth)++] = *in;
    if (role == DP_RESIDUAL_CLOSE && *depth > 0)
        (*depth)--;
    return role == DP_RESIDUAL_SPLIT && *depth > 0 ? inputs[*depth - 1] : *in;
}

int dp_model_spec_output(const dp_model_spec *spec, const dp_dims *input, dp_dims *output)
{
    dp_dims shape = spec->from_layers ? dp_dims_features(spec->inputs) : *input, inputs[DP_RESIDUAL_DEPTH_MAX];
    int depth = 0;
    for (int i = 0; i < spec->count && shape.ndim; i++) {
        const dp_module_spec *mod = &spec->modules[i];
        dp_dims out = residual_shape(mod, &shape, inputs, &depth);
        int overflow = 0;
        if (mod->type->size)
            mod->type->size(&mod->options, &shape, &out, &overflow);
        if (overflow || dp_dims_values(&out) > INT_MAX) {
            char in_text[64], out_text[96];
            dp_dims_text(&shape, in_text, sizeof in_text);
            dp_dims_text(&out, out_text, sizeof out_text);
            return dp_fail(DP_EINVAL, "--model '%s': module %d (%s) makes %s of each sample %s: %.0f values, more "
                           "than the %d a module's width is counted in", spec->text, i, mod->type->name, out_text,
                           in_text, dp_dims_values(&out), INT_MAX);
        }
        shape = dp_dims_values(&out) > 0.0 ? out : (dp_dims){0};
    }
    *output = shape;
    return 0;
}

size_t dp_model_spec_size(const dp_model_spec *spec, const dp_dims *input, int *widest, int *overflow)
{
    return dp_model_spec_module_params(spec, input, NULL, widest, overflow);
}

/* The widest a width may be counted as: activations wider than an int overflow anyway. */
static int width_of(const dp_dims *shape, int *overflow)
{
    int64_t n = dp_dims_numel(shape);
    *overflow |= n > INT_MAX;
    return n > INT_MAX ? INT_MAX : (int)n;
}

size_t dp_model_spec_module_params(const dp_model_spec *spec, const dp_dims *input, dp_module_size *sizes, int *widest,
                                   int *overflow)
{
    size_t total = 0;
    dp_dims shape = spec->from_layers ? dp_dims_features(spec->inputs) : *input, inputs[DP_RESIDUAL_DEPTH_MAX];
    int depth = 0;
    *widest = width_of(&shape, overflow);
    for (int i = 0; i < spec->count; i++) {
        const dp_module_spec *mod = &spec->modules[i];
        dp_dims out = residual_shape(mod, &shape, inputs, &depth);
        size_t count = mod->type->size ? mod->type->size(&mod->options, &shape, &out, overflow) : 0;
        if (*overflow || total > SIZE_MAX - count) {
            *overflow = 1;
            return 0;
        }
        total += count;
        if (sizes) { /* as dp_model_module_rows would say of the built module */
            sizes[i].params = count;
            dp_module_weight_rows(mod->type, &mod->options, count, &sizes[i].row, &sizes[i].rows);
        }
        shape = out;
        int width = width_of(&shape, overflow);
        *widest = width > *widest ? width : *widest;
    }
    return total;
}
