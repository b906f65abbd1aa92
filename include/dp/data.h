/* Datasets behind one reader interface: open (dp_dataset_open: a registry of spec forms),
 * rows (count), sample shape (shape), and read rows by an index list into a caller's buffer
 * (dp_dataset_read_rows). Readers: IDX (MNIST, Fashion-MNIST; gzip or raw), NumPy .npy pairs
 * (features read by row from their file) and a synthetic teacher-labelled set. Labels and targets are
 * small and always held in memory; what each reader keeps of the features is said below. */
#ifndef DP_DATA_H
#define DP_DATA_H

#include "dp/tensor.h"

#include <stddef.h>
#include <stdint.h>

#define DP_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

typedef struct dp_dataset dp_dataset;

/* How an open dataset's features are read: one per kind of storage. */
typedef struct dp_reader {
    const char *name;
    /* Copies the features of rows index[0..n) (each < count) into x, [n, dim] floats. */
    int (*read_features)(const dp_dataset *ds, const size_t *index, size_t n, float *x);
    void (*close)(void *state);
} dp_reader;

struct dp_dataset {
    size_t count;         /* N samples */
    int dim;              /* D input features: the product of the sample shape */
    dp_dims sample;       /* one sample's shape: [D] features, IDX images [1, rows, cols] */
    int outputs;          /* labels: classes (max label + 1; K for synthetic); targets: K */
    const dp_reader *reader;
    void *reader_state;   /* the reader's own: an open file, the inflated pixels; or NULL */
    float *features;      /* the in-memory reader's [N, D] rows (synthetic); else NULL */
    int32_t *labels;      /* [N] class indices, or NULL for regression */
    float *targets;       /* [N, K] row-major regression targets, or NULL */
    char description[512]; /* for banners: where the data came from */
    char labels_source[512]; /* the file (or spec) labels came from, for error messages */
};

/* Features held whole in ds->features (synthetic data; datasets built in memory). */
extern const dp_reader dp_reader_in_memory;

/* Reads rows index[0..n) into caller buffers: x [n, dim]; labels [n] when the dataset has
 * labels, else targets [n, outputs] (the other may be NULL). Only those rows are touched. */
int dp_dataset_read_rows(const dp_dataset *ds, const size_t *index, size_t n, float *x,
                         int32_t *labels, float *targets);

/* --- IDX (big-endian header: magic 0x000008NN with NN dims, ubyte data only) --- */
typedef struct dp_idx {
    int ndim;
    uint32_t dims[3];
    size_t count;         /* product of dims */
    uint8_t *data;
} dp_idx;

/* Reads an IDX file, gzip-compressed or raw (detected from content, not the name).
 * expected_ndim is 3 for images, 1 for labels; a different magic is an error, and so are a
 * truncated header or data and bytes after the data (bytes after the end of a gzip stream are
 * ignored by zlib). Zero dims are accepted here. Before anything is allocated, the data the
 * header announces is checked against the file's size (exactly for a raw file, against
 * deflate's maximum expansion of 1032:1 for gzip), and the buffer then grows with the data
 * actually read, so a header announcing more than the file holds fails as truncated. path
 * must be a regular file (dp_open_input_fd: a FIFO or device is refused, DP_EIO). On failure
 * *out is zeroed. */
int dp_idx_read(const char *path, int expected_ndim, dp_idx *out);
void dp_idx_free(dp_idx *idx);

/* Opens images (sample shape [1, rows, cols]) and labels; counts must match and be non-zero.
 * The inflated pixels stay in memory as bytes (N x rows x cols) and are scaled to [0, 1]
 * (pixel / 255.0f) as rows are read. Every dp_*_load_pair, dp_synthetic_make and
 * dp_dataset_open leaves *out zeroed on failure, so dp_dataset_free is always safe. */
int dp_idx_load_pair(const char *images_path, const char *labels_path, dp_dataset *out);

/* --- NumPy .npy (format versions 1.0, 2.0, 3.0; C order; little-endian) --- */
enum dp_npy_dtype { DP_NPY_F32, DP_NPY_I32, DP_NPY_I64 };

#define DP_NPY_MAX_DIMS 4

typedef struct dp_npy {
    enum dp_npy_dtype dtype;
    int ndim;             /* 1 to DP_NPY_MAX_DIMS */
    size_t shape[DP_NPY_MAX_DIMS]; /* dims past ndim are 1 */
    void *data;
} dp_npy;

