/* What the run reads, opened and checked before it is used: the data must fit the model and the loss, a
 * test set judged by the training set's loss must have the same kind of targets, and starting
 * weights must be finite. */
#include "src/train/trainer.h"

#include "dp/checkpoint.h"
#include "dp/error.h"
#include "dp/safetensors.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

dp_loss dp_train_loss_for(const dp_options *o, const dp_dataset *data)
{
    if (o->loss == DP_LOSS_AUTO)
        return data->labels ? DP_LOSS_XENT : DP_LOSS_MSE;
    return o->loss == DP_LOSS_CHOICE_XENT ? DP_LOSS_XENT : DP_LOSS_MSE;
}

static int max_label(const dp_dataset *data)
{
    int32_t top = 0;
    for (size_t i = 0; i < data->count; i++)
        if (data->labels[i] > top)
            top = data->labels[i];
    return top;
}


int dp_train_open_datasets(const dp_options *o, dp_dataset *train, dp_dataset *test, int *has_test)
{
    int regression = o->loss == DP_LOSS_CHOICE_MSE;
    int status = dp_dataset_open(o->data, 0, regression, o->seed, train);
    if (status)
        return dp_fail_context(status, "--data %s", o->data);
    *has_test = o->test_data[0] || dp_dataset_has_test_split(o->data);
    if (!*has_test)
        return 0;
    if (o->test_data[0] && (status = dp_dataset_open(o->test_data, 1, regression, o->seed, test)))
        return dp_fail_context(status, "--test-data %s", o->test_data);
    if (!o->test_data[0] && (status = dp_dataset_open(o->data, 1, regression, o->seed, test)))
        return dp_fail_context(status, "--data %s (its test split)", o->data);
    return 0;
}

/* --init's output layer's rows: a preset's class count where a checkpoint says it. */
static int classes_from_init(dp_options *o)
{
    const dp_model_spec *spec = &o->model;
    char name[DP_TENSOR_NAME_MAX]; /* a preset ends in its Linear */
    snprintf(name, sizeof name, "%s.weight", spec->modules[spec->count - 1].name);
    int ndim;
    int64_t dims[DP_TENSOR_MAX_DIMS];
    int status = dp_safetensors_tensor_shape(o->init_path, name, &ndim, dims);
    if (status)
        return dp_fail_context(status, "--init (the class count of --model %s)", spec->text);
    if (ndim != 2 || dims[0] < 1 || dims[0] > INT_MAX)
        return dp_fail(DP_EFORMAT, "--init %s: '%s' is not a [classes, features] weight", o->init_path, name);
    dp_model_spec_set_classes(&o->model, (int)dims[0]);
    return 0;
}

int dp_train_set_classes(dp_options *o, const dp_dataset *train, const dp_dataset *test)
{
    if (!dp_model_spec_needs_classes(&o->model))
        return 0;
    if (o->init_path[0])
        return classes_from_init(o);
    if (!train)
        return 0;
    int top = train->labels ? max_label(train) : train->outputs - 1;
    int test_top = test && test->labels ? max_label(test) : -1;
    dp_model_spec_set_classes(&o->model, (test_top > top ? test_top : top) + 1);
    return 0;
}

int dp_train_model_inputs(const dp_options *o, const dp_dataset *train)
{
    return o->model.from_layers ? o->model.inputs : train->dim;
}

int dp_train_check_image_shapes(const dp_options *o, const dp_dataset *train, const dp_dataset *test)
{
    const dp_dims *a = &train->sample, *b = &test->sample;
    int same = a->ndim == b->ndim;
    for (int i = 0; same && i < a->ndim; i++)
        same = a->dim[i] == b->dim[i];
    if (same || !dp_model_spec_takes_images(&o->model))
        return 0;
    char want[64], got[64];
    dp_dims_text(a, want, sizeof want);
    dp_dims_text(b, got, sizeof got);
    return dp_fail(DP_EINVAL, "test data %s has samples %s but the model (--model '%s') takes %s, the shape of the "
                   "training data", test->description, got, o->model.text, want);
}

