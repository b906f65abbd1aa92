#include "dp/data.h"
#include "dp/error.h"
#include "dp/input_file.h"
#include "dp/rng.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SYNTHETIC_PREFIX "synthetic:"
#define FASHION_MNIST_SPEC "fashion-mnist"
#define FASHION_MNIST_HINT "; install the Debian package dataset-fashion-mnist"
#define SPEC_FORMS "expected fashion-mnist, DIR, FEATURES.npy,LABELS.npy or synthetic:N,D,K"

/* Seed streams: one teacher shared by both splits, distinct samples per split. */
enum { SEED_TEACHER = 0, SEED_TRAIN_SAMPLES = 1, SEED_TEST_SAMPLES = 2 };

/* --- synthetic:N,D,K --- */

/* Digits only: no sign, space or base prefix, which strtoull would quietly accept. No digits
 * at all leaves v at 0, which fails like an explicit 0. */
static int parse_positive(const char **pos, uint64_t max, uint64_t *value)
{
    const char *p = *pos;
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t digit = (uint64_t)(*p - '0');
        if (v > (max - digit) / 10)
            return -1;
        v = v * 10 + digit;
    }
    if (v == 0)
        return -1;
    *pos = p;
    *value = v;
    return 0;
}

static int parse_synthetic_spec(const char *spec, size_t *count, int *dim, int *outputs)
{
    const char *p = spec + strlen(SYNTHETIC_PREFIX);
    uint64_t n, d, k;
    if (parse_positive(&p, SIZE_MAX, &n) != 0 || *p++ != ',' ||
        parse_positive(&p, INT_MAX, &d) != 0 || *p++ != ',' ||
        parse_positive(&p, INT_MAX, &k) != 0 || *p != '\0')
        return dp_fail(DP_EINVAL,
                       "'%s': malformed synthetic spec (expected synthetic:N,D,K with positive "
                       "integers N samples, D inputs and K outputs, D and K at most %d)",
                       spec, INT_MAX);
    *count = (size_t)n;
    *dim = (int)d;
    *outputs = (int)k;
    return 0;
}

static int open_synthetic(const char *spec, int split_test, int regression, uint64_t seed,
                          dp_dataset *out)
{
    size_t count = 0;
    int dim = 0, outputs = 0;
    int rc = parse_synthetic_spec(spec, &count, &dim, &outputs);
    if (rc)
        return rc;
    if (split_test)
        count = count / 5 > 0 ? count / 5 : 1;
    uint64_t sample_stream = split_test ? SEED_TEST_SAMPLES : SEED_TRAIN_SAMPLES;
    rc = dp_synthetic_make(count, dim, outputs, regression, dp_rng_mix(seed, SEED_TEACHER),
                           dp_rng_mix(seed, sample_stream), out);
    if (!rc)
        snprintf(out->labels_source, sizeof out->labels_source, "%s", spec);
    return rc;
}

/* --- FEATURES.npy,LABELS.npy (split at the first comma) --- */

static int open_npy_pair(const char *spec, dp_dataset *out)
{
    size_t features_len = (size_t)(strchr(spec, ',') - spec);
    const char *labels_path = spec + features_len + 1;
    if (features_len == 0 || *labels_path == '\0')
        return dp_fail(DP_EINVAL, "'%s': expected FEATURES.npy,LABELS.npy", spec);
    char *features_path = dp_alloc(features_len + 1, "features path");
    if (!features_path)
        return DP_ENOMEM;
    memcpy(features_path, spec, features_len);
    features_path[features_len] = '\0';
    int rc = dp_npy_load_pair(features_path, labels_path, out);
    free(features_path);
    return rc;
}

/* --- IDX directory --- */

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && !S_ISDIR(st.st_mode);
}

static char *join_path(const char *dir, const char *name)
{
    size_t len = strlen(dir) + strlen(name) + 2;
    char *path = dp_alloc(len, "data file path");
    if (path)
        snprintf(path, len, "%s/%s", dir, name);
    return path;
}

