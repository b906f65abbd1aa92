/* synthetic:N,D,K: a teacher-labelled set generated whole in memory (dp_reader_in_memory). */
#include "src/data/readers.h"

#include "dp/error.h"
#include "dp/rng.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEACHER_HIDDEN 64
/* Small next to the weighted sums, so the biases shift units without saturating them. */
#define TEACHER_BIAS_SCALE 0.1

/* The D x 64 layer is nearly all the work (3e9 multiply-adds for 60000 x 784), so it is
 * float, which vectorises twice as wide; the cheap rest is double. */
typedef struct teacher {
    int dim, outputs;
    float *w1t;                   /* [D, 64]: W1 transposed, so each input is one axpy */
    double b1[TEACHER_HIDDEN];
    double *w2;                   /* [K, 64] */
} teacher;

static void teacher_free(teacher *t)
{
    free(t->w1t);
    free(t->w2);
}

/* Draws W1 row by row as [64, D], then b1, then W2, from teacher_seed alone. */
static int teacher_make(int dim, int outputs, uint64_t seed, teacher *t)
{
    memset(t, 0, sizeof *t);
    t->dim = dim;
    t->outputs = outputs;
    t->w1t = dp_alloc((size_t)dim * TEACHER_HIDDEN * sizeof(float), "synthetic teacher W1");
    t->w2 = dp_alloc((size_t)outputs * TEACHER_HIDDEN * sizeof(double), "synthetic teacher W2");
    if (!t->w1t || !t->w2) {
        teacher_free(t);
        return DP_ENOMEM;
    }
    dp_rng rng;
    dp_rng_seed(&rng, seed);
    double w1_scale = 1.0 / sqrt((double)dim);
    for (int j = 0; j < TEACHER_HIDDEN; j++)
        for (int d = 0; d < dim; d++)
            t->w1t[(size_t)d * TEACHER_HIDDEN + j] = (float)(dp_rng_normal(&rng) * w1_scale);
    for (int j = 0; j < TEACHER_HIDDEN; j++)
        t->b1[j] = dp_rng_normal(&rng) * TEACHER_BIAS_SCALE;
    double w2_scale = 1.0 / sqrt((double)TEACHER_HIDDEN);
    for (size_t i = 0; i < (size_t)outputs * TEACHER_HIDDEN; i++)
        t->w2[i] = dp_rng_normal(&rng) * w2_scale;
    return 0;
}

/* Each hidden sum accumulates over inputs in a fixed order, so vectorising across hidden
 * units (which the compiler may do) cannot change the result. */
static void teacher_forward(const teacher *t, const float *x, double *y)
{
    float sums[TEACHER_HIDDEN] = {0};
    for (int d = 0; d < t->dim; d++) {
        const float *row = t->w1t + (size_t)d * TEACHER_HIDDEN;
        for (int j = 0; j < TEACHER_HIDDEN; j++)
            sums[j] += row[j] * x[d];
    }
    double h[TEACHER_HIDDEN];
    for (int j = 0; j < TEACHER_HIDDEN; j++)
        h[j] = tanh(sums[j] + t->b1[j]);
    for (int k = 0; k < t->outputs; k++) {
        const double *row = t->w2 + (size_t)k * TEACHER_HIDDEN;
        double sum = 0.0;
        for (int j = 0; j < TEACHER_HIDDEN; j++)
            sum += row[j] * h[j];
        y[k] = sum;
    }
}

static int32_t argmax(const double *y, int n)
{
    int32_t best = 0;
    for (int k = 1; k < n; k++)
        if (y[k] > y[best])
            best = k;
    return best;
}

static int check_arguments(size_t count, int dim, int outputs, int regression)
{
    if (count == 0)
        return dp_fail(DP_EINVAL, "synthetic data needs at least one sample");
    if (dim <= 0)
        return dp_fail(DP_EINVAL, "synthetic data needs a positive input dimension, got %d", dim);
    if (!regression && outputs < 2)
        return dp_fail(DP_EINVAL, "synthetic classification needs at least 2 classes, got %d",
                       outputs);
    if (outputs <= 0)
        return dp_fail(DP_EINVAL, "synthetic regression needs at least 1 output, got %d",
                       outputs);
    size_t widest = (size_t)(dim > outputs ? dim : outputs);
    if (count > SIZE_MAX / sizeof(float) / widest)
        return dp_fail(DP_EINVAL, "synthetic data of %zu x %d (%d outputs) is too large", count,
                       dim, outputs);
    return 0;
}