/* dtypes '<f4', '<i4', '<i8' only; data is decoded from little-endian on any host. The file
 * must be a regular file holding exactly the header and the shape's data: shorter is
 * truncated, longer is an error. On failure *out is zeroed. */
int dp_npy_read(const char *path, dp_npy *out);
void dp_npy_free(dp_npy *npy);
/* "float32", "int32" or "int64". */
const char *dp_npy_dtype_name(enum dp_npy_dtype dtype);
/* "(3,)", "(60000, 784)": the shape as numpy prints it. */
void dp_npy_format_shape(const dp_npy *array, char *buf, size_t size);
/* features as samples: a float32 array [N, ...] of N >= 1 rows whose row (*sample, the dims
 * after the first) holds at most INT_MAX values, as training and --predict take it. */
int dp_npy_features(const char *path, const dp_npy *features, dp_dims *sample);
/* Little-endian file values to host order, in place (a no-op on little-endian hosts). */
void dp_npy_from_little_endian(void *data, size_t bytes, enum dp_npy_dtype dtype);

/* A .npy file opened, not read: the same checks as dp_npy_read, then the file stays open
 * (fd) with array.data NULL, and rows are read on demand at data_offset (little-endian, as
 * in the file). On failure *out is zeroed with fd -1. */
typedef struct dp_npy_file {
    dp_npy array;
    int fd;
    size_t data_offset;
} dp_npy_file;
int dp_npy_open(const char *path, dp_npy_file *out);
void dp_npy_close(dp_npy_file *file);

/* Writes an array as .npy (format 1.0, little-endian, C order) through a temporary, fsync
 * and rename, so a failure never leaves a partial file under path. */
int dp_npy_write(const char *path, const dp_npy *array);

/* Features must be float32 [N, D] or [N, C, H, W] ([N, H, W] too) with every dim > 0; labels
 * int32/int64 [N] in [0, INT32_MAX) (converted to int32) or float32 [N, K] targets
 * (src/data/npy_pair.c). The features stay in their file (dp_npy_open): reading rows reads
 * those rows alone (pread, a run of consecutive rows at once) into the caller's buffer, so
 * no part of the file stays in the process's memory whatever the file's size. */
int dp_npy_load_pair(const char *features_path, const char *labels_path, dp_dataset *out);

/* --- synthetic, held whole in memory (dp_reader_in_memory): inputs uniform in [-1, 1],
 * labelled by a fixed random teacher network (D -> 64 tanh -> K) drawn from teacher_seed;
 * classification labels are the teacher's argmax (outputs = K; needs K >= 2), regression
 * targets its outputs. sample_seed picks the
 * inputs (the seeded dp_rng's uniforms in order, row-major), so a train and a test set share
 * a teacher but not samples. Deterministic for given arguments; about 0.5 s for
 * 60000 x 784 at -O2. --- */
int dp_synthetic_make(size_t count, int dim, int outputs, int regression,
                      uint64_t teacher_seed, uint64_t sample_seed, dp_dataset *out);

/* Resolves a --data / --test-data spec through the registry of forms (src/data/registry.c):
 *   "fashion-mnist"            the Debian package's files in DP_FASHION_MNIST_DIR
 *   "DIR"                      IDX files in MNIST naming: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
 *                              (.gz first, then raw, then dot-naming train-images.idx3-ubyte)
 *   "FEATURES.npy,LABELS.npy"  a pair of arrays (split at the first comma)
 *   "synthetic:N,D,K"          synthetic; the test split has max(N/5, 1) samples. Teacher seed
 *                              dp_rng_mix(seed, 0); samples dp_rng_mix(seed, 1) (train) or
 *                              dp_rng_mix(seed, 2) (test); labels_source is the spec
 * An existing directory is always a DIR (whatever its name holds: a comma, ".npy"); otherwise
 * a comma makes a .npy pair. Every data file must be a regular file: a FIFO or a device is
 * refused (dp_open_input_fd), so a pipe without a writer cannot block the job.
 * split_test selects the t10k files (DIR) or the test split (synthetic); it is ignored for
 * .npy pairs. regression asks synthetic data for targets instead of labels. */
int dp_dataset_open(const char *spec, int split_test, int regression, uint64_t seed,
                    dp_dataset *out);

/* 1 when spec has a test split of its own (fashion-mnist, DIR, synthetic), 0 for a .npy
 * pair, decided as dp_dataset_open decides the spec's form. */
int dp_dataset_has_test_split(const char *spec);

void dp_dataset_free(dp_dataset *ds);

#endif