int dp_train_check_data(const dp_options *o, const dp_dataset *data, const char *role, int inputs,
                        const dp_dims *sample)
{
    const dp_model_spec *spec = &o->model;
    const char *option = spec->from_layers ? "--layers" : "--model";
    /* The output width the model makes of the training data's samples, module by module. */
    dp_dims output;
    int status = dp_model_spec_output(spec, sample, &output);
    if (status)
        return status;
    int outputs = (int)dp_dims_numel(&output);
    dp_loss loss = dp_train_loss_for(o, data);
    if (spec->from_layers && data->dim != inputs)
        return dp_fail(DP_EINVAL, "%s data %s has %d features per sample but --layers starts with %d inputs",
                       role, data->description, data->dim, inputs);
    /* A --model spec takes its width from the training data: every other set must match it. */
    if (data->dim != inputs)
        return dp_fail(DP_EINVAL, "%s data %s has %d features per sample but the model (--model '%s') takes %d, "
                       "the width of the training data", role, data->description, data->dim, spec->text, inputs);
    if (loss == DP_LOSS_XENT && !data->labels)
        return dp_fail(DP_EINVAL, "--loss xent needs class labels but %s data %s has float targets",
                       role, data->labels_source);
    if (loss == DP_LOSS_MSE && !data->targets)
        return dp_fail(DP_EINVAL, "--loss mse needs float targets but %s data %s has class labels",
                       role, data->labels_source);
    if (!output.ndim) /* a module cannot take its input: building the model names it */
        return 0;
    int top = data->labels ? max_label(data) : 0;
    if (data->labels && top >= outputs)
        return dp_fail(DP_EINVAL, "%s labels in %s go up to %d but the output layer of %s '%s' has %d units",
                       role, data->labels_source, top, option, spec->text, outputs);
    if (data->targets && data->outputs != outputs)
        return dp_fail(DP_EINVAL, "%s targets in %s have %d columns but the output layer of %s '%s' has %d units",
                       role, data->labels_source, data->outputs, option, spec->text, outputs);
    return 0;
}

static const char *target_kind(const dp_dataset *data)
{
    return data->labels ? "class labels" : "float targets";
}

int dp_train_check_test_targets(const dp_options *o, const dp_dataset *train, const dp_dataset *test)
{
    if (!train->labels == !test->labels)
        return 0;
    const char *source = o->test_data[0] ? "--test-data" : "the test split of --data";
    const char *loss = dp_train_loss_for(o, train) == DP_LOSS_XENT ? "cross-entropy" : "MSE";
    return dp_fail(DP_EINVAL, "%s %s has %s but the training data %s has %s: one loss (%s%s) "
                   "serves both, so the test set cannot be evaluated with it",
                   source, test->labels_source, target_kind(test), train->labels_source,
                   target_kind(train), loss,
                   o->loss == DP_LOSS_AUTO ? ", chosen by --loss auto from the training data" : "");
}

/* Values a file can hold that no training produces: each would poison or wrap later steps. */
static const struct value_rule {
    const char *suffix; /* the end of the tensor's name */
    int64_t max;        /* an I64 tensor's largest value; every rule's smallest is 0 */
    const char *why;
} value_rules[] = {
    {"running_var", 0, "a variance is never negative; normalising by it would give NaN"},
    {"optimizer.exp_avg_sq", 0, "a mean of squares is never negative; its square root would be NaN"},
    /* The largest step a run takes: counting on from there cannot wrap 64 bits. */
    {"num_batches_tracked", DP_CHECKPOINT_MAX_STEP, "a count of batches is 0 or more, and counting on must not wrap"},
    {"optimizer.step", DP_CHECKPOINT_MAX_STEP, "a count of steps is 0 or more, and counting on must not wrap"},
};

static int ends_with(const char *name, const char *suffix)
{
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

static int check_finite(const char *option, const char *path, const dp_tensor_ref *ref)
{
    const float *values = ref->data;
    int64_t n = dp_tensor_numel(ref), bad = 0, first = -1;
    for (int64_t j = 0; j < n; j++)
        if (!isfinite(values[j]) && bad++ == 0)
            first = j;
    if (bad)
        return dp_fail(DP_ENUMERIC, "%s %s: tensor '%s' holds %lld non-finite value%s (the "
                       "first, %g, at flat index %lld): training from it would only "
                       "produce NaN", option, path, ref->name, (long long)bad,
                       bad == 1 ? "" : "s", (double)values[first], (long long)first);
    return 0;
}

static int check_range(const char *option, const char *path, const dp_tensor_ref *ref, const struct value_rule *rule)
{
    int counts = ref->dtype == DP_DTYPE_I64;
    const int64_t *ints = ref->data;
    const float *floats = ref->data;
    int64_t n = dp_tensor_numel(ref);
    for (int64_t j = 0; j < n; j++) {
        char text[64];
        if (counts && (ints[j] < 0 || ints[j] > rule->max))
            snprintf(text, sizeof text, "%lld (outside [0, %lld])", (long long)ints[j], (long long)rule->max);
        else if (!counts && floats[j] < 0.0f)
            snprintf(text, sizeof text, "%.9g (below 0)", (double)floats[j]);
        else
            continue;
        return dp_fail(DP_EFORMAT, "%s %s: tensor '%s' holds %s at flat index %lld: %s", option, path, ref->name,
                       text, (long long)j, rule->why);
    }
    return 0;
}

int dp_train_check_loaded(const char *option, const char *path, const dp_tensor_ref *refs, int count)
{
    for (int i = 0; i < count; i++) {
        int status = refs[i].dtype == DP_DTYPE_F32 ? check_finite(option, path, &refs[i]) : 0;
        for (size_t r = 0; !status && r < sizeof value_rules / sizeof *value_rules; r++)
            if (ends_with(refs[i].name, value_rules[r].suffix))
                status = check_range(option, path, &refs[i], &value_rules[r]);
        if (status)
            return status;
    }
    return 0;
}
