/* The IDX forms of a spec: a directory of MNIST-named files, and "fashion-mnist" (the Debian
 * package's directory). The files themselves are read by idx.c. */
#include "src/data/readers.h"

#include "dp/error.h"
#include "dp/input_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FASHION_MNIST_HINT "; install the Debian package dataset-fashion-mnist"

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

enum { IDX_NAMES = 3 };

/* The MNIST names in the order tried: gzip, raw, then the dot-naming some mirrors use
 * (train-images.idx3-ubyte). kind is "images" or "labels", format "idx3" or "idx1". */
static void idx_names(const char *split, const char *kind, const char *format, char names[IDX_NAMES][64])
{
    snprintf(names[0], 64, "%s-%s-%s-ubyte.gz", split, kind, format);
    snprintf(names[1], 64, "%s-%s-%s-ubyte", split, kind, format);
    snprintf(names[2], 64, "%s-%s.%s-ubyte", split, kind, format);
}

/* The first of the names present in dir into *found (malloc'd; NULL: none), or DP_ENOMEM. */
static int first_present(const char *dir, char names[IDX_NAMES][64], char **found)
{
    *found = NULL;
    for (int i = 0; i < IDX_NAMES && !*found; i++) {
        char *path = join_path(dir, names[i]);
        if (!path)
            return DP_ENOMEM;
        if (is_file(path))
            *found = path;
        else
            free(path);
    }
    return 0;
}

static int find_idx_file(const char *dir, const char *split, const char *kind,
                         const char *format, const char *hint, char **found)
{
    char names[IDX_NAMES][64];
    idx_names(split, kind, format, names);
    int status = first_present(dir, names, found);
    if (status || *found)
        return status;
    return dp_fail(DP_EIO, "%s: no %s %s found (tried %s, %s, %s)%s", dir, split, kind,
                   names[0], names[1], names[2], hint);
}

int dp_idx_directory_has_test_split(const char *dir)
{
    char names[IDX_NAMES][64], *found = NULL;
    idx_names("t10k", "images", "idx3", names);
    /* Out of memory here: say there is one, and opening it reports the failure. */
    int present = first_present(dir, names, &found) != 0 || found;
    free(found);
    return present;
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

int dp_open_fashion_mnist(const dp_open_request *r, dp_dataset *out)
{
    return open_idx_dir(DP_FASHION_MNIST_DIR, r->split_test, FASHION_MNIST_HINT, out);
}

int dp_open_idx_directory(const dp_open_request *r, dp_dataset *out)
{
    struct stat st;
    if (stat(r->spec, &st) != 0)
        return dp_fail(DP_EIO, "'%s': no such data directory: %s (%s)", r->spec, strerror(errno),
                       DP_SPEC_FORMS);
    if (!S_ISDIR(st.st_mode))
        return dp_fail(DP_EIO, "'%s': no such data directory: it is %s (%s)", r->spec,
                       dp_file_kind(st.st_mode), DP_SPEC_FORMS);
    return open_idx_dir(r->spec, r->split_test, "", out);
}