/* Tries the MNIST names in order: gzip, raw, then the dot-naming some mirrors use
 * (train-images.idx3-ubyte). kind is "images" or "labels", format "idx3" or "idx1";
 * *found is malloc'd. */
static int find_idx_file(const char *dir, const char *split, const char *kind,
                         const char *format, const char *hint, char **found)
{
    char names[3][64];
    snprintf(names[0], sizeof names[0], "%s-%s-%s-ubyte.gz", split, kind, format);
    snprintf(names[1], sizeof names[1], "%s-%s-%s-ubyte", split, kind, format);
    snprintf(names[2], sizeof names[2], "%s-%s.%s-ubyte", split, kind, format);
    for (int i = 0; i < 3; i++) {
        char *path = join_path(dir, names[i]);
        if (!path)
            return DP_ENOMEM;
        if (is_file(path)) {
            *found = path;
            return 0;
        }
        free(path);
    }
    return dp_fail(DP_EIO, "%s: no %s %s found (tried %s, %s, %s)%s", dir, split, kind,
                   names[0], names[1], names[2], hint);
}

static int open_idx_dir(const char *dir, int split_test, const char *hint, dp_dataset *out)
{
    const char *split = split_test ? "t10k" : "train";
    char *images = NULL, *labels = NULL;
    int rc = find_idx_file(dir, split, "images", "idx3", hint, &images);
    if (!rc)
        rc = find_idx_file(dir, split, "labels", "idx1", hint, &labels);
    if (!rc)
        rc = dp_idx_load_pair(images, labels, out);
    free(images);
    free(labels);
    return rc;
}

/* --- dispatch --- */

typedef enum spec_kind { SPEC_SYNTHETIC, SPEC_FASHION_MNIST, SPEC_DIRECTORY, SPEC_NPY_PAIR } spec_kind;

/* Decided by what the path is, not by how it looks: an existing directory is a directory
 * even when its name has a comma or ".npy" in it; otherwise a comma makes a .npy pair. */
static spec_kind kind_of(const char *spec)
{
    if (strncmp(spec, SYNTHETIC_PREFIX, strlen(SYNTHETIC_PREFIX)) == 0)
        return SPEC_SYNTHETIC;
    if (strcmp(spec, FASHION_MNIST_SPEC) == 0)
        return SPEC_FASHION_MNIST;
    struct stat st;
    if (stat(spec, &st) == 0 && S_ISDIR(st.st_mode))
        return SPEC_DIRECTORY;
    return strchr(spec, ',') ? SPEC_NPY_PAIR : SPEC_DIRECTORY;
}

int dp_dataset_has_test_split(const char *spec)
{
    return spec && *spec && kind_of(spec) != SPEC_NPY_PAIR;
}

static int open_directory(const char *spec, int split_test, dp_dataset *out)
{
    struct stat st;
    if (stat(spec, &st) != 0)
        return dp_fail(DP_EIO, "'%s': no such data directory: %s (%s)", spec, strerror(errno),
                       SPEC_FORMS);
    if (!S_ISDIR(st.st_mode))
        return dp_fail(DP_EIO, "'%s': no such data directory: it is %s (%s)", spec,
                       dp_file_kind(st.st_mode), SPEC_FORMS);
    return open_idx_dir(spec, split_test, "", out);
}

int dp_dataset_open(const char *spec, int split_test, int regression, uint64_t seed,
                    dp_dataset *out)
{
    memset(out, 0, sizeof *out);
    if (!spec || !*spec)
        return dp_fail(DP_EINVAL, "empty data spec (%s)", SPEC_FORMS);
    switch (kind_of(spec)) {
    case SPEC_SYNTHETIC: return open_synthetic(spec, split_test, regression, seed, out);
    case SPEC_FASHION_MNIST:
        return open_idx_dir(DP_FASHION_MNIST_DIR, split_test, FASHION_MNIST_HINT, out);
    case SPEC_NPY_PAIR: return open_npy_pair(spec, out);
    default: return open_directory(spec, split_test, out);
    }
}

void dp_dataset_free(dp_dataset *ds)
{
    free(ds->features);
    free(ds->labels);
    free(ds->targets);
    memset(ds, 0, sizeof *ds);
}
