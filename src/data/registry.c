/* dp_dataset_open: the spec forms in the order they are tried, each with the reader that opens
 * it. A form is decided by what the path is, not by how it looks: an existing directory is a
 * directory even when its name has a comma or ".npy" in it. */
#include "src/data/readers.h"

#include "dp/error.h"

#include <string.h>
#include <sys/stat.h>

#define SYNTHETIC_PREFIX "synthetic:"
#define FASHION_MNIST_SPEC "fashion-mnist"

static int is_synthetic(const char *spec)
{
    return strncmp(spec, SYNTHETIC_PREFIX, strlen(SYNTHETIC_PREFIX)) == 0;
}

static int is_fashion_mnist(const char *spec)
{
    return strcmp(spec, FASHION_MNIST_SPEC) == 0;
}

static int is_npy_pair(const char *spec)
{
    struct stat st;
    return strchr(spec, ',') && !(stat(spec, &st) == 0 && S_ISDIR(st.st_mode));
}

static int always(const char *spec)
{
    (void)spec;
    return 1;
}

static int never(const char *spec)
{
    (void)spec;
    return 0;
}

/* The last form takes whatever is left, so an unknown spec is reported as a missing directory. */
static int is_anything(const char *spec)
{
    (void)spec;
    return 1;
}

static const struct spec_form {
    int (*matches)(const char *spec);
    int (*open)(const dp_open_request *r, dp_dataset *out);
    int (*has_test_split)(const char *spec); /* its own test split: a synthetic test draw, t10k files */
} forms[] = {
    {is_synthetic, dp_open_synthetic_spec, always},
    {is_fashion_mnist, dp_open_fashion_mnist, always},
    {is_npy_pair, dp_open_npy_pair_spec, never},
    {is_anything, dp_open_idx_directory, dp_idx_directory_has_test_split},
};

static const struct spec_form *form_of(const char *spec)
{
    size_t i = 0;
    while (!forms[i].matches(spec))
        i++;
    return &forms[i];
}

int dp_dataset_has_test_split(const char *spec)
{
    return spec && *spec && form_of(spec)->has_test_split(spec);
}

int dp_dataset_open(const char *spec, int split_test, int regression, uint64_t seed,
                    dp_dataset *out)
{
    memset(out, 0, sizeof *out);
    if (!spec || !*spec)
        return dp_fail(DP_EINVAL, "empty data spec (%s)", DP_SPEC_FORMS);
    dp_open_request request = {spec, split_test, regression, seed};
    return form_of(spec)->open(&request, out);
}
