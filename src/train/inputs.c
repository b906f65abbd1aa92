/* What the run reads, checked before it is used: a test set judged by the training set's
 * loss must have the same kind of targets, and starting weights must be finite. */
#include "src/train/trainer.h"

#include "dp/error.h"

#include <math.h>

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

int dp_train_check_finite(const char *option, const char *path, const dp_tensor_ref *refs, int count)
{
    for (int i = 0; i < count; i++) {
        if (refs[i].dtype != DP_DTYPE_F32)
            continue;
        const float *values = refs[i].data;
        int64_t n = dp_tensor_numel(&refs[i]), bad = 0, first = -1;
        for (int64_t j = 0; j < n; j++)
            if (!isfinite(values[j]) && bad++ == 0)
                first = j;
        if (bad)
            return dp_fail(DP_ENUMERIC, "%s %s: tensor '%s' holds %lld non-finite value%s (the "
                           "first, %g, at flat index %lld): training from it would only "
                           "produce NaN", option, path, refs[i].name, (long long)bad,
                           bad == 1 ? "" : "s", (double)values[first], (long long)first);
    }
    return 0;
}