static int allocate(size_t count, int dim, int outputs, int regression, dp_dataset *out)
{
    out->features = dp_alloc(count * (size_t)dim * sizeof(float), "synthetic features");
    if (regression)
        out->targets = dp_alloc(count * (size_t)outputs * sizeof(float), "synthetic targets");
    else
        out->labels = dp_alloc(count * sizeof(int32_t), "synthetic labels");
    if (!out->features || (!out->targets && !out->labels))
        return DP_ENOMEM;
    return 0;
}

static void generate(const teacher *t, size_t count, uint64_t sample_seed, double *y,
                     dp_dataset *out)
{
    dp_rng rng;
    dp_rng_seed(&rng, sample_seed);
    for (size_t i = 0; i < count; i++) {
        float *x = out->features + i * (size_t)t->dim;
        for (int d = 0; d < t->dim; d++)
            x[d] = 2.0f * dp_rng_uniform(&rng) - 1.0f;
        teacher_forward(t, x, y);
        if (out->labels) {
            out->labels[i] = argmax(y, t->outputs);
            continue;
        }
        float *target = out->targets + i * (size_t)t->outputs;
        for (int k = 0; k < t->outputs; k++)
            target[k] = (float)y[k];
    }
}

int dp_synthetic_make(size_t count, int dim, int outputs, int regression,
                      uint64_t teacher_seed, uint64_t sample_seed, dp_dataset *out)
{
    memset(out, 0, sizeof *out);
    int rc = check_arguments(count, dim, outputs, regression);
    if (rc)
        return rc;
    teacher t;
    if ((rc = teacher_make(dim, outputs, teacher_seed, &t)) != 0)
        return rc;
    double *y = dp_alloc((size_t)outputs * sizeof(double), "synthetic teacher outputs");
    rc = y ? allocate(count, dim, outputs, regression, out) : DP_ENOMEM;
    if (!rc)
        generate(&t, count, sample_seed, y, out);
    free(y);
    teacher_free(&t);
    if (rc) {
        dp_dataset_free(out);
        return rc;
    }
    out->count = count;
    out->dim = dim;
    out->sample = dp_dims_features(dim);
    out->outputs = outputs;
    out->reader = &dp_reader_in_memory;
    snprintf(out->description, sizeof out->description,
             "synthetic %s (%zu x %d, teacher %d-%d-%d)",
             regression ? "regression" : "classification", count, dim, dim, TEACHER_HIDDEN,
             outputs);
    snprintf(out->labels_source, sizeof out->labels_source,
             "synthetic teacher (seed 0x%016" PRIx64 ")", teacher_seed);
    return 0;
}

/* --- the spec synthetic:N,D,K --- */

/* Seed streams: one teacher shared by both splits, distinct samples per split. */
enum { SEED_TEACHER = 0, SEED_TRAIN_SAMPLES = 1, SEED_TEST_SAMPLES = 2 };

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
    const char *p = strchr(spec, ':') + 1;
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

int dp_open_synthetic_spec(const dp_open_request *r, dp_dataset *out)
{
    size_t count = 0;
    int dim = 0, outputs = 0;
    int rc = parse_synthetic_spec(r->spec, &count, &dim, &outputs);
    if (rc)
        return rc;
    if (r->split_test)
        count = count / 5 > 0 ? count / 5 : 1;
    uint64_t sample_stream = r->split_test ? SEED_TEST_SAMPLES : SEED_TRAIN_SAMPLES;
    rc = dp_synthetic_make(count, dim, outputs, r->regression, dp_rng_mix(r->seed, SEED_TEACHER),
                           dp_rng_mix(r->seed, sample_stream), out);
    if (!rc)
        snprintf(out->labels_source, sizeof out->labels_source, "%s", r->spec);
    return rc;
}
