/* The spec forms dp_dataset_open knows (src/data/registry.c's table), one per reader file: a
 * new reader is its file, an open function here and one row in that table. */
#ifndef DP_DATA_READERS_H
#define DP_DATA_READERS_H

#include "dp/data.h"

#include <stdint.h>

/* What the caller of dp_dataset_open asked for, passed to every form's open function. */
typedef struct dp_open_request {
    const char *spec;
    int split_test, regression;
    uint64_t seed;
} dp_open_request;

/* What every form's open function says when a spec is none of them. */
#define DP_SPEC_FORMS "expected fashion-mnist, DIR, FEATURES.npy,LABELS.npy or synthetic:N,D,K"

int dp_open_synthetic_spec(const dp_open_request *r, dp_dataset *out);   /* synthetic.c */
int dp_open_npy_pair_spec(const dp_open_request *r, dp_dataset *out);    /* npy_pair.c */
int dp_open_fashion_mnist(const dp_open_request *r, dp_dataset *out);    /* idx_dir.c */
int dp_open_idx_directory(const dp_open_request *r, dp_dataset *out);    /* idx_dir.c */
/* Whether an IDX directory holds t10k images under any of the MNIST names (a training-only
 * directory has none: it trains without a test set). idx_dir.c */
int dp_idx_directory_has_test_split(const char *dir);

#endif
